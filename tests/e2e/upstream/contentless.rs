//! An upstream whose `tools/call` answer has no `content` (`{}`, or only `_meta`), as some
//! servers answer for a tool that returns nothing: the call is an empty result, as rmcp's
//! own client takes it, over REST and MCP. Before, the gateway refused it as "something
//! other than a tool result".

use super::*;

#[tokio::test]
async fn a_tool_result_without_content_is_an_empty_result() {
    let gw =
        Gateway::start_with(|c| c.upstreams = vec![python_upstream("ow", "one_write_server.py")])
            .await;
    listed_once(&gw, "ow__say_then_answer").await;
    for n in [-1, -2] {
        let (status, _, body) = gw
            .invoke("ow__say_then_answer", json!({"arguments": {"n": n}}))
            .await;
        assert_eq!(status, 200, "n = {n}: {body}");
        assert_eq!(body["content"], json!([]), "n = {n}: {body}");
    }
    // MCP relays it as a result too.
    let mcp = gw.mcp_2026(&gw.admin_key).await;
    let done = mcp
        .call_tool(
            rmcp::model::CallToolRequestParams::new("ow__say_then_answer")
                .with_arguments(json!({"n": -2}).as_object().cloned().expect("object")),
        )
        .await
        .expect("an MCP call");
    assert!(done.content.is_empty(), "{done:?}");
    assert_ne!(done.is_error, Some(true), "{done:?}");
    mcp.cancel().await.expect("close");
    // And the audit has the call as a success.
    let (_, _, audit) = gw.get("/v1/audit?tool=ow__say_then_answer").await;
    let outcomes: Vec<&str> = audit["entries"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["outcome"].as_str().expect("outcome"))
        .collect();
    assert_eq!(outcomes, ["ok", "ok", "ok"], "{audit}");
    gw.stop().await;
}
