//! Run leases through the clock seam: a run another instance leased is left alone while
//! its lease holds, and taken over once the clock passes it — on Postgres (shared, where
//! leases decide), with the clock moved instead of a 30 s sleep.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolgate_core::audit::NoAudit;
use toolgate_core::clock::{Clock, ManualClock};
use toolgate_core::stores::{NewRun, RunStore as _};
use toolgate_core::{Executor, ExecutorLimits, PrincipalId, Registry, RunId, TracingSink};
use toolgate_store::Store;

#[path = "../../../tests/harness/pgdb.rs"]
mod pgdb;

#[tokio::test]
async fn a_run_is_taken_over_only_once_the_clock_passes_its_lease() {
    let db = pgdb::PgDb::create().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(Some(&db.url), dir.path())
        .await
        .expect("open postgres");
    store.migrate().await.expect("migrate");
    let tenant = store.create_tenant("leases").await.expect("tenant");
    let clock = Arc::new(ManualClock::at(chrono::Utc::now()));
    let run = RunId::new();
    let leased = NewRun {
        id: run,
        agent_id: uuid::Uuid::now_v7(),
        agent_name: "r".into(),
        principal: PrincipalId::new(),
        auth: serde_json::from_value(json!({
            "tenant": tenant.id, "tenant_name": "leases",
            "principal": {"id": uuid::Uuid::now_v7(), "kind": "user", "name": "someone"},
            "roles": [], "scopes": ["agents:run"]
        }))
        .expect("an auth context"),
        // Its provider is not configured here: once taken over, the run fails at once,
        // which shows the takeover without driving a model.
        agent_config: json!({"name": "r", "provider": "gone", "model": "m"}),
        input: "hello".into(),
        owner: "another-instance".into(),
        lease_until: clock.now() + Duration::from_secs(30),
        first_event: json!({"type": "run_started", "agent": "r", "input": "hello"}),
    };
    store.create_run(tenant.id, &leased).await.expect("run");

    let executor = Executor::new(
        Arc::new(TracingSink),
        Arc::new(NoAudit),
        ExecutorLimits::default(),
    );
    let runs = toolgate_agent::runs::Runs::with_clock(
        store.clone(),
        Arc::new(Registry::new()),
        executor,
        HashMap::new(),
        clock.clone(),
    );
    let status = || async {
        store
            .get_run(tenant.id, run)
            .await
            .expect("get")
            .expect("run")
            .status
    };

    runs.resume_decided().await;
    assert_eq!(status().await, "running", "its lease holds: left alone");

    clock.advance(Duration::from_secs(31));
    runs.resume_decided().await;
    let taken = store
        .get_run(tenant.id, run)
        .await
        .expect("get")
        .expect("run");
    assert_eq!(taken.status, "failed", "taken over, then failed: {taken:?}");
    assert!(
        taken
            .error
            .as_deref()
            .is_some_and(|e| e.contains("interrupted and not resumable")),
        "{taken:?}"
    );
    drop(store);
    db.drop_db().await;
}
