//! Gateway instances sharing the store, and the counts behind the gateway's gauges.
//!
//! On Postgres each instance renews its row in `gateway_instance`; rate limits are split
//! among the instances seen within the last [`INSTANCE_TTL`]. Embedded SQLite serves one
//! instance. The gauge counts span tenants (they are the operator's) and use the owner
//! pool on Postgres.

use std::time::Duration;

use chrono::Utc;

use crate::{Store, StoreError};

/// Approvals waiting for a decision: a term of `approval_waiting_idx`'s predicate.
pub(crate) const PENDING: &str =
    "select count(*) from approval where status = 'pending' and expires_at > $1";

/// Runs still going, by status: `run_live_idx`'s predicate, as written.
pub(crate) const LIVE_RUNS: &str = "select status, count(*) from run \
    where status in ('running', 'awaiting_approval') group by status order by status";

/// An instance not seen for this long no longer counts.
pub const INSTANCE_TTL: Duration = Duration::from_secs(30);

/// Counts for the gateway's gauges, over every tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Approvals waiting for a decision (not yet expired).
    pub approvals_pending: i64,
    /// Runs still going by status (`running`, `awaiting_approval`); a status without
    /// runs is absent. Finished runs are not counted here (see `toolgate.runs.finished`).
    pub runs: Vec<(String, i64)>,
}

impl Store {
    /// Marks `instance` alive now and returns how many instances are (at least 1).
    pub async fn heartbeat(&self, instance: &str) -> Result<u32, StoreError> {
        let Store::Postgres(pg) = self else {
            return Ok(1);
        };
        let now = Utc::now();
        let ttl = chrono::Duration::from_std(INSTANCE_TTL).unwrap_or_default();
        sqlx::query(
            "insert into gateway_instance (instance, seen_at) values ($1, $2) \
             on conflict (instance) do update set seen_at = excluded.seen_at",
        )
        .bind(instance)
        .bind(now)
        .execute(&pg.owner)
        .await?;
        // Long gone instances are forgotten (a day later: no row lives forever).
        sqlx::query("delete from gateway_instance where seen_at < $1")
            .bind(now - chrono::Duration::days(1))
            .execute(&pg.owner)
            .await?;
        let (n,): (i64,) =
            sqlx::query_as("select count(*) from gateway_instance where seen_at >= $1")
                .bind(now - ttl)
                .fetch_one(&pg.owner)
                .await?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX).max(1))
    }

    /// Forgets `instance` (a graceful stop): the others take its share at once.
    pub async fn leave(&self, instance: &str) -> Result<(), StoreError> {
        if let Store::Postgres(pg) = self {
            sqlx::query("delete from gateway_instance where instance = $1")
                .bind(instance)
                .execute(&pg.owner)
                .await?;
        }
        Ok(())
    }

    /// Pending approvals, and runs running or waiting for approval, over every tenant:
    /// read from the partial indexes of what is live, whatever the history kept.
    pub async fn counts(&self) -> Result<Counts, StoreError> {
        let now = Utc::now();
        let (pending, runs) = match self {
            Store::Postgres(pg) => {
                let (pending,): (i64,) = sqlx::query_as(PENDING)
                    .bind(now)
                    .fetch_one(&pg.owner)
                    .await?;
                let runs: Vec<(String, i64)> =
                    sqlx::query_as(LIVE_RUNS).fetch_all(&pg.owner).await?;
                (pending, runs)
            }
            Store::Sqlite(lite) => {
                let (pending,): (i64,) = sqlx::query_as(PENDING)
                    .bind(now)
                    .fetch_one(&lite.pool)
                    .await?;
                let runs: Vec<(String, i64)> =
                    sqlx::query_as(LIVE_RUNS).fetch_all(&lite.pool).await?;
                (pending, runs)
            }
        };
        Ok(Counts {
            approvals_pending: pending,
            runs,
        })
    }
}
