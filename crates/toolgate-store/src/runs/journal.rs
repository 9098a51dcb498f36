//! A run journal's append, the one run operation whose SQL differs by backend: one call
//! of `toolgate_append_run_events` on Postgres, a transaction of inserts on SQLite. The
//! rest of runs is written once ([`super`]).

use chrono::Utc;
use serde_json::Value;
use toolgate_core::stores::Change;
use toolgate_core::{RunId, TenantId};

use super::{SEQ_CONFLICT, event_kind};
use crate::model::RunFinish;
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::{StoreError, now};

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
        // jsonb: a tool's output may hold a NUL (see `text::jsonb_text`).
        let payloads: Vec<String> = events.iter().map(crate::text::jsonb_text).collect();
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
        let mut tx = self.cross_tx().await?;
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
