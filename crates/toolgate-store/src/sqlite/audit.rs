//! The audit log on SQLite: intents, batches appended in one round trip on a held
//! connection, the chain and its heads, checkpoints, security events.

use super::*;

/// The connection audit batches are written on, held from one batch to the next, with the
/// chain heads (`seq`, `row_hash`) its last commit left for each tenant it wrote.
#[derive(Debug)]
pub(super) struct AuditConn {
    conn: SqliteConnection,
    heads: BTreeMap<TenantId, (i64, String)>,
}

/// One audit batch (see [`SqliteStore::append_audit`]): extending the heads `audit`
/// remembers, as one query, or, unless `from_memory`, in two: the write lock with the
/// heads as stored, then the rest. On success `audit` remembers the heads committed.
pub(super) async fn append_batch(
    audit: &mut AuditConn,
    tenants: &BTreeSet<TenantId>,
    records: &[AuditRecord],
    from_memory: bool,
) -> Result<(), StoreError> {
    let mut heads: BTreeMap<TenantId, (i64, String)> = tenants
        .iter()
        .map(|t| (*t, (0, GENESIS.to_owned())))
        .collect();
    let begin = if from_memory {
        for (tenant, head) in &mut heads {
            // Always found (the caller checked); were it not, the genesis head's `seq`
            // would be taken and the batch retried from the stored heads.
            if let Some(known) = audit.heads.get(tenant) {
                head.clone_from(known);
            }
        }
        "begin immediate; "
    } else {
        // BEGIN IMMEDIATE: take the write lock first, so that no other connection
        // appends between this read of the heads and the rows that extend them.
        let found: Vec<(String, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "begin immediate; select tenant_id, seq, row_hash from audit_chain_head where tenant_id in ({})",
            quoted(tenants.iter().map(|t| t.0))
        )))
        .fetch_all(&mut audit.conn)
        .await?;
        for (tenant, seq, hash) in found {
            heads.insert(TenantId(uuid(&tenant)?), (seq, hash));
        }
        ""
    };
    let mut rows = Vec::with_capacity(records.len());
    for record in records {
        let head = heads
            .get_mut(&record.tenant)
            .ok_or_else(|| StoreError::Corrupt("chain head".into()))?;
        let row = row_from_record(record, head.0 + 1, std::mem::take(&mut head.1));
        *head = (row.seq, row.row_hash.clone());
        rows.push(row);
    }
    let mut batch =
        QueryBuilder::<Sqlite>::new(format!("{begin}insert into audit_log ({AUDIT_COLUMNS}) "));
    batch.push_values(&rows, |mut b, row| {
        b.push_bind(id(row.call_id))
            .push_bind(id(row.tenant.0))
            .push_bind(row.seq)
            .push_bind(id(row.principal.0))
            .push_bind(&row.adapter)
            .push_bind(&row.tool)
            .push_bind(&row.arguments)
            .push_bind(&row.arguments_hash)
            .push_bind(&row.outcome)
            .push_bind(&row.error)
            .push_bind(row.duration_us)
            .push_bind(&row.request_id)
            .push_bind(&row.trace_id)
            .push_bind(row.run_id.map(|r| id(r.0)))
            .push_bind(row.step)
            .push_bind(&row.client)
            .push_bind(row.started_at)
            .push_bind(row.finished_at)
            .push_bind(&row.prev_hash)
            .push_bind(&row.row_hash)
            .push_bind(row.approval_id.map(id))
            .push_bind(&row.cache);
    });
    batch.push("; delete from call_intent where call_id in (");
    let mut ids = batch.separated(", ");
    for row in &rows {
        ids.push_bind(id(row.call_id));
    }
    batch.push("); insert into audit_chain_head (tenant_id, seq, row_hash) ");
    batch.push_values(&heads, |mut b, (tenant, (seq, hash))| {
        b.push_bind(id(tenant.0)).push_bind(*seq).push_bind(hash);
    });
    batch.push(
        " on conflict (tenant_id) do update set seq = excluded.seq, row_hash = excluded.row_hash; commit",
    );
    batch.build().execute(&mut audit.conn).await?;
    audit.heads.extend(heads);
    Ok(())
}

#[derive(sqlx::FromRow)]
pub(super) struct AuditDbRow {
    call_id: String,
    tenant_id: String,
    seq: i64,
    principal_id: String,
    adapter: String,
    tool: String,
    arguments: String,
    arguments_hash: String,
    outcome: String,
    error: Option<String>,
    duration_us: i64,
    request_id: Option<String>,
    trace_id: Option<String>,
    run_id: Option<String>,
    step: Option<i32>,
    client: Option<String>,
    approval_id: Option<String>,
    cache: Option<String>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    prev_hash: String,
    row_hash: String,
}

