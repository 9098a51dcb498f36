//! The shared store suite: every behaviour, against embedded SQLite and real Postgres.
//!
//! Postgres tests use the server on 127.0.0.1:5432 (override with TG_TEST_PG, an
//! admin URL): each test gets its own database, dropped afterwards.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::json;
use sqlx::Connection;
use toolgate_core::audit::{AuditRecord, AuditSink};
use toolgate_core::stores::{
    ApprovalStore as _, Change, PinStore as _, RunStore as _, SessionStore as _, UpstreamStore as _,
};
use toolgate_core::{Adapter, CallId, ErrorKind, Outcome, PrincipalId, PrincipalKind, TenantId};
use toolgate_store::{
    AuditFilter, AuditWriter, ChainBreak, McpEvent, McpSession, NewApiKey, NewPrincipal, Principal,
    Store, StoreError, Tenant, UpstreamWrite,
};

mod approval_lapses;
mod approvals;
mod audit;
mod integrity;
mod notify;
mod nul;
mod retention;
mod runs;
mod sessions;
mod tenants;
mod upstreams;

#[path = "../../../../tests/harness/pgdb.rs"]
mod pgdb;

use pgdb::PgDb;

/// Runs `test` against a migrated SQLite store and a migrated Postgres store.
async fn on_both<F, Fut>(test: F)
where
    F: Fn(Store) -> Fut,
    Fut: Future<Output = ()>,
{
    on_both_with(toolgate_store::StoreLimits::default(), test).await;
}

/// [`on_both`], the stores opened with `limits`.
async fn on_both_with<F, Fut>(limits: toolgate_store::StoreLimits, test: F)
where
    F: Fn(Store) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = Store::open_with(None, dir.path(), limits)
        .await
        .expect("open sqlite");
    sqlite.migrate().await.expect("migrate sqlite");
    test(sqlite).await;

    let db = PgDb::create().await;
    let pg = Store::open_with(Some(&db.url), dir.path(), limits)
        .await
        .expect("open postgres");
    pg.migrate().await.expect("migrate postgres");
    test(pg.clone()).await;
    drop(pg);
    db.drop_db().await;
}

/// Runs `sql` as the store's own connections would (`owner` false: the app role on
/// Postgres) or as the connecting role (the owner), the triggers in force either way.
async fn run_as(store: &Store, owner: bool, sql: String) -> Result<u64, sqlx::Error> {
    let sql = sqlx::AssertSqlSafe(sql);
    Ok(match store {
        Store::Sqlite(s) => sqlx::query(sql).execute(s.pool()).await?.rows_affected(),
        Store::Postgres(pg) => {
            let pool = if owner {
                pg.owner_pool()
            } else {
                pg.app_pool()
            };
            sqlx::query(sql).execute(pool).await?.rows_affected()
        }
    })
}

/// Like `on_both`, for Postgres alone (row-level security, roles, triggers).
async fn on_postgres<F, Fut>(test: F)
where
    F: FnOnce(Store, String) -> Fut,
    Fut: Future<Output = ()>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let db = PgDb::create().await;
    let pg = Store::open(Some(&db.url), dir.path())
        .await
        .expect("open postgres");
    pg.migrate().await.expect("migrate postgres");
    test(pg.clone(), db.url.clone()).await;
    drop(pg);
    db.drop_db().await;
}

/// Tenant "acme" with its member "alice": most tests' starting point.
async fn acme_alice(store: &Store) -> (toolgate_store::Tenant, toolgate_store::Principal) {
    let a = store.create_tenant("acme").await.expect("tenant");
    let p = store
        .create_principal(a.id, &member("alice"))
        .await
        .expect("principal");
    (a, p)
}

fn member(name: &str) -> NewPrincipal {
    NewPrincipal {
        kind: PrincipalKind::User,
        name: name.into(),
        roles: vec!["member".into()],
        scopes: vec!["tools:invoke".into()],
    }
}

/// Tenants `acme` and `globex`, and `alice`, a member of `acme`.
async fn acme_globex_and_alice(store: &Store) -> (Tenant, Tenant, Principal) {
    let a = store.create_tenant("acme").await.expect("tenant");
    let b = store.create_tenant("globex").await.expect("tenant");
    let pa = store
        .create_principal(a.id, &member("alice"))
        .await
        .expect("principal");
    (a, b, pa)
}

fn record(tenant: TenantId, principal: PrincipalId, tool: &str) -> AuditRecord {
    AuditRecord {
        call_id: CallId::new(),
        tenant,
        principal,
        adapter: Adapter::Rest,
        tool: tool.into(),
        arguments: json!({"path": "a.txt", "token": "***"}),
        arguments_hash: "ab".repeat(32),
        outcome: Outcome::Ok,
        error: None,
        duration: Duration::from_micros(1234),
        request_id: Some("req-1".into()),
        trace_id: None,
        run: None,
        client: Some("curl/8".into()),
        approval: None,
        cache: None,
        started_at: SystemTime::now(),
        finished_at: SystemTime::now() + Duration::from_micros(1234),
    }
}

