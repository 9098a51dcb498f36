//! Runs and run journals, on both backends: one macro writes both (as for approvals and
//! sessions: ids and JSON travel as text and are cast on Postgres); only the journal
//! append differs (`runs/journal.rs`). Agents, which runs are started from, are in
//! `runs/agents.rs`.
//!
//! A run's events are numbered 1, 2, 3… by the one instance that holds the run's lease;
//! the primary key `(run_id, seq)` refuses a second writer. The last event and the run's
//! end state are written in one transaction. Leases and orphan claims span tenants by
//! nature (an instance drives runs of every tenant) and use the owner pool on Postgres.

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::stores::RunStatus;
use toolgate_core::{PrincipalId, RunId, TenantId};

use crate::model::{Before, NewRun, Page, RunEventRecord, RunFilter, RunFinish, RunRecord};
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{json, json_list, sql, uuid};
use crate::{Store, StoreError};

mod agents;
mod journal;

/// Runs an instance may take over: running ones whose lease ended before `$4`, and ones
/// waiting for approval that can go on (a decision not yet used, an approval expired by
/// `$5`, or a cancel request). Its first term is `run_live_idx`'s predicate, as written
/// (SQLite uses a partial index only for a term it finds), and `a.run_id is not null`
/// lets Postgres read a run's approvals from `approval_run_idx` even when it hashes them:
/// without either, every instance scanned both whole tables, history and all, at each of
/// its orphan scans (every 15 s).
const READY: &str = "r.status in ('running', 'awaiting_approval') \
    and ((r.status = 'running' and (r.lease_until is null or r.lease_until < $4)) \
    or (r.status = 'awaiting_approval' and (r.cancel_requested \
        or exists (select 1 from approval a where a.run_id = r.run_id and a.run_id is not null \
                   and a.used_at is null and (a.status <> 'pending' or a.expires_at <= $5)))))";

/// The runs [`READY`] to be taken over, oldest first, at most `$3`; `lock` skips those
/// another instance is taking.
pub(crate) fn claimable(lock: &str) -> String {
    format!("select r.run_id from run r where {READY} order by r.created_at limit $3{lock}")
}

/// Most steps one read of a run's journal returns (fewer once they hold
/// [`READ_BYTES`](crate::model::READ_BYTES)).
pub const STEPS_PER_READ: i64 = 1_000;

const SEQ_CONFLICT: &str = "another instance is writing this run";

fn event_kind(event: &Value) -> &str {
    event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
}

/// A `run` row as [`run_columns`] reads it: ids and JSON as text.
type RunRow = (
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    bool,
    Option<String>,
    Option<String>,
    bool,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
);

/// A `run_event` row: `seq, kind, payload, created_at`, the payload as text.
type StepRow = (i64, String, String, DateTime<Utc>);

/// The length of what a run's caller and agent decide (input, output, the agent's
/// configuration, the caller, the error): what [`read_bounded`](crate::read_bounded)
/// counts.
fn run_bytes(r: &RunRow) -> usize {
    r.5.len()
        + r.6.len()
        + r.7.len()
        + r.9.as_ref().map_or(0, String::len)
        + r.11.as_ref().map_or(0, String::len)
}

fn run_record(r: RunRow) -> Result<RunRecord, StoreError> {
    Ok(RunRecord {
        id: RunId(uuid(&r.0)?),
        tenant: TenantId(uuid(&r.1)?),
        agent_id: uuid(&r.2)?,
        agent_name: r.3,
        principal: PrincipalId(uuid(&r.4)?),
        auth: json(&r.5)?,
        agent_config: json(&r.6)?,
        input: r.7,
        status: RunStatus::parse(&r.8)
            .ok_or_else(|| StoreError::Corrupt(format!("run status {:?}", r.8)))?,
        output: r.9,
        best_effort: r.10,
        error: r.11,
        // Text `null` from an older writer reads as no usage, as SQL NULL does.
        usage: r
            .12
            .as_deref()
            .map(json::<Option<_>>)
            .transpose()?
            .flatten(),
        cancel_requested: r.13,
        created_at: r.14,
        finished_at: r.15,
    })
}

/// The columns of `run` in [`RunRow`] order, `t` casting a uuid or JSON column to text.
fn run_columns(t: &str) -> String {
    format!(
        "run_id{t}, tenant_id{t}, agent_id{t}, agent_name, principal_id{t}, auth{t}, agent_config{t}, input, status, \
         output, best_effort, error, usage{t}, cancel_requested, created_at, finished_at"
    )
}

