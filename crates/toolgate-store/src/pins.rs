//! Pinned upstream tool definitions (the rug-pull defence), on both backends.
//!
//! One row per tool of an upstream, keyed by its owner (a tenant, or the nil uuid for
//! the operator's upstreams), the upstream's name and the tool's name there. Written by
//! the upstream supervisors of every instance (not on behalf of a caller: the reading
//! pool that spans tenants), read and approved over REST with an explicit owner. As in
//! [`crate::upstreams`], one macro writes both implementations.

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::PrincipalId;
use toolgate_core::stores::{Change, PinHashes};
use uuid::Uuid;

use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{sql, uuid};
use crate::{Store, StoreError};

pub use toolgate_core::stores::PinRecord;

/// Pins written in one transaction: a listing of 10,000 new tools holds SQLite's write
/// lock a few milliseconds at a time, not for the whole listing.
const PINS_PER_COMMIT: usize = 100;

#[derive(sqlx::FromRow)]
struct Row {
    owner_id: String,
    upstream: String,
    tool: String,
    exported: String,
    pinned_hash: Option<String>,
    pinned: Option<String>,
    pending_hash: Option<String>,
    pending: Option<String>,
    findings: String,
    updated_at: DateTime<Utc>,
    approved_by: Option<String>,
    approved_at: Option<DateTime<Utc>>,
}

impl Row {
    fn into_record(self) -> Result<PinRecord, StoreError> {
        let json = |text: &str| {
            serde_json::from_str::<Value>(text)
                .map_err(|e| StoreError::Corrupt(format!("tool pin: {e}")))
        };
        Ok(PinRecord {
            owner: uuid(&self.owner_id)?,
            upstream: self.upstream,
            tool: self.tool,
            exported: self.exported,
            pinned_hash: self.pinned_hash,
            pinned: self.pinned.as_deref().map(json).transpose()?,
            pending_hash: self.pending_hash,
            pending: self.pending.as_deref().map(json).transpose()?,
            findings: serde_json::from_str(&self.findings)
                .map_err(|e| StoreError::Corrupt(format!("tool pin findings: {e}")))?,
            updated_at: self.updated_at,
            approved_by: self
                .approved_by
                .as_deref()
                .map(uuid)
                .transpose()?
                .map(PrincipalId),
            approved_at: self.approved_at,
        })
    }
}

