//! The approval operations' SQL, written once for both backends by a macro: ids and
//! JSON travel as text and are cast on Postgres (see the module above for the rules
//! they apply).

use toolgate_core::stores::Change;

use super::*;

/// Approvals a call may still use or wait for: pending, or approved and not yet used.
pub(crate) const WAITING: &str =
    "(status = 'pending' or (status = 'approved' and used_at is null))";

/// Writes the same operations for both backends. `$conn`: the backend's connection;
/// `$u`: the cast of a text parameter to
/// a uuid; `$j`: to JSON; `$cj`: to JSON kept as written (the call's arguments, whose
/// hash must match when the approved call is made); `$t`: of a uuid or JSON column to
/// text.
macro_rules! approval_store {
    ($store:ty, $conn:ty, $cross:ident, $u:literal, $j:literal, $cj:literal, $t:literal) => {
        impl $store {
            fn approval_columns() -> String {
                format!(
                    "approval_id{t} as approval_id, tenant_id{t} as tenant_id, call_id{t} as call_id, tool, risk, adapter, \
                     arguments{t} as arguments, arguments_hash, call_arguments{t} as call_arguments, requester_id{t} as requester_id, \
                     requester_name, auth{t} as auth, run_id{t} as run_id, cast(step as bigint) as step, agent, status, reason, decided_by{t} as decided_by, \
                     decided_by_name, decided_at, expires_at, created_at, used_at, result{t} as result",
                    t = $t
                )
            }

            pub async fn approval_policy(
                &self,
                tenant: TenantId,
            ) -> Result<Option<Value>, StoreError> {
                let mut tx = self.tenant_read(tenant).await?;
                let row: Option<(String,)> = sqlx::query_as(sql(format!(
                    "select policy{t} from tenant_policy where tenant_id = $1{u}",
                    t = $t,
                    u = $u
                )))
                .bind(text(tenant))
                .fetch_optional(&mut *tx)
                .await?;
                tx.commit().await?;
                row.map(|(p,)| json(&p)).transpose()
            }

            pub async fn put_approval_policy(
                &self,
                tenant: TenantId,
                policy: &Value,
            ) -> Result<(), StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                sqlx::query(sql(format!(
                    "insert into tenant_policy (tenant_id, policy, updated_at) values ($1{u}, $2{j}, $3) \
                     on conflict (tenant_id) do update set policy = excluded.policy, updated_at = excluded.updated_at",
                    u = $u,
                    j = $j
                )))
                .bind(text(tenant))
                .bind(policy.to_string())
                .bind(Utc::now())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            pub async fn gate_approval(&self, request: &ApprovalRequest) -> Result<Gate, StoreError> {
                let tenant = request.tenant;
                let now = Utc::now();
                let mut tx = self.tenant_tx(tenant).await?;
                let columns = Self::approval_columns();
                // An approval is bound to the one call that asked for it: presented by that
                // call's run (an agent resuming) or by the deciding instance (a REST call);
                // else found by requester, tool and arguments only where the same call is
                // made again — by the same run at the same step, or by an MCP client
                // (which makes an approved call again) among MCP approvals outside any run.
                // An agent run's approval is never taken by another run or adapter, and a
                // decision on one call never lands on a later call nobody saw.
                let mut found: Option<ApprovalRow> = None;
                if let Some(presented) = request.presented {
                    found = sqlx::query_as(sql(format!(
                        "select {columns} from approval where tenant_id = $1{u} and approval_id = $2{u} \
                         and requester_id = $3{u} and tool = $4 and arguments_hash = $5",
                        u = $u
                    )))
                    .bind(text(tenant))
                    .bind(text(presented))
                    .bind(text(request.requester))
                    .bind(&request.tool)
                    .bind(&request.arguments_hash)
                    .fetch_optional(&mut *tx)
                    .await?;
                }
                // A presented approval asked for by another run is not this call's.
                if let Some(f) = &found {
                    let asked_by = f.run_id.as_deref().map(uuid).transpose()?;
                    if asked_by != request.run.map(|r| r.run_id.0) {
                        found = None;
                    }
                }
                if let (None, Some(run)) = (&found, request.run) {
                    found = sqlx::query_as(sql(format!(
                        "select {columns} from approval where tenant_id = $1{u} and requester_id = $2{u} \
                         and tool = $3 and arguments_hash = $4 and used_at is null and run_id = $5{u} and step = $6 \
                         order by created_at desc limit 1",
                        u = $u
                    )))
                    .bind(text(tenant))
                    .bind(text(request.requester))
                    .bind(&request.tool)
                    .bind(&request.arguments_hash)
                    .bind(text(run.run_id))
                    .bind(i64::from(run.step))
                    .fetch_optional(&mut *tx)
                    .await?;
                }
                let implicit = found.is_none()
                    && request.presented.is_none()
                    && request.run.is_none()
                    && request.adapter == toolgate_core::Adapter::Mcp;
                if implicit {
                    found = sqlx::query_as(sql(format!(
                        "select {columns} from approval where tenant_id = $1{u} and requester_id = $2{u} \
                         and tool = $3 and arguments_hash = $4 and used_at is null and adapter = $5 and run_id is null \
                         order by created_at desc limit 1",
                        u = $u
                    )))
                    .bind(text(tenant))
                    .bind(text(request.requester))
                    .bind(&request.tool)
                    .bind(&request.arguments_hash)
                    .bind(request.adapter.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
                }
                let found = found.map(ApprovalRow::into_record).transpose()?;
                // Settles `approval` for good, with `reason` if it gives one.
                let use_it = |approval: ApprovalId, status: &'static str, reason: Option<String>| {
                    sqlx::query(sql(format!(
                        "update approval set status = $3, used_at = coalesce(used_at, $4), call_arguments = null, \
                         reason = coalesce($5, reason) where tenant_id = $1{u} and approval_id = $2{u}",
                        u = $u
                    )))
                    .bind(text(tenant))
                    .bind(text(approval))
                    .bind(status)
                    .bind(now)
                    .bind(reason)
                };
                let settles = found.as_ref().map(|f| settle(f, now));
                // The found approval is updated (used, or settled for good).
                let updated = matches!(
                    settles,
                    Some(Settle::UseApproval | Settle::Denied | Settle::Expired)
                );
                let gate = match found.as_ref().zip(settles) {
                    Some((f, settles)) => match settles {
                        Settle::Pending => Some(Gate::Pending {
                            approval: f.id,
                            expires_at: f.expires_at.into(),
                        }),
                        // Used once: of two calls racing for one approval, one runs and the
                        // other asks anew.
                        Settle::UseApproval => {
                            let done = sqlx::query(sql(format!(
                                "update approval set used_at = $3, call_arguments = null \
                                 where tenant_id = $1{u} and approval_id = $2{u} and used_at is null",
                                u = $u
                            )))
                            .bind(text(tenant))
                            .bind(text(f.id))
                            .bind(now)
                            .execute(&mut *tx)
                            .await?;
                            (done.rows_affected() == 1).then_some(Gate::Approved { approval: f.id })
                        }
                        Settle::Denied => {
                            use_it(f.id, ApprovalStatus::Denied.as_str(), None).execute(&mut *tx).await?;
                            Some(denied(f, false))
                        }
                        // An expired (or lapsed) approval denies the call that presents
                        // it; a fresh call that merely matches it asks anew.
                        Settle::Expired => {
                            use_it(f.id, ApprovalStatus::Expired.as_str(), Some(expired_reason(f)))
                                .execute(&mut *tx)
                                .await?;
                            request.presented.map(|_| denied(f, true))
                        }
                        Settle::UsedUp => None,
                    },
                    None => None,
                };
                // A call that would ask anew is refused first when too many wait already.
                let refused = match gate {
                    Some(_) => None,
                    None => self.crowded(&mut tx, request, now).await?,
                };
                let (gate, inserted) = match gate.or(refused) {
                    Some(gate) => (gate, false),
                    None => {
                        let approval = ApprovalId::new();
                        let expires_at: DateTime<Utc> = request.expires_at.into();
                        sqlx::query(sql(format!(
                            "insert into approval (approval_id, tenant_id, call_id, tool, risk, adapter, arguments, arguments_hash, \
                             call_arguments, requester_id, requester_name, auth, run_id, step, agent, status, expires_at, created_at) \
                             values ($1{u}, $2{u}, $3{u}, $4, $5, $6, $7{j}, $8, $9{cj}, $10{u}, $11, $12{j}, $13{u}, $14, $15, 'pending', $16, $17)",
                            u = $u,
                            j = $j,
                            cj = $cj
                        )))
                        .bind(text(approval))
                        .bind(text(tenant))
                        .bind(text(request.call_id))
                        .bind(&request.tool)
                        .bind(request.risk.as_str())
                        .bind(request.adapter.as_str())
                        .bind(crate::text::jsonb_text(&request.arguments))
                        .bind(&request.arguments_hash)
                        .bind(request.call_arguments.to_string())
                        .bind(text(request.requester))
                        .bind(&request.requester_name)
                        .bind(crate::text::encode(&request.auth)?)
                        .bind(request.run.map(|r| text(r.run_id)))
                        .bind(request.run.map(|r| i64::from(r.step)))
                        .bind(&request.agent)
                        .bind(expires_at)
                        .bind(now)
                        .execute(&mut *tx)
                        .await?;
                        let asked = Gate::Pending {
                            approval,
                            expires_at: request.expires_at,
                        };
                        (asked, true)
                    }
                };
                let wrote = updated || inserted;
                let change = Change::Approvals(tenant);
                if wrote {
                    self.announce_in(&mut tx, change).await?;
                }
                tx.commit().await?;
                if wrote {
                    self.announced(change);
                }
                Ok(gate)
            }

            /// [`Gate::Crowded`] when as many of the requester's calls, or of its tenant's,
            /// wait for a person as may (`Quotas::pending_approvals*`). Counted before the
            /// insert, in its transaction: calls asking at the same moment on Postgres may
            /// pass a bound by as many as ask at once; SQLite's writes take turns.
            async fn crowded(
                &self,
                conn: &mut $conn,
                request: &ApprovalRequest,
                now: DateTime<Utc>,
            ) -> Result<Option<Gate>, StoreError> {
                let quotas = self.limits.quotas;
                let (mine, ours) = (
                    crate::Quotas::bound(quotas.pending_approvals_per_principal),
                    crate::Quotas::bound(quotas.pending_approvals),
                );
                // Each count stops at its bound: the work is at most the bound's rows.
                let waiting = format!(
                    "from approval where tenant_id = $1{u} and status = 'pending' \
                     and used_at is null and expires_at > $2",
                    u = $u
                );
                let (of_requester, of_tenant): (i64, i64) = sqlx::query_as(sql(format!(
                    "select (select count(*) from (select 1 {waiting} and requester_id = $3{u} limit $4) r), \
                     (select count(*) from (select 1 {waiting} limit $5) t)",
                    u = $u
                )))
                .bind(text(request.tenant))
                .bind(now)
                .bind(text(request.requester))
                .bind(mine)
                .bind(ours)
                .fetch_one(&mut *conn)
                .await?;
                for (count, most, by_requester) in [(of_requester, mine, true), (of_tenant, ours, false)] {
                    if count >= most {
                        return Ok(Some(Gate::Crowded {
                            waiting: u64::try_from(count).unwrap_or(0),
                            by_requester,
                        }));
                    }
                }
                Ok(None)
            }

            pub async fn list_approvals(
                &self,
                tenant: TenantId,
                status: Option<&str>,
                before: Option<Before>,
                limit: i64,
            ) -> Result<Page<ApprovalRecord>, StoreError> {
                let mut q = sqlx::QueryBuilder::<<$conn as sqlx::Connection>::Database>::new(
                    format!("select {} from approval where tenant_id = ", Self::approval_columns()),
                );
                q.push_bind(text(tenant)).push($u);
                // As [`ApprovalRecord::effective_status`] reads them: `pending` means still
                // open; `expired` includes pending ones past time and unused approved ones
                // past theirs (lapsed), which `approved` leaves out. One statement per
                // status, so each is planned for its own index.
                let now = Utc::now();
                match status {
                    None => {}
                    Some("pending") => {
                        q.push(" and status = 'pending' and expires_at > ").push_bind(now);
                    }
                    Some("expired") => {
                        q.push(format!(" and (status = 'expired' or ({WAITING} and expires_at <= "))
                            .push_bind(now)
                            .push("))");
                    }
                    Some("approved") => {
                        q.push(" and status = 'approved' and (used_at is not null or expires_at > ")
                            .push_bind(now)
                            .push(")");
                    }
                    Some(other) => {
                        q.push(" and status = ").push_bind(other.to_owned());
                    }
                }
                if let Some(before) = before {
                    before.push_to(&mut q, "approval_id", $u);
                }
                q.push(" order by created_at desc, approval_id desc limit ")
                    .push_bind(limit.saturating_add(1));
                let mut tx = self.tenant_read(tenant).await?;
                let rows = q.build_query_as::<ApprovalRow>().fetch(&mut *tx);
                let page = crate::read_bounded(rows, limit, ApprovalRow::text_bytes).await?;
                tx.commit().await?;
                page.try_map(ApprovalRow::into_record)
            }

            /// Where `tenant`'s newest `limit` approvals stand, without what they hold.
            pub async fn approval_states(
                &self,
                tenant: TenantId,
                limit: i64,
            ) -> Result<Vec<ApprovalState>, StoreError> {
                let mut tx = self.tenant_read(tenant).await?;
                let rows: Vec<(String, String, DateTime<Utc>, bool)> = sqlx::query_as(sql(format!(
                    "select approval_id{t}, status, expires_at, used_at is not null from approval \
                     where tenant_id = $1{u} order by created_at desc limit $2",
                    t = $t,
                    u = $u
                )))
                .bind(text(tenant))
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                rows.into_iter()
                    .map(|(id, status, expires_at, used)| {
                        Ok(ApprovalState {
                            id: ApprovalId(uuid(&id)?),
                            status: ApprovalStatus::parse(&status).ok_or_else(|| {
                                StoreError::Corrupt(format!("approval status {status:?}"))
                            })?,
                            expires_at,
                            used,
                        })
                    })
                    .collect()
            }

            pub async fn get_approval(
                &self,
                tenant: TenantId,
                approval: ApprovalId,
            ) -> Result<Option<ApprovalRecord>, StoreError> {
                self.approval_where(tenant, "approval_id", text(approval)).await
            }

            pub async fn approval_for_call(
                &self,
                tenant: TenantId,
                call: CallId,
            ) -> Result<Option<ApprovalRecord>, StoreError> {
                self.approval_where(tenant, "call_id", text(call)).await
            }

            async fn approval_where(
                &self,
                tenant: TenantId,
                column: &'static str,
                value: String,
            ) -> Result<Option<ApprovalRecord>, StoreError> {
                let mut tx = self.tenant_read(tenant).await?;
                let found = Self::select_approval(&mut tx, tenant, column, value).await?;
                tx.commit().await?;
                Ok(found)
            }

            /// The tenant's approval whose `column` is `value`, read in `conn`'s transaction.
            async fn select_approval(
                conn: &mut $conn,
                tenant: TenantId,
                column: &'static str,
                value: String,
            ) -> Result<Option<ApprovalRecord>, StoreError> {
                let row: Option<ApprovalRow> = sqlx::query_as(sql(format!(
                    "select {columns} from approval where tenant_id = $1{u} and {column} = $2{u}",
                    columns = Self::approval_columns(),
                    u = $u
                )))
                .bind(text(tenant))
                .bind(value)
                .fetch_optional(&mut *conn)
                .await?;
                row.map(ApprovalRow::into_record).transpose()
            }

            /// Records a decision on a pending approval. [`StoreError::Conflict`] when it
            /// was decided already or has expired; [`StoreError::NotFound`] when the tenant
            /// has no such approval.
            pub async fn decide_approval(
                &self,
                tenant: TenantId,
                approval: ApprovalId,
                decision: &Decision,
            ) -> Result<ApprovalRecord, StoreError> {
                let now = Utc::now();
                let mut tx = self.tenant_tx(tenant).await?;
                let status = if decision.approve {
                    ApprovalStatus::Approved
                } else {
                    ApprovalStatus::Denied
                }
                .as_str();
                // An approval is good for its call until `use_within` from now.
                let lapses_at = chrono::Duration::from_std(decision.use_within)
                    .ok()
                    .and_then(|d| now.checked_add_signed(d))
                    .unwrap_or(DateTime::<Utc>::MAX_UTC);
                // A denied call never runs: its arguments as given (secrets unmasked) go
                // with the decision, not when (if ever) the call is made again.
                let done = sqlx::query(sql(format!(
                    "update approval set status = $3, reason = $4, decided_by = $5{u}, decided_by_name = $6, decided_at = $7, \
                     call_arguments = case when $3 = 'approved' then call_arguments end, \
                     expires_at = case when $3 = 'approved' then $8 else expires_at end \
                     where tenant_id = $1{u} and approval_id = $2{u} and status = 'pending' and expires_at > $7",
                    u = $u
                )))
                .bind(text(tenant))
                .bind(text(approval))
                .bind(status)
                .bind(&decision.reason)
                .bind(text(decision.by))
                .bind(&decision.by_name)
                .bind(now)
                .bind(lapses_at)
                .execute(&mut *tx)
                .await?;
                let found =
                    Self::select_approval(&mut tx, tenant, "approval_id", text(approval)).await?;
                let decided = done.rows_affected() > 0;
                if decided {
                    self.announce_in(&mut tx, Change::Approvals(tenant)).await?;
                }
                tx.commit().await?;
                if decided {
                    self.announced(Change::Approvals(tenant));
                }
                let Some(record) = found else {
                    return Err(StoreError::NotFound(format!("no approval {approval} in your tenant")));
                };
                if done.rows_affected() == 0 {
                    return Err(StoreError::Conflict(match record.effective_status(now) {
                        ApprovalStatus::Expired => format!("approval {approval} has expired"),
                        other => format!("approval {approval} is already {other}"),
                    }));
                }
                Ok(record)
            }

            /// Stores the outcome of a REST call run after its approval.
            pub async fn set_approval_result(
                &self,
                tenant: TenantId,
                approval: ApprovalId,
                result: &Value,
            ) -> Result<(), StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                sqlx::query(sql(format!(
                    "update approval set result = $3{j} where tenant_id = $1{u} and approval_id = $2{u}",
                    u = $u,
                    j = $j
                )))
                .bind(text(tenant))
                .bind(text(approval))
                .bind(crate::text::jsonb_text(result))
                .execute(&mut *tx)
                .await?;
                // A caller waiting for the call's outcome (`Prefer: wait`) hears it now.
                self.announce_in(&mut tx, Change::Approvals(tenant)).await?;
                tx.commit().await?;
                self.announced(Change::Approvals(tenant));
                Ok(())
            }

            /// Expires the approvals of `run` still pending or approved and unused (it was
            /// cancelled: nobody waits for them, no call will use them); returns their ids.
            pub async fn expire_run_approvals(
                &self,
                tenant: TenantId,
                run: RunId,
                reason: &str,
            ) -> Result<Vec<ApprovalId>, StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                let rows: Vec<(String,)> = sqlx::query_as(sql(format!(
                    "update approval set status = 'expired', reason = $3, call_arguments = null \
                     where tenant_id = $1{u} and run_id = $2{u} and {WAITING} \
                     returning approval_id{t}",
                    u = $u,
                    t = $t
                )))
                .bind(text(tenant))
                .bind(text(run))
                .bind(reason)
                .fetch_all(&mut *tx)
                .await?;
                if !rows.is_empty() {
                    self.announce_in(&mut tx, Change::Approvals(tenant)).await?;
                }
                tx.commit().await?;
                if !rows.is_empty() {
                    self.announced(Change::Approvals(tenant));
                }
                rows.into_iter()
                    .map(|(a,)| Ok(ApprovalId(uuid(&a)?)))
                    .collect()
            }

            /// Marks every approval past its time as expired, in every tenant: pending
            /// ones nobody decided, approved ones whose call was not made (lapsed);
            /// returns the tenant and id of each.
            pub async fn expire_approvals(
                &self,
            ) -> Result<Vec<(TenantId, ApprovalId)>, StoreError> {
                let _turn = self.turn().await?;
                let rows: Vec<(String, String)> = sqlx::query_as(sql(format!(
                    "update approval set status = 'expired', call_arguments = null, \
                     reason = case when status = 'pending' then $2 else $3 end \
                     where {WAITING} and expires_at <= $1 \
                     returning tenant_id{t}, approval_id{t}",
                    t = $t
                )))
                .bind(Utc::now())
                .bind(EXPIRED_REASON)
                .bind(LAPSED_REASON)
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter()
                    .map(|(t, a)| Ok((TenantId(uuid(&t)?), ApprovalId(uuid(&a)?))))
                    .collect()
            }

            /// Keeps `result` for every approved REST call started before
            /// `started_before` without an outcome, in every tenant; returns them.
            pub async fn interrupt_approved_calls(
                &self,
                started_before: DateTime<Utc>,
                result: &Value,
            ) -> Result<Vec<(TenantId, ApprovalId)>, StoreError> {
                let mut tx = self.cross_tx().await?;
                let rows: Vec<(String, String)> = sqlx::query_as(sql(format!(
                    "update approval set result = $2{j} \
                     where status = 'approved' and adapter = 'rest' and run_id is null \
                     and used_at < $1 and result is null \
                     returning tenant_id{t}, approval_id{t}",
                    j = $j,
                    t = $t
                )))
                .bind(started_before)
                .bind(crate::text::jsonb_text(result))
                .fetch_all(&mut *tx)
                .await?;
                let calls = rows
                    .into_iter()
                    .map(|(t, a)| Ok((TenantId(uuid(&t)?), ApprovalId(uuid(&a)?))))
                    .collect::<Result<Vec<_>, StoreError>>()?;
                let tenants: std::collections::BTreeSet<TenantId> =
                    calls.iter().map(|(t, _)| *t).collect();
                // A caller waiting for one of these outcomes (`Prefer: wait`) hears it now.
                for tenant in &tenants {
                    self.announce_in(&mut tx, Change::Approvals(*tenant)).await?;
                }
                tx.commit().await?;
                for tenant in tenants {
                    self.announced(Change::Approvals(tenant));
                }
                Ok(calls)
            }
        }
    };
}

approval_store!(
    PostgresStore,
    sqlx::PgConnection,
    owner,
    "::uuid",
    "::jsonb",
    "::json",
    "::text"
);
approval_store!(SqliteStore, sqlx::SqliteConnection, pool, "", "", "", "");
