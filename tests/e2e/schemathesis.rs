//! schemathesis (pinned in `tests/clients/schemathesis-requirements.txt`) against the
//! gateway's own `/openapi.json`, authenticated as the admin: generated requests for
//! every operation — examples, boundary values, fuzzed bodies, stateful sequences — and
//! not one may be answered with a server error. DELETEs are left out so the admin key
//! the run authenticates with survives it, and so are the SSE streams (`…/events`): an
//! accepted stream never ends, so every generated request could only time out (30 s
//! each); their refusals are tested by hand (audit_api, approvals, limits). A tool's 504
//! for a deadline the caller chose is expected (`tests/clients/schemathesis.toml`).

use toolgate_e2e::{Gateway, sdk_clients};

#[tokio::test]
async fn generated_requests_never_get_a_server_error() {
    let dir = sdk_clients();
    let config = dir.join("schemathesis.toml");
    let gw = Gateway::start().await;
    std::fs::write(gw.workspace().join("notes.txt"), "hello\n").expect("write");
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(600),
        tokio::process::Command::new(dir.join(".venv-st/bin/schemathesis"))
            .arg("--config-file")
            .arg(config)
            .args(["run", &gw.url("/openapi.json")])
            .args([
                "--header",
                &format!("Authorization: Bearer {}", gw.admin_key),
            ])
            .args(["--checks", "not_a_server_error"])
            .args(["--max-examples", "10", "--seed", "20261125"])
            .args(["--exclude-method", "DELETE"])
            .args(["--exclude-path-regex", "/events$"])
            .args(["--request-timeout", "30"])
            .env("SCHEMATHESIS_HOOKS", "")
            .current_dir(gw.data.path())
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("schemathesis finished within 600 s")
    .expect("run schemathesis");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = stdout.find("SUMMARY").map_or(&*stdout, |at| &stdout[at..]);
    assert!(
        output.status.success(),
        "schemathesis found server errors:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(summary.contains("passed"), "{summary}");
    gw.stop().await;
}