/// `$cross`: the pool that spans tenants; `$u`: the cast of a text parameter to a uuid;
/// `$j`: to JSON; `$t`: of a uuid or JSON column to text.
macro_rules! pin_store {
    ($store:ty, $cross:ident, $u:literal, $j:literal, $t:literal) => {
        impl $store {
            fn pin_columns() -> String {
                format!(
                    "owner_id{t} as owner_id, upstream, tool, exported, pinned_hash, pinned{t} as pinned, \
                     pending_hash, pending{t} as pending, findings{t} as findings, updated_at, \
                     approved_by{t} as approved_by, approved_at",
                    t = $t
                )
            }

            pub async fn tool_pin(
                &self,
                owner: Uuid,
                upstream: &str,
                tool: &str,
            ) -> Result<Option<PinRecord>, StoreError> {
                let row: Option<Row> = sqlx::query_as(sql(format!(
                    "select {columns} from tool_pin where owner_id = $1{u} and upstream = $2 and tool = $3",
                    u = $u,
                    columns = Self::pin_columns()
                )))
                .bind(owner.to_string())
                .bind(upstream)
                .bind(tool)
                .fetch_optional(&self.$cross)
                .await?;
                row.map(Row::into_record).transpose()
            }

            /// The hashes of every pin of `upstream` owned by `owner`.
            pub async fn pin_hashes(
                &self,
                owner: Uuid,
                upstream: &str,
            ) -> Result<Vec<PinHashes>, StoreError> {
                let rows: Vec<(String, Option<String>, Option<String>)> = sqlx::query_as(sql(format!(
                    "select tool, pinned_hash, pending_hash from tool_pin where owner_id = $1{u} and upstream = $2",
                    u = $u
                )))
                .bind(owner.to_string())
                .bind(upstream)
                .fetch_all(&self.$cross)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(tool, pinned_hash, pending_hash)| PinHashes {
                        tool,
                        pinned_hash,
                        pending_hash,
                    })
                    .collect())
            }

            /// Writes `pins` whole (each inserted, or replacing the row of its key), a
            /// transaction per [`PINS_PER_COMMIT`]: on SQLite each holds the write lock,
            /// which the audit writer waits for meanwhile.
            pub async fn save_tool_pins(&self, pins: &[PinRecord]) -> Result<(), StoreError> {
                // An upstream's definition may hold a NUL (see `text::jsonb_text`).
                let text = |v: &Option<Value>| v.as_ref().map(crate::text::jsonb_text);
                let statement: std::sync::Arc<str> = format!(
                    "insert into tool_pin (owner_id, upstream, tool, exported, pinned_hash, pinned, pending_hash, pending, \
                     findings, updated_at, approved_by, approved_at) \
                     values ($1{u}, $2, $3, $4, $5, $6{j}, $7, $8{j}, $9{j}, $10, $11{u}, $12) \
                     on conflict (owner_id, upstream, tool) do update set exported = excluded.exported, \
                     pinned_hash = excluded.pinned_hash, pinned = excluded.pinned, pending_hash = excluded.pending_hash, \
                     pending = excluded.pending, findings = excluded.findings, updated_at = excluded.updated_at, \
                     approved_by = excluded.approved_by, approved_at = excluded.approved_at",
                    u = $u,
                    j = $j
                )
                .into();
                for chunk in pins.chunks(PINS_PER_COMMIT) {
                    let mut tx = self.cross_tx().await?;
                    for pin in chunk {
                        sqlx::query(sqlx::AssertSqlSafe(statement.clone()))
                            .bind(pin.owner.to_string())
                            .bind(&pin.upstream)
                            .bind(&pin.tool)
                            .bind(&pin.exported)
                            .bind(&pin.pinned_hash)
                            .bind(text(&pin.pinned))
                            .bind(&pin.pending_hash)
                            .bind(text(&pin.pending))
                            .bind(crate::text::jsonb_text(&Value::from(pin.findings.clone())))
                            .bind(pin.updated_at)
                            .bind(pin.approved_by.map(|p| p.to_string()))
                            .bind(pin.approved_at)
                            .execute(&mut *tx)
                            .await?;
                    }
                    tx.commit().await?;
                }
                Ok(())
            }

            /// Up to `limit` of the owner's pins after `after`, in [`PinsAfter`]'s order:
            /// those with a definition waiting, then the others, each by upstream and tool.
            pub async fn tool_pins_page(
                &self,
                owner: Uuid,
                only: PinsOnly<'_>,
                after: Option<&PinsAfter>,
                limit: usize,
            ) -> Result<Vec<PinRecord>, StoreError> {
                let mut page = Vec::new();
                for waiting in [true, false] {
                    if only.waiting.is_some_and(|w| w != waiting) {
                        continue;
                    }
                    // Past the waiting ones already.
                    if waiting && after.is_some_and(|a| !a.waiting) {
                        continue;
                    }
                    let from = after.filter(|a| a.waiting == waiting);
                    let rows: Vec<Row> = sqlx::query_as(sql(format!(
                        "select {columns} from tool_pin where owner_id = $1{u} and pending_hash is {not} null \
                         and ($2 is null or upstream = $2) and ($3 is null or (upstream, tool) > ($3, $4)) \
                         order by upstream, tool limit $5",
                        u = $u,
                        not = if waiting { "not" } else { "" },
                        columns = Self::pin_columns()
                    )))
                    .bind(owner.to_string())
                    .bind(only.upstream)
                    .bind(from.map(|a| a.upstream.as_str()))
                    .bind(from.map(|a| a.tool.as_str()))
                    .bind(i64::try_from(limit - page.len()).unwrap_or(i64::MAX))
                    .fetch_all(&self.$cross)
                    .await?;
                    for row in rows {
                        page.push(row.into_record()?);
                    }
                    if page.len() >= limit {
                        break;
                    }
                }
                Ok(page)
            }

            /// When a definition was last approved, any owner's: instances compare it to
            /// learn of approvals made elsewhere.
            pub async fn last_pin_approval(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
                let (last,): (Option<DateTime<Utc>>,) =
                    sqlx::query_as("select max(approved_at) from tool_pin")
                        .fetch_one(&self.$cross)
                        .await?;
                Ok(last)
            }

            /// Forgets the pins of an upstream (deleted: a new one of its name starts afresh).
            pub async fn delete_tool_pins(
                &self,
                owner: Uuid,
                upstream: &str,
            ) -> Result<(), StoreError> {
                let _turn = self.turn().await?;
                sqlx::query(sql(format!(
                    "delete from tool_pin where owner_id = $1{u} and upstream = $2",
                    u = $u
                )))
                .bind(owner.to_string())
                .bind(upstream)
                .execute(&self.$cross)
                .await?;
                Ok(())
            }

            /// Pins the pending definition hashing to `hash`; `None` when there is no such
            /// pending definition (none, or another one since).
            pub async fn approve_tool_pin(
                &self,
                owner: Uuid,
                upstream: &str,
                tool: &str,
                hash: &str,
                by: PrincipalId,
            ) -> Result<Option<PinRecord>, StoreError> {
                let mut tx = self.cross_tx().await?;
                let row: Option<Row> = sqlx::query_as(sql(format!(
                    "update tool_pin set pinned_hash = pending_hash, pinned = pending, pending_hash = null, pending = null, \
                     findings = '[]', approved_by = $5{u}, approved_at = $6, updated_at = $6 \
                     where owner_id = $1{u} and upstream = $2 and tool = $3 and pending_hash = $4 returning {columns}",
                    u = $u,
                    columns = Self::pin_columns()
                )))
                .bind(owner.to_string())
                .bind(upstream)
                .bind(tool)
                .bind(hash)
                .bind(by.to_string())
                .bind(Utc::now())
                .fetch_optional(&mut *tx)
                .await?;
                // Every instance's supervisors list the upstream's tools again.
                if row.is_some() {
                    self.announce_in(&mut tx, Change::PinApproved).await?;
                }
                tx.commit().await?;
                if row.is_some() {
                    self.announced(Change::PinApproved);
                }
                row.map(Row::into_record).transpose()
            }
        }
    };
}

