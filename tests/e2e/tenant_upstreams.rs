//! Tenants' own upstreams (`/v1/upstreams`): tenant A adds an HTTP MCP server (another
//! toolgate's `/mcp`, reached with a bearer token); its tools appear to A over REST and
//! MCP and work, and tenant B can neither see nor call them, nor see, change or delete
//! the upstream. Credentials are never shown, audited or stored in the clear; addresses
//! that are not allowed are refused; two instances on one Postgres stay in step.

use std::time::Duration;

use rmcp::model::ProtocolVersion;
use serde_json::{Value, json};
use toolgate_e2e::{Gateway, PgDb, client_with_key, read};
use toolgate_server::config::{Config, Secret};

use crate::mcp::{call, connect};

const KEY: &str = "5f0c6a8e2b7d4c1f9e3a6b8d0c2e4f6a8b0d2c4e6f8a0b2c4d6e8f0a2b4c6d8e";

/// Tenant upstreams on loopback over plain HTTP, as tests need (public HTTPS only by
/// default), re-read from the store every second.
pub(crate) fn loopback(c: &mut Config) {
    c.tenant_upstreams.allow_http = true;
    c.tenant_upstreams.allowed_networks = vec!["127.0.0.0/8".into()];
    c.tenant_upstreams.sync_secs = 1;
    c.tenant_upstreams.key = Some(Secret::new(KEY));
}

