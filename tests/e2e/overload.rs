//! A store that cannot commit — its audit table locked by someone else — answers promptly
//! with 503 and `Retry-After`, and `/readyz` says not ready, on both backends; once the
//! lock goes, calls succeed again. (Before: every call hung for the lock's duration and
//! `/readyz` said ready.)

use std::time::Duration;

use serde_json::json;
use sqlx::Connection;
use toolgate_e2e::{Gateway, PgDb};
use toolgate_server::config::Secret;

/// Calls and readiness while the audit table is locked, then after.
async fn locked_then_free(gw: &Gateway, release: impl std::future::Future<Output = ()>) {
    let call = async {
        gw.http
            .post(gw.url("/v1/tools/echo/invoke"))
            .json(&json!({"arguments": {"message": "during the lock"}}))
            .send()
            .await
            .expect("request")
    };
    // Far above the configured waits: a call that hangs for the lock fails here.
    let response = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("an answer while the table is locked");
    assert_eq!(response.status(), 503);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().expect("ascii")),
        Some("1")
    );
    let problem: serde_json::Value = response.json().await.expect("json");
    assert_eq!(
        problem["type"], "urn:toolgate:error:unavailable",
        "{problem}"
    );
    let ready = tokio::time::timeout(
        Duration::from_secs(20),
        gw.anonymous.get(gw.url("/readyz")).send(),
    )
    .await
    .expect("readyz answers")
    .expect("request");
    assert_eq!(ready.status(), 503);

    release.await;
    let (status, _, body) = gw
        .invoke("echo", json!({"arguments": {"message": "after"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    let ready = gw
        .anonymous
        .get(gw.url("/readyz"))
        .send()
        .await
        .expect("request");
    assert_eq!(ready.status(), 200);
}

#[tokio::test]
async fn a_locked_audit_table_is_503_and_not_ready_on_postgres() {
    let db = PgDb::create().await;
    let url = db.url.clone();
    let gw = Gateway::start_with(|c| {
        c.database.url = Some(Secret::new(url));
        c.database.statement_timeout_ms = 500;
    })
    .await;
    // A first call, so the writer's connection and the tenant exist.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "hi"}}))
        .await;
    assert_eq!(status, 200);
    let mut locker = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    sqlx::query("begin")
        .execute(&mut locker)
        .await
        .expect("begin");
    sqlx::query("lock table audit_log in access exclusive mode")
        .execute(&mut locker)
        .await
        .expect("lock");
    locked_then_free(&gw, async {
        sqlx::query("rollback")
            .execute(&mut locker)
            .await
            .expect("unlock");
    })
    .await;
    gw.stop().await;
    drop(locker);
    db.drop_db().await;
}

#[tokio::test]
async fn a_locked_database_file_is_503_and_not_ready_on_sqlite() {
    let gw = Gateway::start_with(|c| c.database.statement_timeout_ms = 500).await;
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "hi"}}))
        .await;
    assert_eq!(status, 200);
    let file = format!("sqlite://{}", gw.data.path().join("toolgate.db").display());
    let mut locker = sqlx::SqliteConnection::connect(&file).await.expect("open");
    sqlx::query("begin exclusive")
        .execute(&mut locker)
        .await
        .expect("lock");
    locked_then_free(&gw, async {
        sqlx::query("rollback")
            .execute(&mut locker)
            .await
            .expect("unlock");
    })
    .await;
    gw.stop().await;
}
