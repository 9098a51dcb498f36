//! The audit log on SQLite: batches appended on the writer's own connection,
//! the chain and its heads, checkpoints, security events.

use rusqlite::OptionalExtension as _;

use super::*;

/// The audit writer's own connection: rusqlite, used on the calling thread.
///
/// Through sqlx every statement was a round trip to the connection's worker thread, and
/// each batch's bound values were copied twice on the way (measured with
/// `bench/audit_rows.sh`: of 22 µs of CPU per row, about 9 went to the hop — the two
/// threads waking each other, the channel, the copies). The audit writer has a thread of
/// its own, so the batch runs there, synchronously: one prepared single-row insert
/// executed per record, the intents cleared, the heads moved, one commit.
pub(super) fn open_audit_conn(
    path: &Path,
    limits: crate::StoreLimits,
) -> Result<rusqlite::Connection, StoreError> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(limits.statement_timeout)?;
    // As the pool's connections are (see [`SqliteStore::open`]): every commit synced.
    conn.execute_batch("pragma synchronous = full; pragma foreign_keys = on;")?;
    Ok(conn)
}

/// Appends one batch on `conn` in one transaction: under the write lock (`BEGIN
/// IMMEDIATE`) the chain heads are read as stored, so another connection's appends are
/// always seen and a chain cannot fork.
pub(super) fn append_batch(
    conn: &mut rusqlite::Connection,
    records: &[AuditRecord],
) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    {
        let mut read_head =
            tx.prepare_cached("select seq, row_hash from audit_chain_head where tenant_id = ?1")?;
        let mut insert = tx.prepare_cached(INSERT_AUDIT)?;
        let mut clear = tx.prepare_cached("delete from call_intent where call_id = ?1")?;
        let mut heads: BTreeMap<TenantId, (i64, String)> = BTreeMap::new();
        for record in records {
            let head = match heads.entry(record.tenant) {
                std::collections::btree_map::Entry::Occupied(head) => head.into_mut(),
                std::collections::btree_map::Entry::Vacant(slot) => {
                    let stored = read_head
                        .query_row([Text::from(record.tenant.0).as_str()], |r| {
                            Ok((r.get(0)?, r.get(1)?))
                        })
                        .optional()?;
                    slot.insert(stored.unwrap_or_else(|| (0, GENESIS.to_owned())))
                }
            };
            let row = row_from_record(record, head.0 + 1, std::mem::take(&mut head.1));
            let call_id = Text::from(row.call_id);
            insert.execute(rusqlite::params![
                call_id.as_str(),
                Text::from(row.tenant.0).as_str(),
                row.seq,
                Text::from(row.principal.0).as_str(),
                row.adapter,
                row.tool,
                row.arguments,
                row.arguments_hash,
                row.outcome,
                row.error,
                row.duration_us,
                row.request_id,
                row.trace_id,
                row.run_id.map(|r| id(r.0)),
                row.step,
                row.client,
                timestamp(row.started_at),
                timestamp(row.finished_at),
                row.prev_hash,
                row.row_hash,
                row.approval_id.map(id),
                row.cache,
            ])?;
            clear.execute([call_id.as_str()])?;
            *head = (row.seq, row.row_hash);
        }
        let mut move_head = tx.prepare_cached(
            "insert into audit_chain_head (tenant_id, seq, row_hash) values (?1, ?2, ?3) \
             on conflict (tenant_id) do update set seq = excluded.seq, row_hash = excluded.row_hash",
        )?;
        for (tenant, (seq, hash)) in &heads {
            move_head.execute(rusqlite::params![Text::from(tenant.0).as_str(), seq, hash])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// A UUID as the store keeps it (hyphenated text, as [`id`] makes it), without a heap
/// allocation.
struct Text([u8; uuid::fmt::Hyphenated::LENGTH]);

impl From<Uuid> for Text {
    fn from(u: Uuid) -> Self {
        let mut buf = [0; uuid::fmt::Hyphenated::LENGTH];
        u.hyphenated().encode_lower(&mut buf);
        Text(buf)
    }
}

impl Text {
    fn as_str(&self) -> &str {
        // Only ASCII hex digits and hyphens were written.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// A time as sqlx's SQLite encoding writes it (RFC 3339, as many fractional digits as
/// needed, `+00:00`), so that rows from either connection compare and read back alike.
fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, false)
}

/// `audit_log`'s columns, in the order [`append_batch`] binds them.
macro_rules! audit_columns {
    () => {
        "call_id, tenant_id, seq, principal_id, adapter, tool, arguments, arguments_hash, outcome, error, duration_us, request_id, trace_id, run_id, step, client, started_at, finished_at, prev_hash, row_hash, approval_id, cache"
    };
}

const INSERT_AUDIT: &str = concat!(
    "insert into audit_log (",
    audit_columns!(),
    ") values (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)"
);

impl SqliteStore {
    /// Appends `records` in one transaction, extending each tenant's chain.
    ///
    /// Runs on the calling thread, blocking it for the transaction and its `fsync`: the
    /// audit writer calls it from a thread of its own (see [`crate::AuditWriter`]), the
    /// only other caller is start-up recovery. The connection is held from one batch to
    /// the next and dropped after a failed batch (its state is then unknown); the next
    /// batch opens a new one. Each batch waits its [`Turn`](super::Turn) at the write
    /// lock: a write of another task waiting before it goes first.
    pub async fn append_audit(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let _turn = self.turn().await?;
        let mut held = self
            .audit_conn
            .lock()
            .map_err(|_| StoreError::Corrupt("audit connection lock poisoned".into()))?;
        let conn = match &mut *held {
            Some(conn) => conn,
            None => held.insert(open_audit_conn(&self.path, self.limits)?),
        };
        let appended = append_batch(conn, records);
        if appended.is_err() {
            *held = None;
        }
        appended
    }
}
