//! Two gateway processes on one Postgres sharing an MCP session.

use super::*;

/// Two gateway processes on one Postgres serve one session-mode MCP client alternately,
/// and a stream broken on one is resumed on the other: the session, its owner and its SSE
/// events live in the store, not in either process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_postgres_share_an_mcp_session() {
    let db = pgdb::PgDb::create().await;
    let dir_a = tempfile::tempdir().expect("tempdir");
    let dir_b = tempfile::tempdir().expect("tempdir");
    let mut a = start(dir_a.path(), Some(&db.url));
    // The second instance finds the store bootstrapped; it uses the same admin key.
    std::fs::copy(
        dir_a.path().join("admin-api-key"),
        dir_b.path().join("admin-api-key"),
    )
    .expect("copy key");
    let mut b = start(dir_b.path(), Some(&db.url));
    let http = client(&a.key);

    let (status, session, init) = mcp(
        &http,
        &a.addr,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "roaming-client", "version": "7"}}}),
    )
    .await;
    assert_eq!(status, 200, "{init}");
    let session = session.expect("session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = mcp(&http, &b.addr, Some(&session), initialized).await;
    assert_eq!(status, 202);
    let (status, _, list) = mcp(
        &http,
        &b.addr,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert!(list.to_string().contains("\"echo\""), "{list}");
    for (i, addr) in [&a.addr, &b.addr, &a.addr, &b.addr].into_iter().enumerate() {
        let (status, _, result) = mcp(
            &http,
            addr,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"message": format!("hop {i}")}}}),
        )
        .await;
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["result"]["isError"], false, "{result}");
        assert_eq!(result["result"]["content"][0]["text"], format!("hop {i}"));
    }

    // A call's SSE stream breaks on B after its first event; the client resumes it with
    // `Last-Event-ID` on A, which replays the result from the store.
    let mut broken = http
        .post(format!("http://{}/mcp", b.addr))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call",
                      "params": {"name": "sleep", "arguments": {"seconds": 0.5}}}))
        .send()
        .await
        .expect("call");
    assert_eq!(broken.status(), 200);
    let mut seen = String::new();
    let last_event_id = loop {
        let chunk = broken
            .chunk()
            .await
            .expect("read")
            .expect("an event before the end");
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(id) = seen
            .lines()
            .find_map(|l| l.strip_prefix("id:"))
            .filter(|_| seen.contains("\n\n"))
        {
            break id.trim().to_owned();
        }
    };
    assert!(
        !seen.contains("\"id\":20"),
        "the result came before the break: {seen}"
    );
    drop(broken);
    let mut replayed = String::new();
    for _ in 0..50 {
        replayed = http
            .get(format!("http://{}/mcp", a.addr))
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &session)
            .header("last-event-id", &last_event_id)
            .send()
            .await
            .expect("resume")
            .text()
            .await
            .expect("replay");
        if replayed.contains("\"id\":20") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let result = replayed
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| {
            serde_json::from_str::<serde_json::Value>(d.trim())
                .ok()
                .filter(|v| v["id"] == 20)
        })
        .unwrap_or_else(|| panic!("the result replayed on the other instance: {replayed}"));
    assert_eq!(result["result"]["isError"], false, "{result}");

    // Another tenant presenting the session id is refused on either instance.
    let created: serde_json::Value = http
        .post(format!("http://{}/v1/tenants", a.addr))
        .json(&json!({"name": "intruder"}))
        .send()
        .await
        .expect("create tenant")
        .json()
        .await
        .expect("json");
    let intruder = client(created["admin_key"]["secret"].as_str().expect("secret"));
    for addr in [&a.addr, &b.addr] {
        let (status, _, _) = mcp(
            &intruder,
            addr,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        )
        .await;
        assert_eq!(status, 404);
    }

    // Every hop left its row, with the client's name from the original initialize.
    let audit: serde_json::Value = http
        .get(format!("http://{}/v1/audit?adapter=mcp", b.addr))
        .send()
        .await
        .expect("audit")
        .json()
        .await
        .expect("json");
    let entries = audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 5, "{audit}");
    assert!(
        entries.iter().all(|e| e["client"] == "roaming-client/7"),
        "{audit}"
    );
    for running in [&mut a, &mut b] {
        running.child.kill().expect("kill");
        running.child.wait().expect("wait");
    }
}
