//! A run journal's append on Postgres (the rest of runs: [`crate::runs`]).

use serde_json::Value;
use toolgate_core::{RunId, TenantId};

use super::PostgresStore;
use crate::StoreError;
use crate::model::RunFinish;
use crate::now;
use crate::runs::{SEQ_CONFLICT, event_kind};

impl PostgresStore {
    /// One call of `toolgate_append_run_events` (which also announces the new steps),
    /// and without `finish`, in autocommit: one statement, one round trip, one commit.
    pub async fn append_run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        first_seq: i64,
        events: &[Value],
        finish: Option<&RunFinish>,
        durable: bool,
    ) -> Result<(), StoreError> {
        let kinds: Vec<&str> = events.iter().map(event_kind).collect();
        let payloads: Vec<String> = events.iter().map(Value::to_string).collect();
        let append =
            sqlx::query("select toolgate_append_run_events($1, $2, $3, $4, $5::jsonb[], $6)")
                .bind(tenant.0)
                .bind(run.0)
                .bind(first_seq)
                .bind(kinds)
                .bind(payloads)
                .bind(durable || finish.is_some());
        let Some(f) = finish else {
            append
                .execute(&self.app)
                .await
                .map_err(|e| StoreError::on_constraint(e, "run_event_pkey", SEQ_CONFLICT))?;
            return Ok(());
        };
        let mut tx = self.tenant_tx(tenant).await?;
        append
            .execute(&mut *tx)
            .await
            .map_err(|e| StoreError::on_constraint(e, "run_event_pkey", SEQ_CONFLICT))?;
        Self::finish_run(&mut tx, tenant, run, f, now()).await?;
        tx.commit().await?;
        Ok(())
    }
}