impl AuditDbRow {
    fn into_model(self) -> Result<AuditRow, StoreError> {
        Ok(AuditRow {
            call_id: uuid(&self.call_id)?,
            tenant: TenantId(uuid(&self.tenant_id)?),
            seq: self.seq,
            principal: PrincipalId(uuid(&self.principal_id)?),
            adapter: self.adapter,
            tool: self.tool,
            arguments: self.arguments,
            arguments_hash: self.arguments_hash,
            outcome: self.outcome,
            error: self.error,
            duration_us: self.duration_us,
            request_id: self.request_id,
            trace_id: self.trace_id,
            run_id: self.run_id.as_deref().map(uuid).transpose()?.map(RunId),
            step: self.step,
            client: self.client,
            approval_id: self.approval_id.as_deref().map(uuid).transpose()?,
            cache: self.cache,
            started_at: self.started_at,
            finished_at: self.finished_at,
            prev_hash: self.prev_hash,
            row_hash: self.row_hash,
        })
    }
}

#[derive(sqlx::FromRow)]
pub(super) struct IntentRow {
    call_id: String,
    tenant_id: String,
    principal_id: String,
    adapter: String,
    tool: String,
    arguments: String,
    arguments_hash: String,
    request_id: Option<String>,
    trace_id: Option<String>,
    run_id: Option<String>,
    step: Option<i64>,
    client: Option<String>,
    started_at: DateTime<Utc>,
}

pub(super) const AUDIT_COLUMNS: &str = "call_id, tenant_id, seq, principal_id, adapter, tool, arguments, arguments_hash, outcome, error, duration_us, request_id, trace_id, run_id, step, client, started_at, finished_at, prev_hash, row_hash, approval_id, cache";

impl SqliteStore {
    pub async fn begin_call(&self, record: &AuditRecord) -> Result<(), StoreError> {
        sqlx::query(
            "insert into call_intent (call_id, tenant_id, principal_id, adapter, tool, arguments, arguments_hash, request_id, trace_id, run_id, step, client, started_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(id(record.call_id.0))
        .bind(id(record.tenant.0))
        .bind(id(record.principal.0))
        .bind(record.adapter.as_str())
        .bind(&record.tool)
        .bind(canonical_json(&record.arguments))
        .bind(&record.arguments_hash)
        .bind(&record.request_id)
        .bind(&record.trace_id)
        .bind(record.run.map(|r| id(r.run_id.0)))
        .bind(record.run.map(|r| i64::from(r.step)))
        .bind(&record.client)
        .bind(DateTime::<Utc>::from(record.started_at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Appends `records` in one transaction, extending each tenant's chain.
    ///
    /// Every statement is a round trip to the connection's own thread (sqlx runs SQLite
    /// there), so a batch is one: the write lock, the rows, the intents cleared, the chain
    /// heads moved and the commit, in one multi-statement query whose text depends only on
    /// the numbers of records and tenants (prepared once for each). The chain heads come
    /// from the previous batch on this connection; no read is needed to extend them. That
    /// is safe because `(tenant_id, seq)` is unique: if another connection appended since,
    /// the first row reuses a taken `seq` and the batch fails whole; it is then retried
    /// once with the heads read under the write lock, as a batch for a tenant this
    /// connection has not written is.
    pub async fn append_audit(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let tenants: BTreeSet<TenantId> = records.iter().map(|r| r.tenant).collect();
        if tenants.is_empty() {
            return Ok(());
        }
        let mut held = self.audit_conn.lock().await;
        let mut reread = false;
        loop {
            let audit = match &mut *held {
                Some(audit) => audit,
                None => held.insert(AuditConn {
                    conn: self.pool.acquire().await?.detach(),
                    heads: BTreeMap::new(),
                }),
            };
            let from_memory = !reread && tenants.iter().all(|t| audit.heads.contains_key(t));
            match append_batch(audit, &tenants, records, from_memory).await {
                Ok(()) => return Ok(()),
                Err(err) => {
                    let _ = sqlx::query("rollback").execute(&mut audit.conn).await;
                    *held = None;
                    if !from_memory {
                        return Err(err);
                    }
                    tracing::debug!(error = %err, "audit batch from remembered chain heads failed; retrying under the write lock");
                    reread = true;
                }
            }
        }
    }

    /// Calls with side effects that started and were never recorded (the gateway stopped
    /// mid-call).
    pub async fn unfinished_calls(&self) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<IntentRow> = sqlx::query_as(
            "select call_id, tenant_id, principal_id, adapter, tool, arguments, arguments_hash, request_id, trace_id, run_id, step, client, started_at from call_intent",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                crate::interrupted(crate::IntentFields {
                    call_id: uuid(&r.call_id)?,
                    tenant: uuid(&r.tenant_id)?,
                    principal: uuid(&r.principal_id)?,
                    adapter: r.adapter,
                    tool: r.tool,
                    arguments: r.arguments,
                    arguments_hash: r.arguments_hash,
                    request_id: r.request_id,
                    trace_id: r.trace_id,
                    run_id: r.run_id.as_deref().map(uuid).transpose()?,
                    step: r.step,
                    client: r.client,
                    started_at: r.started_at,
                })
            })
            .collect()
    }

    pub async fn list_audit(
        &self,
        tenant: TenantId,
        filter: &AuditFilter,
        limit: i64,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "select {AUDIT_COLUMNS} from audit_log where tenant_id = "
        ));
        q.push_bind(id(tenant.0));
        if let Some(tool) = &filter.tool {
            q.push(" and tool = ").push_bind(tool.clone());
        }
        if let Some(p) = filter.principal {
            q.push(" and principal_id = ").push_bind(id(p.0));
        }
        if let Some(a) = &filter.adapter {
            q.push(" and adapter = ").push_bind(a.clone());
        }
        if let Some(o) = &filter.outcome {
            q.push(" and outcome = ").push_bind(o.clone());
        }
        if let Some(r) = filter.run_id {
            q.push(" and run_id = ").push_bind(id(r.0));
        }
        if let Some(t) = filter.since {
            q.push(" and started_at >= ").push_bind(t);
        }
        if let Some(t) = filter.until {
            q.push(" and started_at < ").push_bind(t);
        }
        if let Some(c) = filter.call_id {
            q.push(" and call_id = ").push_bind(id(c));
        }
        if let Some(t) = &filter.trace_id {
            q.push(" and trace_id = ").push_bind(t.clone());
        }
        if let Some(s) = filter.before_seq {
            q.push(" and seq < ").push_bind(s);
        }
        match filter.after_seq {
            Some(s) => q
                .push(" and seq > ")
                .push_bind(s)
                .push(" order by seq asc limit "),
            None => q.push(" order by seq desc limit "),
        };
        q.push_bind(limit);
        let rows: Vec<AuditDbRow> = q.build_query_as().fetch_all(&self.pool).await?;
        rows.into_iter().map(AuditDbRow::into_model).collect()
    }

