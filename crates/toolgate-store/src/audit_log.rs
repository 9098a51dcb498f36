//! The audit log's reads, call intents and security events, on both backends (its head,
//! checkpoints and base are in `audit_anchors.rs`).
//!
//! One macro writes both, as for runs and approvals (ids and JSON read as text, cast on
//! Postgres). The batches of rows differ for a measured reason and stay with each
//! backend: they go through `toolgate_append_audit` on Postgres (`postgres/audit.rs`)
//! and through the audit writer's own rusqlite connection on SQLite
//! (`sqlite/audit.rs`).

use sqlx::QueryBuilder;
use toolgate_core::audit::AuditRecord;
use toolgate_core::{PrincipalId, RunId, TenantId};

use crate::chain::canonical_json;
use crate::model::{AuditFilter, AuditRow, CallTiming, Page};
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{sql, uuid, without_nul};
use crate::{StoreError, now};

/// An `audit_log` row as [`audit_columns`] reads it.
#[derive(sqlx::FromRow)]
struct AuditDbRow {
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
    started_at: chrono::DateTime<chrono::Utc>,
    finished_at: chrono::DateTime<chrono::Utc>,
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

    /// The length of what a call's size decides: what
    /// [`read_bounded`](crate::read_bounded) counts.
    fn text_bytes(&self) -> usize {
        self.arguments.len() + self.error.as_ref().map_or(0, String::len)
    }
}

/// A `call_intent` row as [`intent_columns`] reads it.
#[derive(sqlx::FromRow)]
struct IntentRow {
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
    started_at: chrono::DateTime<chrono::Utc>,
}

impl IntentRow {
    fn into_record(self) -> Result<AuditRecord, StoreError> {
        crate::interrupted(crate::IntentFields {
            call_id: uuid(&self.call_id)?,
            tenant: uuid(&self.tenant_id)?,
            principal: uuid(&self.principal_id)?,
            adapter: self.adapter,
            tool: self.tool,
            arguments: self.arguments,
            arguments_hash: self.arguments_hash,
            request_id: self.request_id,
            trace_id: self.trace_id,
            run_id: self.run_id.as_deref().map(uuid).transpose()?,
            step: self.step,
            client: self.client,
            started_at: self.started_at,
        })
    }
}

/// `audit_log`'s columns in [`AuditDbRow`], `t` casting a uuid or JSON column to text.
fn audit_columns(t: &str) -> String {
    format!(
        "call_id{t} as call_id, tenant_id{t} as tenant_id, seq, principal_id{t} as principal_id, adapter, tool, \
         arguments{t} as arguments, arguments_hash, outcome, error, duration_us, request_id, trace_id, \
         run_id{t} as run_id, step, client, approval_id{t} as approval_id, cache, started_at, finished_at, prev_hash, row_hash"
    )
}

/// `call_intent`'s columns in [`IntentRow`].
fn intent_columns(t: &str) -> String {
    format!(
        "call_id{t} as call_id, tenant_id{t} as tenant_id, principal_id{t} as principal_id, adapter, tool, \
         arguments{t} as arguments, arguments_hash, request_id, trace_id, run_id{t} as run_id, \
         cast(step as bigint) as step, client, started_at"
    )
}

