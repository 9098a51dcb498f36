//! Calls over MCP through the executor: every protocol version, cancellation, progress, polled streams resumed, vendor `_meta`.

use super::*;

#[tokio::test]
async fn every_protocol_version_lists_and_calls_through_the_executor() {
    let gw = Gateway::start().await;
    for version in VERSIONS {
        let client = connect(&gw, &gw.admin_key, version.clone()).await;
        let tools = client.list_all_tools().await.expect("tools/list");
        let echo = tools
            .iter()
            .find(|t| t.name == "echo")
            .unwrap_or_else(|| panic!("{version}: echo listed"));
        let annotations = echo.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.read_only_hint, Some(true), "{version}");
        assert_eq!(annotations.destructive_hint, Some(false), "{version}");
        assert!(echo.output_schema.is_some(), "{version}");

        let ok = client
            .call_tool(call("echo", json!({"message": "hi"})))
            .await
            .expect("tools/call");
        assert_eq!(ok.is_error, Some(false), "{version}: {ok:?}");
        assert_eq!(
            ok.structured_content,
            Some(json!({"message": "hi"})),
            "{version}"
        );
        assert_eq!(ok.content[0].as_text().map(|t| t.text.as_str()), Some("hi"));

        // Arguments violating the schema: a result the model can read, not a protocol error.
        let bad = client
            .call_tool(call("echo", json!({"mesage": "typo"})))
            .await
            .expect("tools/call");
        assert_eq!(bad.is_error, Some(true), "{version}: {bad:?}");
        let text = bad.content[0].as_text().expect("text").text.clone();
        let error: Value = serde_json::from_str(&text).expect("JSON error");
        assert_eq!(error["error"]["kind"], "invalid_arguments", "{text}");
        assert_eq!(
            error["error"]["violations"].as_array().map(Vec::len),
            Some(2),
            "each violation listed: {text}"
        );

        // An unknown tool is a JSON-RPC error (-32602).
        match client.call_tool(call("no_such_tool", json!({}))).await {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602, "{version}"),
            other => panic!("{version}: expected -32602, got {other:?}"),
        }
        client.cancel().await.expect("close");
    }
    // Every call is audited with adapter mcp and the client's name, unknown tool included.
    let rows = audit(&gw, &gw.http, "adapter=mcp&limit=100").await;
    assert_eq!(rows.len(), 3 * VERSIONS.len(), "{rows:#?}");
    for row in &rows {
        assert_eq!(row["adapter"], "mcp");
        assert_eq!(row["client"], "e2e-mcp-client/1.2.3", "{row}");
    }
    let outcomes = |o: &str| rows.iter().filter(|r| r["outcome"] == o).count();
    assert_eq!(outcomes("ok"), VERSIONS.len());
    assert_eq!(outcomes("invalid_arguments"), VERSIONS.len());
    assert_eq!(outcomes("not_found"), VERSIONS.len());
    gw.stop().await;
}

#[tokio::test]
async fn a_dropped_call_is_cancelled_and_audited_as_cancelled() {
    let gw = Gateway::start().await;
    for (done, version) in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28]
        .into_iter()
        .enumerate()
    {
        let client = connect(&gw, &gw.admin_key, version.clone()).await;
        let started = std::time::Instant::now();
        // Dropping the pending request sends notifications/cancelled (or, stateless,
        // closes the request's stream).
        let pending = client.call_tool_once(call("sleep", json!({"seconds": 30})));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), pending)
                .await
                .is_err()
        );
        let mut row = None;
        for _ in 0..100 {
            let rows = audit(&gw, &gw.http, "adapter=mcp&tool=sleep").await;
            if rows.len() > done {
                row = rows.into_iter().next();
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let row = row.unwrap_or_else(|| panic!("{version}: no audit row for the cancelled call"));
        assert_eq!(row["outcome"], "cancelled", "{version}: {row}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{version}: the tool kept running"
        );
        client.cancel().await.expect("close");
    }
    gw.stop().await;
}