/// Writes the run operations for one backend. `$conn`: its connection type; `$cross`:
/// the pool for statements across tenants; `$once`: the macro running one statement for
/// a tenant (see `sqlite_once`); `$now`: the time as the backend stores it; `$u`, `$j`:
/// the casts of a text parameter to a uuid and to JSON; `$jl`: to a JSON array
/// parameter; `$t`: of a uuid or JSON column to text; `$each`: the function expanding a
/// JSON array into rows of `value`; `$lock`: what a claim locks the rows it takes with.
macro_rules! run_store {
    (
        $store:ty, $conn:ty, $cross:ident, $once:ident, $now:path,
        $u:literal, $j:literal, $jl:literal, $t:literal, $each:literal, $lock:literal
    ) => {
        impl $store {
            pub async fn create_run(&self, tenant: TenantId, new: &NewRun) -> Result<(), StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                let at = $now();
                sqlx::query(sql(format!(
                    "insert into run (run_id, tenant_id, agent_id, agent_name, principal_id, auth, agent_config, input, status, owner, lease_until, created_at) \
                     values ($1{u}, $2{u}, $3{u}, $4, $5{u}, $6{j}, $7{j}, $8, 'running', $9, $10, $11)",
                    u = $u,
                    j = $j
                )))
                .bind(new.id.to_string())
                .bind(tenant.to_string())
                .bind(new.agent_id.to_string())
                .bind(&new.agent_name)
                .bind(new.principal.0.to_string())
                .bind(crate::text::encode(&new.auth)?)
                .bind(new.agent_config.to_string())
                .bind(&new.input)
                .bind(&new.owner)
                .bind(new.lease_until)
                .bind(at)
                .execute(&mut *tx)
                .await?;
                Self::insert_run_event(&mut tx, tenant, new.id, 1, &new.first_event, at).await?;
                tx.commit().await?;
                Ok(())
            }

            /// Inserts one event of a run's journal.
            pub(crate) async fn insert_run_event(
                conn: &mut $conn,
                tenant: TenantId,
                run: RunId,
                seq: i64,
                event: &Value,
                at: DateTime<Utc>,
            ) -> Result<(), StoreError> {
                sqlx::query(sql(format!(
                    "insert into run_event (run_id, tenant_id, seq, kind, payload, created_at) values ($1{u}, $2{u}, $3, $4, $5{j}, $6)",
                    u = $u,
                    j = $j
                )))
                .bind(run.to_string())
                .bind(tenant.to_string())
                .bind(seq)
                .bind(event_kind(event))
                // A model's or a tool's words may hold a NUL (see `text::jsonb_text`).
                .bind(crate::text::jsonb_text(event))
                .bind(at)
                .execute(conn)
                .await
                .map_err(|e| StoreError::on_constraint(e, "run_event_pkey", SEQ_CONFLICT))?;
                Ok(())
            }

            /// Ends a run (or parks it awaiting approval), with the last of its events.
            pub(crate) async fn finish_run(
                conn: &mut $conn,
                tenant: TenantId,
                run: RunId,
                f: &RunFinish,
                at: DateTime<Utc>,
            ) -> Result<(), StoreError> {
                sqlx::query(sql(format!(
                    "update run set status = $3, output = $4, best_effort = $5, error = $6, usage = $7{j}, \
                     finished_at = case when $3 = 'awaiting_approval' then null else $8 end, owner = null, lease_until = null \
                     where tenant_id = $1{u} and run_id = $2{u}",
                    u = $u,
                    j = $j
                )))
                .bind(tenant.to_string())
                .bind(run.to_string())
                .bind(f.status.as_str())
                .bind(f.output.as_deref().map(crate::text::without_nul))
                .bind(f.best_effort)
                .bind(f.error.as_deref().map(crate::text::without_nul))
                .bind(crate::text::encode(&f.usage)?)
                .bind(at)
                .execute(conn)
                .await?;
                Ok(())
            }

            pub async fn get_run(
                &self,
                tenant: TenantId,
                run: RunId,
            ) -> Result<Option<RunRecord>, StoreError> {
                let select = sql(format!(
                    "select {columns} from run where tenant_id = $1{u} and run_id = $2{u}",
                    columns = run_columns($t),
                    u = $u
                ));
                let row: Option<RunRow> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .bind(run.to_string())
                        .fetch_optional(conn)
                        .await?
                });
                row.map(run_record).transpose()
            }

            pub async fn list_runs(
                &self,
                tenant: TenantId,
                filter: RunFilter,
                before: Option<Before>,
                limit: i64,
            ) -> Result<Page<RunRecord>, StoreError> {
                let mut q = sqlx::QueryBuilder::<<$conn as sqlx::Connection>::Database>::new(
                    format!("select {columns} from run where tenant_id = ", columns = run_columns($t)),
                );
                q.push_bind(tenant.to_string()).push($u);
                if let Some(principal) = filter.principal {
                    q.push(" and principal_id = ").push_bind(principal.to_string()).push($u);
                }
                if let Some(status) = filter.status {
                    q.push(" and status = ").push_bind(status.as_str());
                }
                if let Some(before) = before {
                    before.push_to(&mut q, "run_id", $u);
                }
                q.push(" order by created_at desc, run_id desc limit ")
                    .push_bind(limit.saturating_add(1));
                $once!(self, tenant, |conn| {
                    let rows = q.build_query_as::<RunRow>().fetch(conn);
                    crate::read_bounded(rows, limit, run_bytes).await?
                })
                .try_map(run_record)
            }

            pub async fn run_steps(
                &self,
                tenant: TenantId,
                run: RunId,
                after: i64,
                limit: i64,
            ) -> Result<Page<RunEventRecord>, StoreError> {
                let select = sql(format!(
                    "select seq, kind, payload{t}, created_at from run_event \
                     where tenant_id = $1{u} and run_id = $2{u} and seq > $3 order by seq limit $4",
                    t = $t,
                    u = $u
                ));
                $once!(self, tenant, |conn| {
                    let rows = sqlx::query_as::<_, StepRow>(select)
                        .bind(tenant.to_string())
                        .bind(run.to_string())
                        .bind(after)
                        .bind(limit.saturating_add(1))
                        .fetch(conn);
                    crate::read_bounded(rows, limit, |r: &StepRow| r.1.len() + r.2.len()).await?
                })
                .try_map(|(seq, kind, payload, created_at)| {
                    Ok(RunEventRecord {
                        seq,
                        kind,
                        payload: json(&payload)?,
                        created_at,
                    })
                })
            }

            pub async fn run_turn_at(
                &self,
                tenant: TenantId,
                run: RunId,
                seq: i64,
            ) -> Result<Option<u32>, StoreError> {
                let select = sql(format!(
                    "select payload{t} from run_event where tenant_id = $1{u} and run_id = $2{u} \
                     and seq <= $3 and kind = 'turn_started' order by seq desc limit 1",
                    t = $t,
                    u = $u
                ));
                let row: Option<(String,)> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .bind(run.to_string())
                        .bind(seq)
                        .fetch_optional(conn)
                        .await?
                });
                row.map(|(payload,)| {
                    let payload: Value = json(&payload)?;
                    Ok(payload
                        .get("turn")
                        .and_then(Value::as_u64)
                        .map_or(0, |t| u32::try_from(t).unwrap_or(u32::MAX)))
                })
                .transpose()
            }

            pub async fn request_run_cancel(
                &self,
                tenant: TenantId,
                run: RunId,
            ) -> Result<bool, StoreError> {
                let update = sql(format!(
                    "update run set cancel_requested = true where tenant_id = $1{u} and run_id = $2{u} \
                     and status in ('running', 'awaiting_approval')",
                    u = $u
                ));
                let done = $once!(self, tenant, write |conn| {
                    sqlx::query(update)
                        .bind(tenant.to_string())
                        .bind(run.to_string())
                        .execute(conn)
                        .await?
                });
                Ok(done.rows_affected() == 1)
            }

            pub async fn renew_run_leases(
                &self,
                owner: &str,
                runs: &[RunId],
                until: DateTime<Utc>,
            ) -> Result<Vec<RunId>, StoreError> {
                let _turn = self.turn().await?;
                let rows: Vec<(String, bool)> = sqlx::query_as(sql(format!(
                    "update run set lease_until = $3 where run_id in (select value{u} from {each}($2{jl})) \
                     and owner = $1 and status = 'running' returning run_id{t}, cancel_requested",
                    u = $u,
                    t = $t,
                    jl = $jl,
                    each = $each
                )))
                .bind(owner)
                .bind(json_list(runs.iter().map(|r| r.0)))
                .bind(until)
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter()
                    .filter(|r| r.1)
                    .map(|r| Ok(RunId(uuid(&r.0)?)))
                    .collect()
            }

            pub async fn claim_orphaned_runs(
                &self,
                owner: &str,
                until: DateTime<Utc>,
                limit: i64,
                expired_before: DateTime<Utc>,
            ) -> Result<Vec<RunRecord>, StoreError> {
                let _turn = self.turn().await?;
                let rows: Vec<RunRow> = sqlx::query_as(sql(format!(
                    "update run set status = 'running', owner = $1, lease_until = $2 where run_id in \
                     ({claimable}) returning {columns}",
                    claimable = claimable($lock),
                    columns = run_columns($t)
                )))
                .bind(owner)
                .bind(until)
                .bind(limit)
                .bind(expired_before)
                .bind($now())
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter().map(run_record).collect()
            }
        }
    };
}