/// Writes the audit log's reads for one backend. `$db`: its database type; `$cross`: the
/// pool for statements across tenants; `$app`: the pool writing what belongs to no
/// tenant (security events); `$once`: the macro running one statement for a tenant (see
/// `sqlite_once`); `$u`: the cast of a text parameter to a uuid, `$j` to JSON; `$t`: of a
/// uuid or JSON column to text.
macro_rules! audit_reads {
    ($store:ty, $db:ty, $cross:ident, $app:ident, $once:ident, $u:literal, $j:literal, $t:literal) => {
        impl $store {
            /// Records that a call with side effects is about to run (see
            /// [`AuditSink::record_intent`](toolgate_core::audit::AuditSink::record_intent)),
            /// durable before the tool starts.
            pub async fn record_call_intent(&self, record: &AuditRecord) -> Result<(), StoreError> {
                let insert = sql(format!(
                    "insert into call_intent (call_id, tenant_id, principal_id, adapter, tool, arguments, arguments_hash, \
                     request_id, trace_id, run_id, step, client, started_at) \
                     values ($1{u}, $2{u}, $3{u}, $4, $5, $6{j}, $7, $8, $9, $10{u}, $11, $12, $13)",
                    u = $u,
                    j = $j
                ));
                $once!(self, record.tenant, write |conn| {
                    sqlx::query(insert)
                        .bind(record.call_id.to_string())
                        .bind(record.tenant.to_string())
                        .bind(record.principal.to_string())
                        .bind(record.adapter.as_str())
                        .bind(without_nul(&record.tool))
                        .bind(canonical_json(&record.arguments))
                        .bind(&record.arguments_hash)
                        .bind(record.request_id.as_deref().map(without_nul))
                        .bind(record.trace_id.as_deref().map(without_nul))
                        .bind(record.run.map(|r| r.run_id.to_string()))
                        .bind(record.run.map(|r| i32::try_from(r.step).unwrap_or(i32::MAX)))
                        .bind(record.client.as_deref().map(without_nul))
                        .bind(chrono::DateTime::<chrono::Utc>::from(record.started_at))
                        .execute(conn)
                        .await?
                });
                Ok(())
            }

            /// Calls with side effects that started and were never recorded (the gateway
            /// stopped mid-call).
            pub async fn unfinished_calls(&self) -> Result<Vec<AuditRecord>, StoreError> {
                let rows: Vec<IntentRow> = sqlx::query_as(sql(format!(
                    "select {columns} from call_intent",
                    columns = intent_columns($t)
                )))
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter().map(IntentRow::into_record).collect()
            }

            /// A page of `tenant`'s rows matching `filter`, newest first (oldest first
            /// after `after_seq`), at most `limit` of them and about
            /// [`READ_BYTES`](crate::READ_BYTES) of text.
            pub async fn list_audit(
                &self,
                tenant: TenantId,
                filter: &AuditFilter,
                limit: i64,
            ) -> Result<Page<AuditRow>, StoreError> {
                let mut q = QueryBuilder::<$db>::new(format!(
                    "select {columns} from audit_log where tenant_id = ",
                    columns = audit_columns($t)
                ));
                q.push_bind(tenant.to_string()).push($u);
                if let Some(tool) = &filter.tool {
                    q.push(" and tool = ").push_bind(tool.clone());
                }
                if let Some(p) = filter.principal {
                    q.push(" and principal_id = ").push_bind(p.to_string()).push($u);
                }
                if let Some(a) = &filter.adapter {
                    q.push(" and adapter = ").push_bind(a.clone());
                }
                if let Some(o) = &filter.outcome {
                    q.push(" and outcome = ").push_bind(o.clone());
                }
                if let Some(r) = filter.run_id {
                    q.push(" and run_id = ").push_bind(r.to_string()).push($u);
                }
                if let Some(t) = filter.since {
                    q.push(" and started_at >= ").push_bind(t);
                }
                if let Some(t) = filter.until {
                    q.push(" and started_at < ").push_bind(t);
                }
                if let Some(c) = filter.call_id {
                    q.push(" and call_id = ").push_bind(c.to_string()).push($u);
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
                q.push_bind(limit.saturating_add(1));
                $once!(self, tenant, |conn| {
                    crate::read_bounded(q.build_query_as().fetch(conn), limit, AuditDbRow::text_bytes).await?
                })
                .try_map(AuditDbRow::into_model)
            }

            /// When each of `tenant`'s newest calls started since `since` finished, whether
            /// it went well and how long it took: at most `limit`, newest first, for
            /// summaries (a few bytes a call, whatever its arguments).
            pub async fn audit_timings(
                &self,
                tenant: TenantId,
                since: chrono::DateTime<chrono::Utc>,
                limit: i64,
            ) -> Result<Vec<CallTiming>, StoreError> {
                let select = sql(format!(
                    "select finished_at, outcome, duration_us from audit_log \
                     where tenant_id = $1{u} and started_at >= $2 order by seq desc limit $3",
                    u = $u
                ));
                let rows: Vec<(chrono::DateTime<chrono::Utc>, String, i64)> =
                    $once!(self, tenant, |conn| {
                        sqlx::query_as(select)
                            .bind(tenant.to_string())
                            .bind(since)
                            .bind(limit)
                            .fetch_all(conn)
                            .await?
                    });
                Ok(rows
                    .into_iter()
                    .map(|(finished_at, outcome, duration_us)| CallTiming {
                        finished_at,
                        ok: outcome == "ok",
                        duration_us,
                    })
                    .collect())
            }

            /// The next rows of a tenant's chain after row `after`, in order, for
            /// verification: at most `limit` and about [`READ_BYTES`](crate::READ_BYTES) of text.
            pub async fn audit_chain(
                &self,
                tenant: TenantId,
                after: i64,
                limit: i64,
            ) -> Result<Page<AuditRow>, StoreError> {
                let select = sql(format!(
                    "select {columns} from audit_log where tenant_id = $1{u} and seq > $2 order by seq limit $3",
                    columns = audit_columns($t),
                    u = $u
                ));
                $once!(self, tenant, |conn| {
                    let rows = sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .bind(after)
                        .bind(limit.saturating_add(1))
                        .fetch(conn);
                    crate::read_bounded(rows, limit, AuditDbRow::text_bytes).await?
                })
                .try_map(AuditDbRow::into_model)
            }

            /// Runs one batch of a delete across tenants (`$1` its `before`, `$2` its
            /// `limit`: see [`crate::batches`]) in its turn at the write lock; how many
            /// rows went.
            pub(crate) async fn delete_batch(
                &self,
                delete: &'static str,
                before: chrono::DateTime<chrono::Utc>,
                limit: i64,
            ) -> Result<u64, StoreError> {
                let _turn = self.turn().await?;
                let done = sqlx::query(delete)
                    .bind(before)
                    .bind(limit)
                    .execute(&self.$cross)
                    .await?;
                Ok(done.rows_affected())
            }

            /// Deletes up to `limit` failed-authentication records older than `before`;
            /// how many went.
            pub async fn delete_security_events(
                &self,
                before: chrono::DateTime<chrono::Utc>,
                limit: i64,
            ) -> Result<u64, StoreError> {
                let delete = "delete from security_event where security_event_id in \
                     (select security_event_id from security_event where occurred_at < $1 \
                      order by security_event_id limit $2)";
                self.delete_batch(delete, before, limit).await
            }

            /// Deletes up to `limit` approvals settled before `before` (decided, used or
            /// expired; every time they record is earlier) that no audit row names; how
            /// many went.
            pub async fn delete_settled_approvals(
                &self,
                before: chrono::DateTime<chrono::Utc>,
                limit: i64,
            ) -> Result<u64, StoreError> {
                let delete = "delete from approval where approval_id in \
                     (select a.approval_id from approval a where a.status <> 'pending' \
                      and a.created_at < $1 and a.expires_at < $1 \
                      and (a.decided_at is null or a.decided_at < $1) \
                      and (a.used_at is null or a.used_at < $1) \
                      and not exists (select 1 from audit_log l where l.approval_id = a.approval_id) \
                      order by a.approval_id limit $2)";
                self.delete_batch(delete, before, limit).await
            }

            /// Deletes up to `limit` runs that finished before `before` (completed, failed
            /// or cancelled), with their event journals, in one transaction; how many.
            pub async fn delete_finished_runs(
                &self,
                before: chrono::DateTime<chrono::Utc>,
                limit: i64,
            ) -> Result<u64, StoreError> {
                // Finished runs never change, so the same ordered choice names the same
                // runs in both statements.
                const CHOSEN: &str = "select run_id from run where status in ('completed', 'failed', 'cancelled') \
                                      and finished_at < $1 order by run_id limit $2";
                let mut tx = self.cross_tx().await?;
                sqlx::query(sql(format!("delete from run_event where run_id in ({CHOSEN})")))
                    .bind(before)
                    .bind(limit)
                    .execute(&mut *tx)
                    .await?;
                let runs = sqlx::query(sql(format!(
                    "delete from run where run_id in ({CHOSEN}) \
                     and not exists (select 1 from run_event e where e.run_id = run.run_id)"
                )))
                .bind(before)
                .bind(limit)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                tx.commit().await?;
                Ok(runs)
            }

            pub async fn record_security_event(
                &self,
                source: Option<&str>,
                route: &str,
                reason: &str,
            ) -> Result<(), StoreError> {
                let _turn = self.turn().await?;
                sqlx::query(
                    "insert into security_event (occurred_at, source, route, reason) values ($1, $2, $3, $4)",
                )
                .bind(now())
                .bind(source)
                .bind(route)
                .bind(reason)
                .execute(&self.$app)
                .await?;
                Ok(())
            }
        }
    };
}

audit_reads!(
    PostgresStore,
    sqlx::Postgres,
    owner,
    app,
    postgres_once,
    "::uuid",
    "::json",
    "::text"
);
audit_reads!(
    SqliteStore,
    sqlx::Sqlite,
    pool,
    pool,
    sqlite_once,
    "",
    "",
    ""
);