/// A caller in `tenant`, as an approval or a run keeps it.
fn caller(tenant: TenantId) -> toolgate_core::AuthContext {
    toolgate_core::AuthContext {
        tenant,
        tenant_name: "suite".into(),
        principal: toolgate_core::Principal {
            id: PrincipalId::new(),
            kind: PrincipalKind::User,
            name: "asker".into(),
        },
        roles: vec![],
        scopes: vec![],
        key: None,
    }
}

/// A high-risk `execute_command` call of `requester`'s in `tenant` asking for approval,
/// its `token` masked in `arguments` and kept in the clear in `call_arguments`; each one
/// made is another call (its own arguments hash), waiting `ttl` at most.
fn approval_request(
    tenant: TenantId,
    requester: PrincipalId,
    ttl: Duration,
) -> toolgate_core::policy::ApprovalRequest {
    toolgate_core::policy::ApprovalRequest {
        tenant,
        call_id: CallId::new(),
        requester,
        requester_name: "asker".into(),
        auth: caller(tenant),
        adapter: Adapter::Mcp,
        tool: "execute_command".into(),
        risk: toolgate_core::Risk::High,
        arguments: json!({"command": "ls", "token": "***"}),
        call_arguments: json!({"command": "ls", "token": "s3cret"}),
        arguments_hash: uuid::Uuid::new_v4().simple().to_string().repeat(2),
        run: None,
        agent: None,
        presented: None,
        expires_at: SystemTime::now() + ttl,
    }
}

/// The id of the approval `request` now waits on.
async fn pending(
    store: &Store,
    request: &toolgate_core::policy::ApprovalRequest,
) -> toolgate_core::ApprovalId {
    match store.gate_approval(request).await.expect("gate") {
        toolgate_core::Gate::Pending { approval, .. } => approval,
        other => panic!("not pending: {other:?}"),
    }
}

/// A decision on an approval, by "boss".
fn decision(approve: bool) -> toolgate_store::approvals::Decision {
    toolgate_store::approvals::Decision {
        approve,
        by: PrincipalId::new(),
        by_name: "boss".into(),
        reason: if approve { "fine" } else { "not on prod" }.into(),
        use_within: Duration::from_secs(60),
    }
}

/// Run `run` of agent "helper" in `tenant`, owned by "instance-1" until `lease_until`.
fn new_run(
    tenant: TenantId,
    run: toolgate_core::RunId,
    lease_until: chrono::DateTime<chrono::Utc>,
) -> toolgate_store::NewRun {
    toolgate_store::NewRun {
        id: run,
        agent_id: uuid::Uuid::now_v7(),
        agent_name: "helper".into(),
        principal: PrincipalId::new(),
        auth: caller(tenant),
        agent_config: json!({"name": "helper"}),
        input: "hello".into(),
        owner: "instance-1".into(),
        lease_until,
        first_event: json!({"type": "run_started", "input": "hello"}),
    }
}

/// The next change announced to `changes`.
async fn announced(changes: &mut toolgate_core::stores::Changes) -> Change {
    tokio::time::timeout(Duration::from_secs(10), changes.next())
        .await
        .expect("a change was announced")
        .expect("the store is still there")
}

/// A pinned tool definition of `owner`'s upstream `fx` with another one waiting.
fn pin_record(owner: uuid::Uuid) -> toolgate_store::PinRecord {
    toolgate_store::PinRecord {
        owner,
        upstream: "fx".into(),
        tool: "add".into(),
        exported: "fx__add".into(),
        pinned_hash: Some("h1".into()),
        pinned: Some(serde_json::json!({"name": "add", "description": "Adds."})),
        pending_hash: Some("h2".into()),
        pending: Some(serde_json::json!({"name": "add", "description": "Adds. <IMPORTANT>"})),
        findings: vec!["instructions to the model".into()],
        updated_at: chrono::DateTime::from_timestamp_micros(1_700_000_000_000_000).expect("time"),
        approved_by: None,
        approved_at: None,
    }
}

/// `pin` saved, as read back.
async fn saved_pin(store: &Store, pin: &toolgate_store::PinRecord) -> toolgate_store::PinRecord {
    store
        .save_tool_pins(std::slice::from_ref(pin))
        .await
        .expect("save");
    store
        .tool_pin(pin.owner, &pin.upstream, &pin.tool)
        .await
        .expect("read")
        .expect("there")
}
