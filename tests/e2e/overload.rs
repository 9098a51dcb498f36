//! A store that cannot commit — its audit table locked by someone else — answers promptly
//! with 503 and `Retry-After`, and `/readyz` says not ready, on both backends; once the
//! lock goes, calls succeed again. (Before: every call hung for the lock's duration and
//! `/readyz` said ready.)

use std::time::Duration;

use serde_json::json;
use sqlx::Connection;
use toolgate_e2e::{Gateway, PgDb};
use toolgate_server::config::Secret;

/// A connection to the Postgres database at `url` holding `table` locked against every
/// other (readers too) until it rolls back.
async fn locked(url: &str, table: &str) -> sqlx::PgConnection {
    let mut locker = sqlx::PgConnection::connect(url).await.expect("connect");
    sqlx::query("begin")
        .execute(&mut locker)
        .await
        .expect("begin");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "lock table {table} in access exclusive mode"
    )))
    .execute(&mut locker)
    .await
    .expect("lock");
    locker
}

/// A connection to `gw`'s SQLite file holding it locked for writing (`begin exclusive`)
/// until it rolls back.
async fn locked_file(gw: &Gateway) -> sqlx::SqliteConnection {
    let file = format!("sqlite://{}", gw.data.path().join("toolgate.db").display());
    let mut locker = sqlx::SqliteConnection::connect(&file).await.expect("open");
    sqlx::query("begin exclusive")
        .execute(&mut locker)
        .await
        .expect("lock");
    locker
}

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
    let ready = tokio::time::timeout(Duration::from_secs(20), readyz(gw))
        .await
        .expect("readyz answers");
    assert_eq!(ready.status(), 503);

    release.await;
    let (status, _, body) = gw
        .invoke("echo", json!({"arguments": {"message": "after"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(readyz(gw).await.status(), 200);
}

/// Past the requests' wait for a place (500 ms), unlocks `locker` and tallies the
/// `held` requests' answers ([`tally`]).
async fn tally_once_unlocked(
    locker: &mut sqlx::PgConnection,
    held: Vec<tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>>,
    refusal: &str,
) -> std::collections::BTreeMap<u16, usize> {
    tokio::time::sleep(Duration::from_millis(800)).await;
    sqlx::query("rollback")
        .execute(locker)
        .await
        .expect("unlock");
    tally(held, refusal).await
}

/// How many of the `held` requests got each status; each 503 says `refusal` and when
/// to try again.
async fn tally(
    held: Vec<tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>>,
    refusal: &str,
) -> std::collections::BTreeMap<u16, usize> {
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for answer in held {
        let response = answer.await.expect("task").expect("request");
        *statuses.entry(response.status().as_u16()).or_default() += 1;
        if response.status() == 503 {
            assert!(response.headers().contains_key("retry-after"));
            let problem: serde_json::Value = response.json().await.expect("json");
            assert!(
                problem["detail"].as_str().unwrap_or("").contains(refusal),
                "{problem}"
            );
        }
    }
    statuses
}

/// `GET /readyz`, without credentials.
async fn readyz(gw: &Gateway) -> reqwest::Response {
    gw.anonymous
        .get(gw.url("/readyz"))
        .send()
        .await
        .expect("request")
}

#[tokio::test]
async fn a_locked_audit_table_is_503_and_not_ready_on_postgres() {
    let db = PgDb::create().await;
    let gw = Gateway::start_on(&db, |c| c.database.statement_timeout_ms = 500).await;
    // A first call, so the writer's connection and the tenant exist.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "hi"}}))
        .await;
    assert_eq!(status, 200);
    let mut locker = locked(&db.url, "audit_log").await;
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
    let mut locker = locked_file(&gw).await;
    locked_then_free(&gw, async {
        sqlx::query("rollback")
            .execute(&mut locker)
            .await
            .expect("unlock");
    })
    .await;
    gw.stop().await;
}

/// Postgres down when the gateway starts: it serves anyway — `/healthz` 200, `/readyz`
/// and the API 503 with `Retry-After` — and becomes ready once the database answers.
/// (Before: start-up failed and the process exited.) The database is reached through a
/// loopback relay the test opens only later.
#[tokio::test]
async fn a_gateway_started_while_postgres_is_down_serves_once_it_returns() {
    let db = PgDb::create().await;
    // A free port nobody listens on yet.
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr").port()
    };
    let real = url_authority(&db.url);
    let via_relay = db.url.replacen(&real, &format!("127.0.0.1:{port}"), 1);
    let data = tempfile::tempdir().expect("data dir");
    let mut config = toolgate_server::Config {
        data_dir: data.path().to_path_buf(),
        ..toolgate_server::Config::default()
    };
    config.database.url = Some(Secret::new(via_relay));
    config.database.acquire_timeout_ms = 500;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(toolgate_server::serve(config, listener, async {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let status = |path: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            match http.get(format!("{base}{path}")).send().await {
                Ok(r) => Some((
                    r.status().as_u16(),
                    r.headers().get("retry-after").is_some(),
                )),
                Err(_) => None,
            }
        }
    };
    let mut seen = None;
    for _ in 0..200 {
        seen = status("/healthz").await;
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, Some((200, false)), "alive while the database is down");
    assert_eq!(status("/readyz").await.map(|s| s.0), Some(503));
    assert_eq!(status("/v1/tools").await, Some((503, true)));

    // The database comes back.
    let relay = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind relay");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = relay.accept().await {
            let real = real.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&real).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    let mut ready = None;
    for _ in 0..600 {
        ready = status("/readyz").await.map(|s| s.0);
        if ready == Some(200) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ready, Some(200), "ready once the database answers");
    let key = std::fs::read_to_string(data.path().join("admin-api-key")).expect("admin key");
    let response = toolgate_e2e::client_with_key(key.trim())
        .post(format!("{base}/v1/tools/echo/invoke"))
        .json(&json!({"arguments": {"message": "back"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let _ = stop.send(());
    server
        .await
        .expect("join")
        .expect("the gateway stopped cleanly");
    db.drop_db().await;
}

/// `host:port` of a `postgres://user@host:port/db` URL.
fn url_authority(url: &str) -> String {
    let after_at = url.split('@').nth(1).expect("user@host");
    after_at.split('/').next().expect("host:port").to_owned()
}

/// One tenant whose reads hold the database (here: twenty approval listings waiting on a
/// table someone locked; in life, audit summaries asked for in parallel) holds at most
/// `database.max_connections_per_tenant` of the pool: its other reads are refused with
/// 503 once its own wait is over, and another tenant's reads and `/readyz` go on. (Before:
/// the twenty held all sixteen connections, and the other tenant's reads and `/readyz`
/// failed after the acquire timeout.)
#[tokio::test]
async fn a_tenant_holding_the_database_leaves_another_tenant_its_connections() {
    let db = PgDb::create().await;
    let gw = Gateway::start_on(&db, |c| {
        c.database.statement_timeout_ms = 10_000;
        c.database.acquire_timeout_ms = 500;
    })
    .await;
    let noisy = toolgate_e2e::client_with_key(&gw.create_tenant("noisy").await);
    let quiet = toolgate_e2e::client_with_key(&gw.create_tenant("quiet").await);
    let get = |client: &reqwest::Client, path: &str| client.get(gw.url(path)).send();
    for client in [&noisy, &quiet] {
        assert_eq!(
            get(client, "/v1/approvals")
                .await
                .expect("request")
                .status(),
            200
        );
    }
    let mut locker = locked(&db.url, "approval").await;
    let held: Vec<_> = (0..20)
        .map(|_| tokio::spawn(get(&noisy, "/v1/approvals")))
        .collect();
    // The noisy tenant's reads have taken what they may (and queued for the rest).
    tokio::time::sleep(Duration::from_millis(200)).await;
    for path in ["/v1/runs", "/v1/agents"] {
        let response = tokio::time::timeout(Duration::from_secs(5), get(&quiet, path))
            .await
            .expect("an answer")
            .expect("request");
        assert_eq!(
            response.status(),
            200,
            "{path} for another tenant: {:?}",
            response.text().await
        );
    }
    let ready = readyz(&gw).await;
    assert_eq!(ready.status(), 200, "{:?}", ready.text().await);

    // Past its own wait, the noisy tenant's reads beyond its share are refused for now.
    let statuses = tally_once_unlocked(&mut locker, held, "database operations running").await;
    assert_eq!(
        statuses,
        [(200, 4), (503, 16)].into_iter().collect(),
        "the noisy tenant's twenty reads"
    );
    gw.stop().await;
    drop(locker);
    db.drop_db().await;
}

/// Tenants together hold at most the pool less its reserve: here four tenants each
/// reading at their share (sixteen reads waiting on a locked table) hold twelve of the
/// sixteen connections, and a key not seen before still signs in and `/readyz` still
/// answers ready; the reads past the twelve are refused with 503 once their wait is over.
/// (Before: the four shares filled the pool, the sign-in and `/readyz` waited out the
/// acquire timeout, and every replica left service.)
#[tokio::test]
async fn tenants_together_leave_connections_for_sign_ins_and_readiness() {
    let db = PgDb::create().await;
    let gw = Gateway::start_on(&db, |c| {
        c.database.statement_timeout_ms = 10_000;
        c.database.acquire_timeout_ms = 500;
    })
    .await;
    let mut tenants = Vec::new();
    for name in ["one", "two", "three", "four"] {
        let client = toolgate_e2e::client_with_key(&gw.create_tenant(name).await);
        let listed = client
            .get(gw.url("/v1/approvals"))
            .send()
            .await
            .expect("request");
        assert_eq!(listed.status(), 200);
        tenants.push(client);
    }
    let unseen = toolgate_e2e::client_with_key(&gw.create_tenant("unseen").await);
    let mut locker = locked(&db.url, "approval").await;
    let held: Vec<_> = tenants
        .iter()
        .flat_map(|client| std::iter::repeat_n(client, 4))
        .map(|client| tokio::spawn(client.get(gw.url("/v1/approvals")).send()))
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let me = tokio::time::timeout(Duration::from_secs(5), unseen.get(gw.url("/v1/me")).send())
        .await
        .expect("an answer")
        .expect("request");
    assert_eq!(me.status(), 200, "{:?}", me.text().await);
    let ready = readyz(&gw).await;
    assert_eq!(ready.status(), 200, "{:?}", ready.text().await);
    // Operators see how close the tenants are to the reserve, and the refusals.
    assert_eq!(gw.metric("toolgate_store_tenant_operations{").await, 12.0);

    let statuses =
        tally_once_unlocked(&mut locker, held, "tenants have 12 database operations").await;
    assert_eq!(
        gw.metric("toolgate_store_tenant_operations_refused_total{")
            .await,
        4.0
    );
    assert_eq!(
        statuses,
        [(200, 12), (503, 4)].into_iter().collect(),
        "the four tenants' sixteen reads"
    );
    gw.stop().await;
    drop(locker);
    db.drop_db().await;
}

/// A key the gateway has not seen yet, presented while the pool has no connection to
/// spare (here: the pool's one connection held by a policy write waiting on a locked
/// database file), is a 503 to retry, not a 500 (as it was: the key lookup's failure was
/// taken for an internal error, and any request whose key fell out of the cache failed
/// that way under load). Writes waiting for their turn at the lock hold no connection
/// (see `toolgate_store::sqlite::Turn`), so one connection is all one write can hold.
#[tokio::test]
async fn a_key_looked_up_while_the_store_has_no_connection_is_503_not_500() {
    let gw = Gateway::start_with(|c| {
        c.database.statement_timeout_ms = 8000;
        c.database.acquire_timeout_ms = 200;
        c.database.max_connections = Some(1);
        // No reserve, so that a tenant's write can take the pool's one connection (the
        // default keeps some for sign-ins; see above).
        c.database.reserved_connections = Some(0);
    })
    .await;
    let writer = toolgate_e2e::client_with_key(&gw.create_tenant("one").await);
    let me = writer.get(gw.url("/v1/me")).send().await.expect("request");
    assert_eq!(me.status(), 200);
    let unseen = toolgate_e2e::client_with_key(&gw.create_tenant("unseen").await);
    let mut locker = locked_file(&gw).await;
    let waiting = vec![tokio::spawn(
        writer
            .put(gw.url("/v1/policy"))
            .json(&json!({"level": 1}))
            .send(),
    )];
    // Well inside the write's 8 s wait, well past its taking the connection.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let response = unseen.get(gw.url("/v1/me")).send().await.expect("request");
    let status = response.status();
    let retry = response.headers().contains_key("retry-after");
    assert_eq!(status, 503, "{:?}", response.text().await);
    assert!(retry);
    sqlx::query("rollback")
        .execute(&mut locker)
        .await
        .expect("unlock");
    for write in waiting {
        write.await.expect("task").expect("request");
    }
    let me = unseen.get(gw.url("/v1/me")).send().await.expect("request");
    assert_eq!(me.status(), 200);
    gw.stop().await;
}