pin_store!(PostgresStore, owner, "::uuid", "::jsonb", "::text");
pin_store!(SqliteStore, pool, "", "", "");

/// Which pins a page holds: those of one upstream, those waiting or not.
#[derive(Clone, Copy, Debug, Default)]
pub struct PinsOnly<'a> {
    pub upstream: Option<&'a str>,
    /// `true`: only those with a definition waiting for approval; `false`: only the others.
    pub waiting: Option<bool>,
}

/// Where a page of pins goes on: after this one, in the order waiting first, then by
/// upstream and tool.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PinsAfter {
    pub waiting: bool,
    pub upstream: String,
    pub tool: String,
}

impl From<&PinRecord> for PinsAfter {
    /// Where a page that ends with `pin` goes on.
    fn from(pin: &PinRecord) -> Self {
        Self {
            waiting: pin.pending_hash.is_some(),
            upstream: pin.upstream.clone(),
            tool: pin.tool.clone(),
        }
    }
}

impl Store {
    pub async fn tool_pins_page(
        &self,
        owner: Uuid,
        only: PinsOnly<'_>,
        after: Option<&PinsAfter>,
        limit: usize,
    ) -> Result<Vec<PinRecord>, StoreError> {
        dispatch!(self, s => s.tool_pins_page(owner, only, after, limit).await)
    }

    pub async fn delete_tool_pins(&self, owner: Uuid, upstream: &str) -> Result<(), StoreError> {
        dispatch!(self, s => s.delete_tool_pins(owner, upstream).await)
    }
}

/// The pinning seam of [`toolgate_core::stores`], for the MCP crate's `Pins`.
#[async_trait::async_trait]
impl toolgate_core::stores::PinStore for Store {
    /// The pin of `tool` of `upstream` owned by `owner` (a tenant id, or the nil uuid).
    async fn tool_pin(
        &self,
        owner: Uuid,
        upstream: &str,
        tool: &str,
    ) -> Result<Option<PinRecord>, StoreError> {
        dispatch!(self, s => s.tool_pin(owner, upstream, tool).await)
    }

    async fn pin_hashes(&self, owner: Uuid, upstream: &str) -> Result<Vec<PinHashes>, StoreError> {
        dispatch!(self, s => s.pin_hashes(owner, upstream).await)
    }

    async fn save_tool_pins(&self, pins: &[PinRecord]) -> Result<(), StoreError> {
        dispatch!(self, s => s.save_tool_pins(pins).await)
    }

    async fn last_pin_approval(&self) -> Result<Option<DateTime<Utc>>, StoreError> {
        dispatch!(self, s => s.last_pin_approval().await)
    }

    async fn approve_tool_pin(
        &self,
        owner: Uuid,
        upstream: &str,
        tool: &str,
        hash: &str,
        by: PrincipalId,
    ) -> Result<Option<PinRecord>, StoreError> {
        dispatch!(self, s => s.approve_tool_pin(owner, upstream, tool, hash, by).await)
    }

    async fn tenant_ids(&self) -> Result<Vec<toolgate_core::TenantId>, StoreError> {
        Ok(self
            .list_tenants()
            .await?
            .into_iter()
            .map(|t| t.id)
            .collect())
    }
}