#[tokio::test]
async fn a_progress_token_gets_progress_notifications_before_the_result() {
    let gw = Gateway::start().await;
    let session = open_session(&gw).await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"seconds": 2.2}, "_meta": {"progressToken": "p-1"}}});
    let response = post_mcp(&gw, &gw.http, Some(&session), call).await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.expect("SSE body");
    let messages: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let progress: Vec<&Value> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(progress.len() >= 3, "one report per second: {body}");
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "p-1");
        assert_eq!(p["params"]["total"], 2.2);
    }
    let last = messages.last().expect("result");
    assert_eq!(last["id"], 7, "the result comes last: {body}");
    assert_eq!(last["result"]["isError"], false);
    gw.stop().await;
}

#[tokio::test]
async fn a_long_call_lets_go_of_its_stream_and_the_client_resumes_it() {
    fn polling(c: &mut toolgate_server::config::Config) {
        c.mcp.sse_poll_after_ms = Some(300);
        c.mcp.sse_retry_ms = 250;
    }
    // Polling keeps the events in the store, SQLite's or Postgres's.
    resumes_a_polled_call(Gateway::start_with(polling).await).await;
    let db = PgDb::create().await;
    let url = Secret::new(db.url.clone());
    let gw = Gateway::start_with(|c| {
        polling(c);
        c.database.url = Some(url);
    })
    .await;
    resumes_a_polled_call(gw).await;
    db.drop_db().await;
}

async fn resumes_a_polled_call(gw: Gateway) {
    let session = open_session(&gw).await;
    // A call shorter than the threshold answers on its own stream.
    let body = quick_echo(&gw, &session).await;
    assert!(
        sse_events(&body).iter().any(|(_, _, data)| data
            .as_ref()
            .is_some_and(|d| d["id"] == 8 && d["result"]["isError"] == false)),
        "{body}"
    );

    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "sleep", "arguments": {"seconds": 1.5}, "_meta": {"progressToken": "p-9"}}});
    let first = post_mcp(&gw, &gw.http, Some(&session), call).await;
    assert_eq!(first.status(), 200);
    let body = first.text().await.expect("the stream ends before the call");
    let events = sse_events(&body);
    let (last_id, retry, _) = events.last().expect("events").clone();
    assert_eq!(
        retry,
        Some(250),
        "the stream ends telling when to come back: {body}"
    );
    assert!(
        !events
            .iter()
            .any(|(_, _, d)| d.as_ref().is_some_and(|d| d["id"] == 9)),
        "the result came before the stream was let go: {body}"
    );

    let mut last_id = last_id.expect("an event id to resume from");
    let mut seen = Vec::new();
    let mut resumptions = 0;
    for _ in 0..40 {
        resumptions += 1;
        let resumed = resume(&gw, &session, &last_id).await;
        assert_eq!(resumed.status(), 200);
        let events = sse_events(&resumed.text().await.expect("resumed body"));
        if let Some(id) = events.iter().rev().find_map(|(id, _, _)| id.clone()) {
            last_id = id;
        }
        seen.extend(events.into_iter().filter_map(|(_, _, data)| data));
        if seen.iter().any(|d| d["id"] == 9) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let result = seen
        .iter()
        .find(|d| d["id"] == 9)
        .unwrap_or_else(|| panic!("the result after resuming: {seen:?}"));
    assert_eq!(result["result"]["isError"], false, "{result}");
    // 1.5 s at 300 ms a stream: a resumed stream is let go of too.
    assert!(resumptions >= 2, "{resumptions} resumptions");
    assert!(
        seen.iter()
            .any(|d| d["method"] == "notifications/progress"
                && d["params"]["progressToken"] == "p-9"),
        "progress reported while the client was away reaches it: {seen:?}"
    );
    let rows = audit(&gw, &gw.http, "adapter=mcp&tool=sleep").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["outcome"], "ok", "{rows:?}");
    gw.stop().await;
}

/// An echo call (id 8) in `session`: its SSE body.
async fn quick_echo(gw: &Gateway, session: &str) -> String {
    let echo = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "quick"}}});
    post_mcp(gw, &gw.http, Some(session), echo)
        .await
        .text()
        .await
        .expect("SSE body")
}

