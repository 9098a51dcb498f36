//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, pinned in
//! `tests/clients`) against a real `toolgate serve` process, every scenario (`--suite
//! all`), run by `tests/clients/conformance.sh` exactly as a user runs it: the gateway
//! configured by a TOML file federates the scenarios' fixture server, and the suite (which
//! sends no credentials) goes through `toolgate-auth-proxy`, which adds the admin key. The
//! result is held to the committed baseline `tests/clients/conformance-baseline.yml`: a
//! failure not listed there fails this test, and so does a listed scenario that now
//! passes. The suite's results and the gateway's log stay in `target/conformance/`.

use toolgate_e2e::{sdk_clients, toolgate_binary};

#[tokio::test]
async fn mcp_conformance_suite() {
    let dir = sdk_clients();
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(300),
        tokio::process::Command::new("bash")
            .arg(dir.join("conformance.sh"))
            .env("GATEWAY_BIN", toolgate_binary())
            .env("AUTH_PROXY_BIN", env!("CARGO_BIN_EXE_toolgate-auth-proxy"))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the suite finished within 300 s")
    .expect("run tests/clients/conformance.sh");
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
        summary.contains("✓ server-initialize") && summary.contains("✓ tools-call-with-progress"),
        "{summary}"
    );
    // Its third check (the stream closed mid-call and resumed) runs only when the
    // gateway polls; without, the scenario passes its other two and says nothing.
    assert!(
        summary.contains("✓ server-sse-polling: 3 passed, 0 failed"),
        "{summary}"
    );
}