run_store!(
    PostgresStore,
    sqlx::PgConnection,
    owner,
    postgres_once,
    crate::now,
    "::uuid",
    "::jsonb",
    "::json",
    "::text",
    "json_array_elements_text",
    " for update of r skip locked"
);
run_store!(
    SqliteStore,
    sqlx::SqliteConnection,
    pool,
    sqlite_once,
    Utc::now,
    "",
    "",
    "",
    "",
    "json_each",
    ""
);

impl Store {
    pub async fn get_run(
        &self,
        tenant: TenantId,
        run: RunId,
    ) -> Result<Option<RunRecord>, StoreError> {
        dispatch!(self, s => s.get_run(tenant, run).await)
    }

    /// `tenant`'s runs as `filter` keeps them, newest first, `before` going on from a
    /// previous page.
    pub async fn list_runs(
        &self,
        tenant: TenantId,
        filter: RunFilter,
        before: Option<Before>,
        limit: i64,
    ) -> Result<Page<RunRecord>, StoreError> {
        dispatch!(self, s => s.list_runs(tenant, filter, before, limit).await)
    }

    /// A run's steps after sequence `after`, in order: at most `limit`, and no more than
    /// about [`READ_BYTES`](crate::model::READ_BYTES) of them (always one, however large),
    /// with whether more follow.
    pub async fn run_steps(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
        limit: i64,
    ) -> Result<Page<RunEventRecord>, StoreError> {
        dispatch!(self, s => s.run_steps(tenant, run, after, limit).await)
    }

