//! The official MCP SDK clients (Python `mcp`, TypeScript `@modelcontextprotocol/sdk`,
//! pinned in `tests/clients`) against the gateway's `/mcp`, as a user's agent would
//! connect: bearer token, list, call, an error result, an unknown tool, a cancelled call.

use serde_json::{Value, json};
use toolgate_e2e::{Gateway, client_with_key, read, run_sdk_client};

fn check_session(seen: &Value, expected_text: &str) {
    assert_eq!(seen["server"], "toolgate", "{seen}");
    assert!(
        seen["tools"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("echo"))),
        "{seen}"
    );
    assert_eq!(seen["echo_read_only"], true, "{seen}");
    assert_eq!(seen["ok"]["is_error"], false, "{seen}");
    assert_eq!(seen["ok"]["text"], expected_text, "{seen}");
    assert_eq!(seen["ok"]["structured"], json!({"message": expected_text}));
    assert_eq!(seen["bad"]["is_error"], true, "{seen}");
    assert_eq!(seen["bad"]["error"]["kind"], "invalid_arguments", "{seen}");
    assert_eq!(seen["unknown"], -32602, "{seen}");
    assert_eq!(seen["cancelled"], true, "{seen}");
    assert_eq!(seen["after_cancel"], "after cancel", "{seen}");
}

async fn mcp_rows(gw: &Gateway, client: &reqwest::Client) -> Vec<Value> {
    let (status, _, page) = read(
        client
            .get(gw.url("/v1/audit?adapter=mcp&limit=100"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{page}");
    page["entries"].as_array().expect("entries").clone()
}

#[tokio::test]
async fn python_and_typescript_sdk_clients_list_call_and_cancel() {
    let gw = Gateway::start().await;
    let b_key = gw.create_tenant("umbrella").await;
    let url = gw.url("/mcp");

    let (ok, py, stderr) = run_sdk_client(
        "python",
        &["python_client.py", &url, &gw.admin_key, "--cancel"],
    )
    .await;
    assert!(ok, "python client failed: {stderr}");
    check_session(&py, "from python");
    let (ok, ts, stderr) =
        run_sdk_client("node", &["ts_client.mjs", &url, &b_key, "--cancel"]).await;
    assert!(ok, "typescript client failed: {stderr}");
    check_session(&ts, "from typescript");

    // Each tenant's log holds exactly its own client's calls: echo ok, echo invalid,
    // the unknown tool, the cancelled sleep, echo after it.
    let mut cancelled = false;
    for _ in 0..100 {
        let a = mcp_rows(&gw, &gw.http).await;
        let b = mcp_rows(&gw, &client_with_key(&b_key)).await;
        if a.len() == 5 && b.len() == 5 {
            assert!(a.iter().all(|r| r["client"] == "mcp/0.1.0"), "{a:#?}");
            assert!(
                b.iter().all(|r| r["client"] == "ts-sdk-e2e/1.0.0"),
                "{b:#?}"
            );
            for rows in [&a, &b] {
                let sleep = rows
                    .iter()
                    .find(|r| r["tool"] == "sleep")
                    .expect("sleep row");
                assert_eq!(sleep["outcome"], "cancelled", "{sleep}");
            }
            cancelled = true;
            break;
        }
        assert!(a.len() <= 5 && b.len() <= 5, "{a:#?} {b:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(cancelled, "both tenants' five MCP rows");
    gw.stop().await;
}

/// SSE polling (SEP-1699) against the official clients: the gateway lets go of a long
/// call's POST stream after 300 ms (that it does is `mcp::a_long_call_…`'s to prove), and
/// each SDK resumes the stream with `Last-Event-ID` and gets the result.
#[tokio::test]
async fn sdk_clients_resume_a_call_whose_stream_the_gateway_let_go() {
    let gw = Gateway::start_with(|c| {
        c.mcp.sse_poll_after_ms = Some(300);
        c.mcp.sse_retry_ms = 200;
    })
    .await;
    let url = gw.url("/mcp");
    for (program, script) in [("python", "python_client.py"), ("node", "ts_client.mjs")] {
        let (ok, seen, stderr) =
            run_sdk_client(program, &[script, &url, &gw.admin_key, "--long"]).await;
        assert!(ok, "{script} failed: {stderr}");
        assert_eq!(
            seen["long"],
            json!({"is_error": false, "text": "slept 1.5 s"}),
            "{script}: {seen}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn sdk_clients_without_a_valid_token_are_refused() {
    let gw = Gateway::start().await;
    let url = gw.url("/mcp");
    let (ok, seen, _) = run_sdk_client("python", &["python_client.py", &url, "tg_forged"]).await;
    assert!(!ok, "python client got in with a forged key: {seen}");
    let (ok, seen, _) = run_sdk_client("node", &["ts_client.mjs", &url, "not-a-token"]).await;
    assert!(!ok, "typescript client got in with a bad token: {seen}");
    gw.stop().await;
}
