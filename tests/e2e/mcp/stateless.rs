//! Stateless MCP (2026-07-28 and session-less legacy clients): JSON or streamed results, clients known by their info.

use super::*;

/// With `mcp.sessions` off, rmcp serves every protocol version statelessly: the
/// `clientInfo` of an `initialize` is gone by the next request, so calls are known by their
/// `User-Agent`, not by the name rmcp gives such a request's peer (its own).
#[tokio::test]
async fn without_sessions_legacy_calls_are_known_by_their_user_agent() {
    let gw = Gateway::start_with(|c| c.mcp.sessions = false).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hi"}}});
    // This client's User-Agent is toolgate-e2e/1.
    let response = post_mcp(
        &gw,
        &toolgate_e2e::client_with_key(&gw.admin_key),
        None,
        call,
    )
    .await;
    assert_eq!(response.status(), 200);
    let text = response.text().await.expect("body");
    assert!(text.contains(r#""isError":false"#), "{text}");
    let rows = audit(&gw, &gw.http, "adapter=mcp").await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["client"], "toolgate-e2e/1", "{rows:#?}");
    gw.stop().await;
}

/// A 2026-07-28 call whose result is all it sends is answered as one JSON body: nothing
/// to stream, and one write instead of a stream's head and event, then its end (split
/// apart by the wait for the audit commit). A call that sends progress first is
/// streamed, the result last.
#[tokio::test]
async fn a_stateless_result_alone_is_json_and_progress_makes_it_a_stream() {
    let gw = Gateway::start().await;
    let (content_type, messages) = post_stateless_typed(
        &gw,
        Some("json-e2e"),
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    )
    .await;
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0]["result"]["isError"], false, "{messages:?}");

    let (content_type, messages) = post_stateless_typed(
        &gw,
        Some("json-e2e"),
        2,
        "tools/call",
        json!({"name": "sleep", "arguments": {"seconds": 0.2}, "_meta": {"progressToken": "p-2"}}),
    )
    .await;
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    assert_eq!(
        messages[0]["method"], "notifications/progress",
        "{messages:?}"
    );
    assert_eq!(messages.last().expect("result")["result"]["isError"], false);
    gw.stop().await;
}

#[tokio::test]
async fn stateless_clients_are_known_by_the_client_info_in_their_meta() {
    let gw = Gateway::start().await;
    let done = post_stateless(
        &gw,
        "stateless-e2e",
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    )
    .await;
    let done = done.last().expect("response");
    assert_eq!(done["result"]["isError"], false, "{done}");
    let rows = audit(&gw, &gw.http, "adapter=mcp").await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["client"], "stateless-e2e/7.0", "{rows:#?}");

    // One that names no client is known by its User-Agent, as on REST, not by the
    // name rmcp gives a stateless request's peer (its own).
    let (_, done) = post_stateless_typed(
        &gw,
        None,
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    )
    .await;
    assert_eq!(done.last().expect("response")["result"]["isError"], false);
    let rows = audit(&gw, &gw.http, "adapter=mcp").await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["client"], "ua-e2e/1", "{rows:#?}");

    // Client-aware rendering reads the same clientInfo.
    for (client, vendor) in [("openai-mcp", true), ("claude-ai", false)] {
        let listed = post_stateless(&gw, client, 2, "tools/list", json!({})).await;
        let tools = listed.last().expect("response")["result"]["tools"]
            .as_array()
            .expect("tools")
            .clone();
        let echo = tools.iter().find(|t| t["name"] == "echo").expect("echo");
        assert_eq!(
            echo["_meta"]["openai/toolInvocation/invoking"] == "Echoing…",
            vendor,
            "{client}: {echo}"
        );
    }
    gw.stop().await;
}

/// On Postgres, a NUL in a client's name or arguments failed the call's audit row, so the
/// call answered "the audit log could not record this call" (and the batch it shared was
/// retried row by row). It is answered and recorded, the NUL replaced in the text columns.
#[tokio::test]
async fn a_client_name_holding_nul_is_answered_and_audited_on_postgres() {
    let db = toolgate_e2e::PgDb::create().await;
    let url = db.url.clone();
    let gw = Gateway::start_with(|c| {
        c.database.url = Some(toolgate_server::config::Secret::new(url.clone()));
    })
    .await;
    let done = post_stateless(
        &gw,
        "evil\0client",
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "a\0b"}}),
    )
    .await;
    let done = done.last().expect("response");
    assert_eq!(done["result"]["isError"], false, "{done}");
    assert_eq!(
        done["result"]["structuredContent"]["message"], "a\0b",
        "{done}"
    );
    let rows = audit(&gw, &gw.http, "adapter=mcp").await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(rows[0]["client"], "evil\u{FFFD}client/7.0", "{rows:#?}");
    assert_eq!(rows[0]["arguments"]["message"], "a\0b", "{rows:#?}");
    gw.stop().await;
    db.drop_db().await;
}