pub(crate) async fn names(http: &reqwest::Client, gw: &Gateway) -> Vec<String> {
    let (status, _, body) = read(
        http.get(gw.url("/v1/tools?limit=200"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// Adds the server at `port` (a Python SDK fixture) to the admin's tenant as upstream
/// `fx` and waits until its tool `first` (as `fx__first`) is listed.
pub(crate) async fn add_fixture(gw: &Gateway, port: u16, first: &str) {
    let (status, _, created) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "fx", "url": format!("http://127.0.0.1:{port}/mcp")}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let wanted = format!("fx__{first}");
    until_tools(&gw.http, gw, "fx connects", |n| n.contains(&wanted)).await;
}

/// Polls until `check` holds for the caller's tool names, or fails after 20 s.
pub(crate) async fn until_tools(
    http: &reqwest::Client,
    gw: &Gateway,
    what: &str,
    check: impl Fn(&[String]) -> bool,
) {
    let mut seen = Vec::new();
    for _ in 0..200 {
        seen = names(http, gw).await;
        if check(&seen) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: tools are {seen:?}");
}

async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = http.request(method, url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let (status, _, body) = read(request.send().await.expect("request")).await;
    (status, body)
}

#[tokio::test]
async fn a_tenants_upstream_is_seen_and_called_by_that_tenant_only() {
    let upstream = Gateway::start().await;
    let secret = upstream.admin_key.clone();
    let gw = Gateway::start_with(loopback).await;
    let a = gw.http.clone();
    let b_key = gw.create_tenant("globex").await;
    let b = client_with_key(&b_key);
    let upstreams = gw.url("/v1/upstreams");

    // Tenants may add HTTP upstreams only, on allowed addresses, with valid fields.
    for (body, pointer) in [
        (
            json!({"name": "meta", "url": "http://169.254.169.254/mcp"}),
            "/url",
        ),
        (json!({"name": "ten", "url": "http://10.1.2.3/mcp"}), "/url"),
        (
            json!({"name": "bad name!", "url": upstream.url("/mcp")}),
            "/name",
        ),
        (
            json!({"name": "hdr", "url": upstream.url("/mcp"), "headers": {"Authorization": "x"}}),
            "/headers/Authorization",
        ),
    ] {
        let (status, problem) =
            send(&a, reqwest::Method::POST, upstreams.clone(), Some(body)).await;
        assert_eq!(status, 400, "{problem}");
        assert!(
            problem["errors"]
                .as_array()
                .expect("violations")
                .iter()
                .any(|v| v["pointer"] == pointer),
            "{problem}"
        );
    }
    let (status, problem) = send(
        &a,
        reqwest::Method::POST,
        upstreams.clone(),
        Some(json!({"name": "shell", "command": "/bin/sh"})),
    )
    .await;
    assert_eq!(status, 400, "a stdio upstream is the operator's: {problem}");

    // A adds the upstream with a bearer token and a static header.
    let (status, created) = send(
        &a,
        reqwest::Method::POST,
        upstreams.clone(),
        Some(json!({
            "name": "peer",
            "url": upstream.url("/mcp"),
            "bearer": secret,
            "headers": {"x-team": "alpha-header-secret"},
            "deny": ["execute_command"],
        })),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let shown = created.to_string();
    assert!(
        !shown.contains(&secret) && !shown.contains("alpha-header-secret"),
        "{shown}"
    );
    assert_eq!(created["bearer"], true, "{created}");
    assert_eq!(created["headers"], json!(["x-team"]), "{created}");
    assert_eq!(created["prefix"], "peer__", "{created}");

    until_tools(&a, &gw, "A sees its upstream's tools", |n| {
        n.iter().any(|t| t == "peer__echo")
    })
    .await;
    let (_, listed) = send(&a, reqwest::Method::GET, gw.url("/v1/upstreams/peer"), None).await;
    assert_eq!(listed["status"]["state"], "connected", "{listed}");
    assert!(
        listed["status"]["tools"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("peer__echo"))
                && !t.contains(&json!("peer__execute_command"))),
        "{listed}"
    );

    // A calls it over REST and over MCP.
    let (status, _, done) = gw
        .invoke(
            "peer__echo",
            json!({"arguments": {"message": "via a tenant upstream"}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        done["structured"],
        json!({"message": "via a tenant upstream"})
    );
    let a_mcp = connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    let a_tools = a_mcp.list_all_tools().await.expect("tools/list");
    assert!(a_tools.iter().any(|t| t.name == "peer__echo"));
    let result = a_mcp
        .call_tool(call("peer__echo", json!({"message": "over mcp"})))
        .await
        .expect("tools/call");
    assert_ne!(result.is_error, Some(true), "{result:?}");

    // B sees none of it: not the tools, not the upstream; cannot call, change or delete.
    let b_names = names(&b, &gw).await;
    assert!(
        !b_names.iter().any(|n| n.starts_with("peer__")),
        "{b_names:?}"
    );
    let (status, body) = send(
        &b,
        reqwest::Method::POST,
        gw.url("/v1/tools/peer__echo/invoke"),
        Some(json!({"arguments": {"message": "mine now"}})),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = send(
        &b,
        reqwest::Method::GET,
        gw.url("/v1/tools/peer__echo"),
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, body) = send(&b, reqwest::Method::GET, upstreams.clone(), None).await;
    assert_eq!((status, &body["upstreams"]), (200, &json!([])), "{body}");
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let (status, body) = send(&b, method, gw.url("/v1/upstreams/peer"), None).await;
        assert_eq!(status, 404, "{body}");
    }
    let (status, body) = send(
        &b,
        reqwest::Method::PUT,
        gw.url("/v1/upstreams/peer"),
        Some(json!({"name": "peer", "url": upstream.url("/mcp")})),
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let b_mcp = connect(&gw, &b_key, ProtocolVersion::V_2026_07_28).await;
    let b_tools = b_mcp.list_all_tools().await.expect("tools/list");
    assert!(!b_tools.iter().any(|t| t.name.starts_with("peer__")));
    let refused = b_mcp
        .call_tool(call("peer__echo", json!({"message": "mine now"})))
        .await;
    assert!(refused.is_err(), "an unknown tool to B: {refused:?}");

    // B's own upstream of the same name is B's alone: only the tool it allows.
    let (status, body) = send(
        &b,
        reqwest::Method::POST,
        upstreams.clone(),
        Some(json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": secret, "allow": ["echo"]})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    until_tools(&b, &gw, "B sees its own upstream", |n| {
        n.iter().any(|t| t == "peer__echo") && !n.iter().any(|t| t == "peer__read_file")
    })
    .await;
    let a_names = names(&a, &gw).await;
    assert!(
        a_names.iter().any(|n| n == "peer__read_file"),
        "{a_names:?}"
    );

    // Audit rows: A's calls in A's log, none in B's, no credential anywhere.
    let (_, a_audit) = send(
        &a,
        reqwest::Method::GET,
        gw.url("/v1/audit?tool=peer__echo"),
        None,
    )
    .await;
    assert_eq!(
        a_audit["entries"].as_array().map(Vec::len),
        Some(2),
        "{a_audit}"
    );
    let (_, b_audit) = send(
        &b,
        reqwest::Method::GET,
        gw.url("/v1/audit?tool=peer__echo"),
        None,
    )
    .await;
    // B's log holds only B's own refused attempts (REST and MCP).
    let b_entries = b_audit["entries"].as_array().expect("entries");
    assert_eq!(b_entries.len(), 2, "{b_audit}");
    assert!(
        b_entries.iter().all(|e| e["outcome"] == "not_found"),
        "{b_audit}"
    );
    let audit_text = a_audit.to_string();
    assert!(!audit_text.contains(&secret) && !audit_text.contains("alpha-header-secret"));
    // At rest the credentials are sealed: the database file holds neither value.
    let mut db = std::fs::read(gw.data.path().join("toolgate.db")).expect("database file");
    db.extend(std::fs::read(gw.data.path().join("toolgate.db-wal")).unwrap_or_default());
    let db = String::from_utf8_lossy(&db);
    assert!(
        db.contains("x-team"),
        "the header's name is stored in the clear"
    );
    assert!(!db.contains(&secret) && !db.contains("alpha-header-secret"));

    // Deleting it removes its tools from A at once.
    let (status, body) = send(
        &a,
        reqwest::Method::DELETE,
        gw.url("/v1/upstreams/peer"),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    let a_names = names(&a, &gw).await;
    assert!(
        !a_names.iter().any(|n| n.starts_with("peer__")),
        "{a_names:?}"
    );
    let (status, _, body) = gw
        .invoke("peer__echo", json!({"arguments": {"message": "gone"}}))
        .await;
    assert_eq!(status, 404, "{body}");
    let b_names = names(&b, &gw).await;
    assert!(
        b_names.iter().any(|n| n == "peer__echo"),
        "B's own stays: {b_names:?}"
    );

    // Only tenant admins manage upstreams.
    let (status, member) = send(
        &a,
        reqwest::Method::POST,
        gw.url("/v1/keys"),
        Some(json!({"name": "member", "scopes": ["tools:invoke"]})),
    )
    .await;
    assert_eq!(status, 201, "{member}");
    let member = client_with_key(member["secret"].as_str().expect("secret"));
    let (status, body) = send(&member, reqwest::Method::GET, upstreams, None).await;
    assert_eq!(status, 403, "{body}");

    a_mcp.cancel().await.expect("close");
    b_mcp.cancel().await.expect("close");
    gw.stop().await;
    upstream.stop().await;
}

/// Editing an upstream (the console's form) keeps its write-only credentials when asked,
/// sealed again for its new name, but never for another server: a changed origin must
/// send them again.
#[tokio::test]
async fn an_edited_upstream_keeps_its_credentials_only_on_its_origin() {
    let upstream = Gateway::start().await;
    let gw = Gateway::start_with(loopback).await;
    let a = gw.http.clone();
    let (status, created) = send(
        &a,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(json!({"name": "peer", "url": upstream.url("/mcp"),
                    "bearer": upstream.admin_key, "headers": {"x-team": "alpha"}})),
    )
    .await;
    assert_eq!(status, 201, "{created}");

    let edit = |body: Value| {
        send(
            &a,
            reqwest::Method::PUT,
            gw.url("/v1/upstreams/peer"),
            Some(body),
        )
    };
    let (status, refused) = edit(json!({"name": "peer", "url": upstream.url("/mcp"),
        "bearer": "new", "keep_credentials": true}))
    .await;
    assert_eq!(status, 400, "new credentials or kept ones: {refused}");
    let elsewhere = "http://127.0.0.1:9/mcp";
    let (status, refused) =
        edit(json!({"name": "peer", "url": elsewhere, "keep_credentials": true})).await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("origin"), "{refused}");

    // Renamed and narrowed, its credentials kept: it connects with them and answers.
    let (status, edited) = edit(json!({"name": "docs", "url": upstream.url("/mcp"),
        "allow": ["echo"], "keep_credentials": true}))
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["bearer"], true, "{edited}");
    assert_eq!(edited["headers"], json!(["x-team"]), "{edited}");
    until_tools(&a, &gw, "the edited upstream's tools", |n| {
        n.iter().any(|t| t == "docs__echo") && !n.iter().any(|t| t.starts_with("peer__"))
    })
    .await;
    let (status, _, done) = gw
        .invoke("docs__echo", json!({"arguments": {"message": "kept"}}))
        .await;
    assert_eq!(status, 200, "the bearer went along: {done}");

    // Without keep_credentials a replacement holds what it says: no credentials.
    let (status, bare) = send(
        &a,
        reqwest::Method::PUT,
        gw.url("/v1/upstreams/docs"),
        Some(json!({"name": "docs", "url": upstream.url("/mcp")})),
    )
    .await;
    assert_eq!(status, 200, "{bare}");
    assert_eq!(bare["bearer"], false, "{bare}");
    gw.stop().await;
    upstream.stop().await;
}

/// Two instances on one Postgres: an upstream added through one is served by the other
/// within the sync period, and its removal reaches both.
#[tokio::test]
async fn instances_on_one_postgres_follow_each_others_changes() {
    let upstream = Gateway::start().await;
    let db = PgDb::create().await;
    let url = db.url.clone();
    let first = Gateway::start_with(|c| {
        loopback(c);
        c.database.url = Some(Secret::new(url.clone()));
    })
    .await;
    let key_file = first.data.path().join("admin-api-key");
    let second = Gateway::start_with(|c| {
        loopback(c);
        c.database.url = Some(Secret::new(url.clone()));
        c.auth.admin_key_file = Some(key_file);
    })
    .await;
    let (status, body) = send(
        &first.http,
        reqwest::Method::POST,
        first.url("/v1/upstreams"),
        Some(json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": upstream.admin_key})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    until_tools(
        &second.http,
        &second,
        "the second instance serves it",
        |n| n.iter().any(|t| t == "peer__echo"),
    )
    .await;
    let (status, _, done) = second
        .invoke("peer__echo", json!({"arguments": {"message": "elsewhere"}}))
        .await;
    assert_eq!(status, 200, "{done}");

    let (status, body) = send(
        &second.http,
        reqwest::Method::DELETE,
        second.url("/v1/upstreams/peer"),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    until_tools(&first.http, &first, "the first instance drops it", |n| {
        !n.iter().any(|t| t.starts_with("peer__"))
    })
    .await;
    first.stop().await;
    second.stop().await;
    upstream.stop().await;
    db.drop_db().await;
}

/// Counts the `notifications/tools/list_changed` a session hears.
pub(crate) struct Heard(tokio::sync::mpsc::UnboundedSender<()>);

impl rmcp::ClientHandler for Heard {
    async fn on_tool_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        let _ = self.0.send(());
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("e2e-watcher", "1"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// A legacy session for `key`, and what it hears of tool list changes.
pub(crate) async fn watch(
    gw: &Gateway,
    key: &str,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, Heard>,
    tokio::sync::mpsc::UnboundedReceiver<()>,
) {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let (tx, heard) = tokio::sync::mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp")).auth_header(key),
    );
    let session = Heard(tx).serve(transport).await.expect("connect");
    (session, heard)
}

/// A change to one tenant's upstream tools is news to that tenant's MCP sessions only.
#[tokio::test]
async fn only_sessions_of_the_tenant_whose_tools_changed_hear_of_it() {
    let upstream = Gateway::start().await;
    let gw = Gateway::start_with(loopback).await;
    let b_key = gw.create_tenant("globex").await;
    let b = client_with_key(&b_key);
    let (a_session, mut a_heard) = watch(&gw, &gw.admin_key).await;
    let (b_session, mut b_heard) = watch(&gw, &b_key).await;
    // Each session's watcher starts on `initialized`, sent right after the handshake.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let add = |name: &str| json!({"name": name, "url": upstream.url("/mcp"), "bearer": upstream.admin_key, "allow": ["echo"]});
    let (status, body) = send(
        &gw.http,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(add("peer")),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    tokio::time::timeout(Duration::from_secs(20), a_heard.recv())
        .await
        .expect("A hears of its new tools")
        .expect("open");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(b_heard.try_recv().is_err(), "B heard of A's tools");
    // B's own change reaches B.
    let (status, body) = send(
        &b,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(add("own")),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    tokio::time::timeout(Duration::from_secs(20), b_heard.recv())
        .await
        .expect("B hears of its own new tools")
        .expect("open");
    a_session.cancel().await.expect("close");
    b_session.cancel().await.expect("close");
    gw.stop().await;
    upstream.stop().await;
}

/// Per-principal upstream credentials (issue 29): an upstream that calls with each
/// caller's own credential is seen by its server (another gateway, which checks API
/// keys) with each principal's own key; a principal with none stored cannot call; the
/// upstream's own credential only lists the tools; nothing stored is ever shown.
#[tokio::test]
async fn each_principal_calls_an_upstream_with_its_own_credential() {
    let upstream = Gateway::start().await;
    // At the upstream: a key to list tools with, and one per person.
    let mut keys = Vec::new();
    for name in ["lister", "ann-at-upstream", "bob-at-upstream"] {
        let (_, _, who) = upstream
            .post("/v1/principals", json!({"name": name, "roles": ["member"]}))
            .await;
        let (_, _, key) = upstream
            .post("/v1/keys", json!({"name": name, "principal_id": who["id"]}))
            .await;
        keys.push((
            who["id"].clone(),
            key["secret"].as_str().expect("secret").to_owned(),
        ));
    }
    let gw = Gateway::start_with(loopback).await;
    let (status, created) = send(
        &gw.http,
        reqwest::Method::POST,
        gw.url("/v1/upstreams"),
        Some(
            json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": keys[0].1,
                    "personal_credentials": true}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["personal_credentials"], true, "{created}");
    until_tools(&gw.http, &gw, "peer's tools are listed", |n| {
        n.contains(&"peer__echo".to_owned())
    })
    .await;
    // Here: Ann and Bob, and Carol who stores nothing.
    let mut people = Vec::new();
    for name in ["ann", "bob", "carol"] {
        let (_, _, who) = gw
            .post("/v1/principals", json!({"name": name, "roles": ["member"]}))
            .await;
        let (_, _, key) = gw
            .post("/v1/keys", json!({"name": name, "principal_id": who["id"]}))
            .await;
        people.push(client_with_key(key["secret"].as_str().expect("secret")));
    }
    let mine = gw.url("/v1/upstreams/peer/credentials");
    for (person, (_, key)) in people.iter().zip(&keys[1..]) {
        let (status, stored) = send(
            person,
            reqwest::Method::PUT,
            mine.clone(),
            Some(json!({"bearer": key})),
        )
        .await;
        assert_eq!(status, 200, "{stored}");
        assert_eq!(stored, json!({"bearer": true, "headers": []}));
        let (status, shown) = send(person, reqwest::Method::GET, mine.clone(), None).await;
        assert_eq!(status, 200, "{shown}");
        assert!(
            !shown.to_string().contains(key.as_str()),
            "write-only: {shown}"
        );
    }
    let call = |who: usize, message: &str| {
        let person = people[who].clone();
        let url = gw.url("/v1/tools/peer__echo/invoke");
        let body = json!({"arguments": {"message": message}});
        async move { send(&person, reqwest::Method::POST, url, Some(body)).await }
    };
    let (status, body) = call(0, "from ann").await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = call(1, "from bob").await;
    assert_eq!(status, 200, "{body}");
    let (status, refused) = call(2, "from carol").await;
    assert_eq!(status, 502, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("you stored none"),
        "{refused}"
    );
    // The upstream saw each call as its own principal.
    let (_, _, audit) = upstream.get("/v1/audit?tool=echo").await;
    let seen: Vec<(Value, Value)> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| (e["principal_id"].clone(), e["arguments"]["message"].clone()))
        .collect();
    assert!(
        seen.contains(&(keys[1].0.clone(), json!("from ann"))),
        "{seen:?}"
    );
    assert!(
        seen.contains(&(keys[2].0.clone(), json!("from bob"))),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
    // Forgotten: Ann's next call is refused.
    let (status, _) = send(&people[0], reqwest::Method::DELETE, mine.clone(), None).await;
    assert_eq!(status, 204);
    let (status, _) = call(0, "again").await;
    assert_eq!(status, 502);
    gw.stop().await;
    upstream.stop().await;
}