    /// The turn a run was in at step `seq`: its latest `turn_started` up to there;
    /// `None` before the first one.
    pub async fn run_turn_at(
        &self,
        tenant: TenantId,
        run: RunId,
        seq: i64,
    ) -> Result<Option<u32>, StoreError> {
        dispatch!(self, s => s.run_turn_at(tenant, run, seq).await)
    }
}

/// The run seam of [`toolgate_core::stores`], for the agent crate's run supervisor.
#[async_trait::async_trait]
impl toolgate_core::stores::RunStore for Store {
    /// Records a new run and its first event (sequence 1), in one transaction.
    async fn create_run(&self, tenant: TenantId, new: &NewRun) -> Result<(), StoreError> {
        dispatch!(self, s => s.create_run(tenant, new).await)
    }

    /// Appends `events` to a run's journal, numbered from `first_seq`, in one
    /// transaction; with `finish`, also ends the run in it. [`StoreError::Conflict`]
    /// when a number is taken (another instance writes the run). Not `durable`: on
    /// Postgres the commit does not wait for its WAL flush (a crash may lose these events,
    /// never a later durable one's predecessors); a run's end is always durable.
    async fn append_run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        first_seq: i64,
        events: &[Value],
        finish: Option<&RunFinish>,
        durable: bool,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.append_run_events(tenant, run, first_seq, events, finish, durable).await)
    }

    /// A run's events after sequence `after`, in order.
    async fn run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
    ) -> Result<Vec<RunEventRecord>, StoreError> {
        let (mut events, mut after) = (Vec::new(), after);
        loop {
            let page = self.run_steps(tenant, run, after, STEPS_PER_READ).await?;
            after = page.items.last().map_or(after, |e| e.seq);
            events.extend(page.items);
            if !page.more {
                return Ok(events);
            }
        }
    }

    /// Marks a running run for cancellation (its driver sees it at the next lease
    /// renewal); false when it is not running.
    async fn request_run_cancel(&self, tenant: TenantId, run: RunId) -> Result<bool, StoreError> {
        dispatch!(self, s => s.request_run_cancel(tenant, run).await)
    }

    /// Extends `owner`'s leases on `runs`; returns those whose cancellation was asked.
    async fn renew_run_leases(
        &self,
        owner: &str,
        runs: &[RunId],
        until: DateTime<Utc>,
    ) -> Result<Vec<RunId>, StoreError> {
        dispatch!(self, s => s.renew_run_leases(owner, runs, until).await)
    }

    /// Takes over running runs whose lease ended before `expired_before` (their instance
    /// stopped), and runs waiting for approval that can go on (see `READY`): at most
    /// `limit`, each set running and leased to `owner` until `until`.
    async fn claim_orphaned_runs(
        &self,
        owner: &str,
        until: DateTime<Utc>,
        limit: i64,
        expired_before: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, StoreError> {
        dispatch!(self, s => s.claim_orphaned_runs(owner, until, limit, expired_before).await)
    }
}