/// `session`'s stream resumed after event `last_id`.
async fn resume(gw: &Gateway, session: &str, last_id: &str) -> reqwest::Response {
    gw.http
        .get(gw.url("/mcp"))
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", session)
        .header("last-event-id", last_id)
        .send()
        .await
        .expect("resume")
}

/// A stream resumed with `Last-Event-ID` gets every event kept after that one, read from
/// the store a bounded part at a time (before, all at once: a stream holding many large
/// events, e.g. an upstream's log messages, was read whole into memory on each resume).
#[tokio::test]
async fn a_resumed_stream_of_large_events_is_replayed_whole_in_parts() {
    use sqlx::Connection as _;

    let gw = Gateway::start_with(|c| c.mcp.durable_streams = Some(true)).await;
    let session = open_session(&gw).await;
    let body = quick_echo(&gw, &session).await;
    let first = sse_events(&body)
        .into_iter()
        .find_map(|(id, _, _)| id)
        .unwrap_or_else(|| panic!("an event id: {body}"));
    // Twelve events of 1 MiB on the same stream, as an upstream's log messages would be.
    let file = format!("sqlite://{}", gw.data.path().join("toolgate.db").display());
    let mut db = sqlx::SqliteConnection::connect(&file).await.expect("open");
    for n in 0..12 {
        let message = json!({"jsonrpc": "2.0", "method": "notifications/message",
            "params": {"level": "info", "data": format!("{n} {}", "x".repeat(1 << 20))}});
        sqlx::query(
            "insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms, created_at) \
             select tenant_id, session_id, stream_id, ?, null, created_at from mcp_event where event_seq = ?",
        )
        .bind(message.to_string())
        .bind(first.parse::<i64>().expect("numeric id"))
        .execute(&mut db)
        .await
        .expect("insert");
    }
    db.close().await.expect("close");

    let resumed = resume(&gw, &session, &first).await;
    assert_eq!(resumed.status(), 200);
    let text = tokio::time::timeout(Duration::from_secs(30), resumed.text())
        .await
        .expect("the replay ends")
        .expect("body");
    let events = sse_events(&text);
    let logged: Vec<u64> = events
        .iter()
        .filter_map(|(_, _, d)| d.as_ref())
        .filter(|d| d["method"] == "notifications/message")
        .map(|d| {
            let data = d["params"]["data"].as_str().expect("data");
            assert_eq!(data.len(), (1 << 20) + data.find(' ').expect("n") + 1);
            data.split(' ').next().expect("n").parse().expect("n")
        })
        .collect();
    assert_eq!(
        logged,
        (0..12).collect::<Vec<_>>(),
        "every event once, in order"
    );
    let ids: Vec<i64> = events
        .iter()
        .filter_map(|(id, _, _)| id.as_deref()?.parse().ok())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    gw.stop().await;
}

#[tokio::test]
async fn vendor_meta_goes_only_to_the_clients_that_asked_for_it() {
    let gw = Gateway::start().await;
    for version in [ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28] {
        let openai = connect_as(&gw, &gw.admin_key, version.clone(), "openai-mcp").await;
        let tools = openai.list_all_tools().await.expect("tools/list");
        let echo = tools.iter().find(|t| t.name == "echo").expect("echo");
        let meta = serde_json::to_value(echo.meta.as_ref().expect("_meta for OpenAI's client"))
            .expect("json");
        assert_eq!(
            meta["openai/toolInvocation/invoking"], "Echoing…",
            "{version}"
        );
        openai.cancel().await.expect("close");

        let other = connect_as(&gw, &gw.admin_key, version.clone(), "claude-ai").await;
        let tools = other.list_all_tools().await.expect("tools/list");
        assert!(
            tools.iter().all(|t| t.meta.is_none()),
            "{version}: no vendor _meta for other clients: {tools:?}"
        );
        other.cancel().await.expect("close");
    }
    gw.stop().await;
}
