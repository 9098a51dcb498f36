//! The audit log on Postgres: batches appended through
//! `toolgate_append_audit` (synchronous commit forced), the chain and its heads,
//! checkpoints, security events.

use super::*;

/// A tenant's chain head: `(seq, row_hash)`, `(0, GENESIS)` before its first row.
pub(super) async fn read_head(
    tx: &mut Transaction<'_, Postgres>,
    tenant: TenantId,
    lock: bool,
) -> Result<(i64, String), StoreError> {
    let sql = if lock {
        "select seq, row_hash from audit_chain_head where tenant_id = $1 for update"
    } else {
        "select seq, row_hash from audit_chain_head where tenant_id = $1"
    };
    let head: Option<(i64, String)> = sqlx::query_as(sql)
        .bind(tenant.0)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(head.unwrap_or((0, GENESIS.to_owned())))
}

pub(super) fn chain_rows(records: &[&AuditRecord], head: &(i64, String)) -> Vec<AuditRow> {
    let (mut seq, mut prev) = head.clone();
    records
        .iter()
        .map(|record| {
            let row = row_from_record(record, seq + 1, prev.clone());
            seq = row.seq;
            prev = row.row_hash.clone();
            row
        })
        .collect()
}

/// Rows per statement, to bound a statement's size; a batch is one or more statements in
/// one transaction, so the commit is shared. (It was 16 while connections left Nagle's
/// algorithm on, see [`crate::nodelay`]: larger statements stalled ~40 ms each.)
pub(super) const ROWS_PER_STATEMENT: usize = 128;

/// Appends `rows` chunk by chunk, each chunk moving the head on from the previous one.
/// `false` (nothing written) when the first chunk finds the head moved by someone else;
/// after it succeeds, this transaction holds the head row's lock.
pub(super) async fn append_chunks(
    tx: &mut Transaction<'_, Postgres>,
    tenant: TenantId,
    expected: &(i64, String),
    rows: &[AuditRow],
) -> Result<bool, StoreError> {
    let mut head = expected.clone();
    for (i, chunk) in rows.chunks(ROWS_PER_STATEMENT).enumerate() {
        if !try_append(&mut **tx, tenant, &head, chunk).await? {
            if i == 0 {
                return Ok(false);
            }
            return Err(StoreError::Corrupt(
                "audit chain head moved while locked".into(),
            ));
        }
        if let Some(last) = chunk.last() {
            head = (last.seq, last.row_hash.clone());
        }
    }
    Ok(true)
}

/// Moves the head from `expected` to the last of `rows` and inserts `rows`, in one
/// statement; `false` (and nothing written) when the head is no longer at `expected`.
/// Rows travel as arrays, so the statement text is the same for every batch size:
/// prepared once per connection, never re-planned for a new shape.
pub(super) async fn try_append<'c>(
    db: impl sqlx::PgExecutor<'c>,
    tenant: TenantId,
    expected: &(i64, String),
    rows: &[AuditRow],
) -> Result<bool, StoreError> {
    let Some(last) = rows.last() else {
        return Ok(true);
    };
    let col = |f: fn(&AuditRow) -> String| rows.iter().map(f).collect::<Vec<String>>();
    let opt =
        |f: fn(&AuditRow) -> Option<String>| rows.iter().map(f).collect::<Vec<Option<String>>>();
    let inserted: i64 = sqlx::query_scalar(APPEND)
        .bind(tenant.0)
        .bind(last.seq)
        .bind(&last.row_hash)
        .bind(expected.0)
        .bind(&expected.1)
        .bind(rows.iter().map(|r| r.call_id).collect::<Vec<Uuid>>())
        .bind(rows.iter().map(|r| r.seq).collect::<Vec<i64>>())
        .bind(rows.iter().map(|r| r.principal.0).collect::<Vec<Uuid>>())
        .bind(col(|r| r.adapter.clone()))
        .bind(col(|r| r.tool.clone()))
        .bind(col(|r| r.arguments.clone()))
        .bind(col(|r| r.arguments_hash.clone()))
        .bind(col(|r| r.outcome.clone()))
        .bind(opt(|r| r.error.clone()))
        .bind(rows.iter().map(|r| r.duration_us).collect::<Vec<i64>>())
        .bind(opt(|r| r.request_id.clone()))
        .bind(opt(|r| r.trace_id.clone()))
        .bind(
            rows.iter()
                .map(|r| r.run_id.map(|id| id.0))
                .collect::<Vec<Option<Uuid>>>(),
        )
        .bind(rows.iter().map(|r| r.step).collect::<Vec<Option<i32>>>())
        .bind(opt(|r| r.client.clone()))
        .bind(
            rows.iter()
                .map(|r| r.started_at)
                .collect::<Vec<DateTime<Utc>>>(),
        )
        .bind(
            rows.iter()
                .map(|r| r.finished_at)
                .collect::<Vec<DateTime<Utc>>>(),
        )
        .bind(col(|r| r.prev_hash.clone()))
        .bind(col(|r| r.row_hash.clone()))
        .bind(
            rows.iter()
                .map(|r| r.approval_id)
                .collect::<Vec<Option<Uuid>>>(),
        )
        .bind(opt(|r| r.cache.clone()))
        .fetch_one(db)
        .await?;
    Ok(inserted == rows.len() as i64)
}

