//! A run journal's append on SQLite (the rest of runs: [`crate::runs`]).

use chrono::Utc;
use serde_json::Value;
use toolgate_core::stores::Change;
use toolgate_core::{RunId, TenantId};

use super::SqliteStore;
use crate::StoreError;
use crate::model::RunFinish;

impl SqliteStore {
    /// The events, and the run's end, in one transaction; announced once committed.
    pub async fn append_run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        first_seq: i64,
        events: &[Value],
        finish: Option<&RunFinish>,
        // SQLite commits every group durably.
        _durable: bool,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        let at = Utc::now();
        for (n, event) in events.iter().enumerate() {
            Self::insert_run_event(&mut tx, tenant, run, first_seq + n as i64, event, at).await?;
        }
        if let Some(f) = finish {
            Self::finish_run(&mut tx, tenant, run, f, at).await?;
        }
        tx.commit().await?;
        self.announced(Change::Run { tenant, run });
        Ok(())
    }
}