    /// A tenant's stored chain head, `None` before its first row.
    pub async fn audit_head(&self, tenant: TenantId) -> Result<Option<(i64, String)>, StoreError> {
        Ok(
            sqlx::query_as("select seq, row_hash from audit_chain_head where tenant_id = $1")
                .bind(id(tenant.0))
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Every tenant's chain head that no checkpoint covers yet.
    pub async fn unsigned_heads(&self) -> Result<Vec<(TenantId, i64, String)>, StoreError> {
        let rows: Vec<(String, i64, String)> = sqlx::query_as(
            "select h.tenant_id, h.seq, h.row_hash from audit_chain_head h \
             where h.seq > coalesce((select max(c.seq) from audit_checkpoint c where c.tenant_id = h.tenant_id), 0)",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(t, seq, hash)| Ok((TenantId(uuid(&t)?), seq, hash)))
            .collect()
    }

    pub async fn insert_checkpoint(&self, cp: &Checkpoint) -> Result<(), StoreError> {
        sqlx::query(
            "insert into audit_checkpoint (tenant_id, seq, row_hash, key_id, signature, signed_at) \
             values ($1, $2, $3, $4, $5, $6) on conflict do nothing",
        )
        .bind(id(cp.tenant.0))
        .bind(cp.seq)
        .bind(&cp.row_hash)
        .bind(&cp.key_id)
        .bind(&cp.signature)
        .bind(cp.signed_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A tenant's checkpoints in chain order.
    pub async fn checkpoints(&self, tenant: TenantId) -> Result<Vec<Checkpoint>, StoreError> {
        let rows: Vec<crate::checkpoint::CheckpointRow> = sqlx::query_as(
            "select seq, row_hash, key_id, signature, signed_at from audit_checkpoint \
             where tenant_id = $1 order by seq",
        )
        .bind(id(tenant.0))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| Checkpoint::from_row(tenant, row))
            .collect())
    }

    /// A tenant's whole chain in order, for verification.
    pub async fn audit_chain(&self, tenant: TenantId) -> Result<Vec<AuditRow>, StoreError> {
        let rows: Vec<AuditDbRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {AUDIT_COLUMNS} from audit_log where tenant_id = $1 order by seq"
        )))
        .bind(id(tenant.0))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AuditDbRow::into_model).collect()
    }

    pub async fn record_security_event(
        &self,
        source: Option<&str>,
        route: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("insert into security_event (occurred_at, source, route, reason) values ($1, $2, $3, $4)")
            .bind(now())
            .bind(source)
            .bind(route)
            .bind(reason)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