pub(super) const APPEND: &str = "select toolgate_append_audit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
    $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)";

impl PostgresStore {
    /// Appends `records` atomically, extending each tenant's chain.
    ///
    /// Per tenant it is one call of `toolgate_append_audit` (migration 0009): the chain
    /// head moves from the position this writer last saw to the new one *only if it is
    /// still there*, and the rows are inserted only if the head moved. Another instance
    /// having extended the chain meanwhile makes it a no-op; the head is then read under
    /// `for update` and the rows are chained again from it.
    ///
    /// The common case — one tenant, a head this writer knows, one statement's worth of
    /// rows — is that one call in autocommit: one round trip, its own transaction and
    /// commit. Otherwise the calls share an explicit transaction.
    pub async fn append_audit(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let mut held = self.audit_conn.lock().await;
        // The held connection may have died since the last batch (a server restart, an
        // idle timeout): the batch is then tried once more on a new connection, as the
        // pool's ping would have found it dead. Each attempt is one transaction; should
        // the first have committed unseen, the second fails on the calls' primary keys.
        if let Some(conn) = held.as_mut() {
            match self.append_on(conn, records).await {
                Ok(()) => return Ok(()),
                Err(err) => {
                    tracing::debug!(error = %err, "audit append failed on the held connection; trying a new one");
                    *held = None;
                }
            }
        }
        let conn = held.insert(self.app.acquire().await?.detach());
        let appended = self.append_on(conn, records).await;
        if appended.is_err() {
            *held = None;
        }
        appended
    }

    async fn append_on(
        &self,
        conn: &mut PgConnection,
        records: &[AuditRecord],
    ) -> Result<(), StoreError> {
        let mut by_tenant: BTreeMap<TenantId, Vec<&AuditRecord>> = BTreeMap::new();
        for record in records {
            by_tenant.entry(record.tenant).or_default().push(record);
        }
        let Some(first) = by_tenant.keys().next().copied() else {
            return Ok(());
        };
        if by_tenant.len() == 1
            && records.len() <= ROWS_PER_STATEMENT
            && let Some(expected) = self.cached_head(first)
        {
            let rows = chain_rows(&by_tenant[&first], &expected);
            let appended = try_append(&mut *conn, first, &expected, &rows).await;
            let moved = rows
                .last()
                .map(|last| (first, (last.seq, last.row_hash.clone())));
            self.settle_heads(matches!(appended, Ok(true)), moved, std::iter::once(first));
            // `Ok(false)`: another instance moved the head; lock it and chain again, below.
            if appended? {
                return Ok(());
            }
        }
        let mut tx = conn.begin_with(begin_for(first)).await?;
        let mut moved = Vec::new();
        for (tenant, records) in &by_tenant {
            if *tenant != first {
                set_tenant(&mut tx, *tenant).await?;
            }
            let expected = match self.cached_head(*tenant) {
                Some(head) => head,
                None => read_head(&mut tx, *tenant, false).await?,
            };
            let mut rows = chain_rows(records, &expected);
            if !append_chunks(&mut tx, *tenant, &expected, &rows).await? {
                let head = read_head(&mut tx, *tenant, true).await?;
                rows = chain_rows(records, &head);
                if !append_chunks(&mut tx, *tenant, &head, &rows).await? {
                    return Err(StoreError::Corrupt(
                        "audit chain head moved while locked".into(),
                    ));
                }
            }
            if let Some(last) = rows.last() {
                moved.push((*tenant, (last.seq, last.row_hash.clone())));
            }
        }
        let committed = tx.commit().await;
        self.settle_heads(committed.is_ok(), moved, by_tenant.keys().copied());
        Ok(committed?)
    }

    /// What an append did to the chain heads this writer knows: the heads it `moved`
    /// when it committed; otherwise none of `tenants`' heads is known (the next append
    /// reads them again).
    fn settle_heads(
        &self,
        committed: bool,
        moved: impl IntoIterator<Item = (TenantId, (i64, String))>,
        tenants: impl IntoIterator<Item = TenantId>,
    ) {
        let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
        if committed {
            heads.extend(moved);
        } else {
            for tenant in tenants {
                heads.remove(&tenant);
            }
        }
    }

    /// The chain head this writer last committed for `tenant`, if it knows one.
    fn cached_head(&self, tenant: TenantId) -> Option<(i64, String)> {
        self.heads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tenant)
            .cloned()
    }
}
