//! What a tenant's audit chain is verified against and pruned to, on both backends: its
//! stored head, its signed checkpoints and its base (the checkpoint its rows were pruned
//! through). One macro writes both, as for the audit log's reads (`audit_log.rs`);
//! [`Store`](crate::Store)'s verification and retention (`integrity.rs`) use them.

use chrono::{DateTime, Utc};
use toolgate_core::TenantId;

use crate::checkpoint::{Checkpoint, CheckpointRow};
use crate::model::{AuditBase, Page};
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{sql, uuid};
use crate::{StoreError, now};

/// Writes the operations for one backend. `$cross`: the pool for statements across
/// tenants; `$once`: the macro running one statement for a tenant (see `sqlite_once`);
/// `$u`: the cast of a text parameter to a uuid; `$t`: of a uuid column to text; `$lock`:
/// the statement that makes a tenant's base moves take turns (none on SQLite, whose
/// writes already do).
macro_rules! audit_anchors {
    ($store:ty, $cross:ident, $once:ident, $u:literal, $t:literal, $lock:literal) => {
        impl $store {
            /// A tenant's base: the newest checkpoint its rows were pruned through.
            pub async fn audit_base(&self, tenant: TenantId) -> Result<Option<AuditBase>, StoreError> {
                let select = sql(format!(
                    "select p.seq, c.row_hash, p.pruned_at from audit_prune p \
                     join audit_checkpoint c on c.tenant_id = p.tenant_id and c.seq = p.seq \
                     where p.tenant_id = $1{u} order by p.seq desc limit 1",
                    u = $u
                ));
                let row: Option<(i64, String, chrono::DateTime<chrono::Utc>)> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .fetch_optional(conn)
                        .await?
                });
                Ok(row.map(|(seq, row_hash, pruned_at)| AuditBase { seq, row_hash, pruned_at }))
            }

            /// The newest of `tenant`'s checkpoints signed before `before`.
            pub async fn checkpoint_before(
                &self,
                tenant: TenantId,
                before: chrono::DateTime<chrono::Utc>,
            ) -> Result<Option<i64>, StoreError> {
                let select = sql(format!(
                    "select max(seq) from audit_checkpoint where tenant_id = $1{u} and signed_at < $2",
                    u = $u
                ));
                Ok(sqlx::query_scalar(select)
                    .bind(tenant.to_string())
                    .bind(before)
                    .fetch_one(&self.$cross)
                    .await?)
            }

            /// Records checkpoint `seq` as `tenant`'s base (the database refuses one that is
            /// not a checkpoint); `false` when the base is already there or past it (another
            /// prune got there first). As the connecting role on Postgres: the gateway's role
            /// cannot.
            pub async fn move_audit_base(&self, tenant: TenantId, seq: i64) -> Result<bool, StoreError> {
                let insert = sql(format!(
                    "insert into audit_prune (tenant_id, seq, pruned_at) select $1{u}, $2, $3 \
                     where $2 > coalesce((select max(seq) from audit_prune where tenant_id = $1{u}), 0) \
                     on conflict do nothing",
                    u = $u
                ));
                // Two prunes of a tenant at once take turns: on Postgres the second's
                // insert could otherwise find no newer base in its snapshot, then meet the
                // first's, committed meanwhile, in the forward-only trigger, and fail.
                let mut tx = self.cross_tx().await?;
                sqlx::query($lock).bind(tenant.to_string()).execute(&mut *tx).await?;
                let moved = sqlx::query(insert)
                    .bind(tenant.to_string())
                    .bind(seq)
                    .bind(now())
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
                    == 1;
                tx.commit().await?;
                Ok(moved)
            }

            /// Deletes the oldest `limit` of `tenant`'s checkpoints below `base` (they sign
            /// pruned rows), but not those earlier bases were moved to; how many went.
            pub async fn delete_pruned_checkpoints(&self, tenant: TenantId, base: i64, limit: i64) -> Result<u64, StoreError> {
                let delete = sql(format!(
                    "delete from audit_checkpoint where tenant_id = $1{u} and seq in \
                     (select c.seq from audit_checkpoint c where c.tenant_id = $1{u} and c.seq < $2 \
                      and not exists (select 1 from audit_prune p where p.tenant_id = c.tenant_id and p.seq = c.seq) \
                      order by c.seq limit $3)",
                    u = $u
                ));
                let _turn = self.turn().await?;
                Ok(sqlx::query(delete)
                    .bind(tenant.to_string())
                    .bind(base)
                    .bind(limit)
                    .execute(&self.$cross)
                    .await?
                    .rows_affected())
            }

            /// Deletes the oldest `limit` of `tenant`'s rows at or below `through` (its base);
            /// how many went.
            pub async fn delete_pruned(&self, tenant: TenantId, through: i64, limit: i64) -> Result<u64, StoreError> {
                let delete = sql(format!(
                    "delete from audit_log where tenant_id = $1{u} and seq in \
                     (select seq from audit_log where tenant_id = $1{u} and seq <= $2 order by seq limit $3)",
                    u = $u
                ));
                let _turn = self.turn().await?;
                Ok(sqlx::query(delete)
                    .bind(tenant.to_string())
                    .bind(through)
                    .bind(limit)
                    .execute(&self.$cross)
                    .await?
                    .rows_affected())
            }

            /// A tenant's stored chain head, `None` before its first row.
            pub async fn audit_head(
                &self,
                tenant: TenantId,
            ) -> Result<Option<(i64, String)>, StoreError> {
                let select = sql(format!(
                    "select seq, row_hash from audit_chain_head where tenant_id = $1{u}",
                    u = $u
                ));
                Ok($once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .fetch_optional(conn)
                        .await?
                }))
            }

            /// Every tenant's chain head that no checkpoint covers yet.
            pub async fn unsigned_heads(&self) -> Result<Vec<(TenantId, i64, String)>, StoreError> {
                let rows: Vec<(String, i64, String)> = sqlx::query_as(sql(format!(
                    "select h.tenant_id{t}, h.seq, h.row_hash from audit_chain_head h \
                     where h.seq > coalesce((select max(c.seq) from audit_checkpoint c where c.tenant_id = h.tenant_id), 0)",
                    t = $t
                )))
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter()
                    .map(|(t, seq, hash)| Ok((TenantId(uuid(&t)?), seq, hash)))
                    .collect()
            }

            pub async fn insert_checkpoint(&self, cp: &Checkpoint) -> Result<(), StoreError> {
                let insert = sql(format!(
                    "insert into audit_checkpoint (tenant_id, seq, row_hash, key_id, signature, signed_at) \
                     values ($1{u}, $2, $3, $4, $5, $6) on conflict do nothing",
                    u = $u
                ));
                $once!(self, cp.tenant, write |conn| {
                    sqlx::query(insert)
                        .bind(cp.tenant.to_string())
                        .bind(cp.seq)
                        .bind(&cp.row_hash)
                        .bind(&cp.key_id)
                        .bind(&cp.signature)
                        .bind(cp.signed_at)
                        .execute(conn)
                        .await?
                });
                Ok(())
            }

            /// The position of a tenant's newest checkpoint.
            pub async fn newest_checkpoint(&self, tenant: TenantId) -> Result<Option<i64>, StoreError> {
                let select = sql(format!(
                    "select max(seq) from audit_checkpoint where tenant_id = $1{u}",
                    u = $u
                ));
                Ok($once!(self, tenant, |conn| {
                    sqlx::query_scalar(select)
                        .bind(tenant.to_string())
                        .fetch_one(conn)
                        .await?
                }))
            }

            /// A tenant's checkpoints after `after_seq` and up to `until`, in chain order,
            /// each with the hash its row has now (`None`: no such row): at most `limit`.
            pub async fn checkpoints_with_rows(
                &self,
                tenant: TenantId,
                after_seq: i64,
                until: i64,
                limit: i64,
            ) -> Result<Page<(Checkpoint, Option<String>)>, StoreError> {
                type Row = (i64, String, String, String, DateTime<Utc>, Option<String>);
                let select = sql(format!(
                    "select c.seq, c.row_hash, c.key_id, c.signature, c.signed_at, a.row_hash from audit_checkpoint c \
                     left join audit_log a on a.tenant_id = c.tenant_id and a.seq = c.seq \
                     where c.tenant_id = $1{u} and c.seq > $2 and c.seq <= $3 order by c.seq limit $4",
                    u = $u
                ));
                Ok($once!(self, tenant, |conn| {
                    let rows = sqlx::query_as::<_, Row>(select)
                        .bind(tenant.to_string())
                        .bind(after_seq)
                        .bind(until)
                        .bind(limit.saturating_add(1))
                        .fetch(conn);
                    crate::read_bounded(rows, limit, |_| 0).await?
                })
                .map(|(seq, hash, key_id, signature, signed_at, row)| {
                    (Checkpoint::from_row(tenant, (seq, hash, key_id, signature, signed_at)), row)
                }))
            }

            /// A tenant's checkpoints after `after_seq`, in chain order: at most `limit`.
            pub async fn checkpoints(&self, tenant: TenantId, after_seq: i64, limit: i64) -> Result<Page<Checkpoint>, StoreError> {
                let select = sql(format!(
                    "select seq, row_hash, key_id, signature, signed_at from audit_checkpoint \
                     where tenant_id = $1{u} and seq > $2 order by seq limit $3",
                    u = $u
                ));
                Ok($once!(self, tenant, |conn| {
                    let rows = sqlx::query_as::<_, CheckpointRow>(select)
                        .bind(tenant.to_string())
                        .bind(after_seq)
                        .bind(limit.saturating_add(1))
                        .fetch(conn);
                    crate::read_bounded(rows, limit, |_| 0).await?
                })
                .map(|row| Checkpoint::from_row(tenant, row)))
            }
        }
    };
}

audit_anchors!(
    PostgresStore,
    owner,
    postgres_once,
    "::uuid",
    "::text",
    "select pg_advisory_xact_lock(hashtextextended('toolgate.audit_base:' || $1, 0))"
);
audit_anchors!(SqliteStore, pool, sqlite_once, "", "", "select $1 where 0");
