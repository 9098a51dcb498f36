//! `toolgate backup`: a consistent copy of the embedded SQLite store, taken while the
//! gateway writes, that a gateway serves again and whose audit chain verifies.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_while_calls_run_restores_to_a_verifying_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(dir.path(), None);
    let http = client(&running.key);
    let url = format!("http://{}/v1/tools/echo/invoke", running.addr);
    // Calls keep coming while the copy is taken.
    let calling = tokio::spawn({
        let (http, url) = (http.clone(), url.clone());
        async move {
            let mut answered = 0;
            for i in 0..200 {
                let response = http
                    .post(&url)
                    .json(&json!({"arguments": {"message": format!("m{i}")}}))
                    .send()
                    .await
                    .expect("request");
                assert_eq!(response.status(), 200);
                answered += 1;
            }
            answered
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let restored = tempfile::tempdir().expect("tempdir");
    let copy = restored.path().join("toolgate.db");
    let copy_arg = copy.to_str().expect("utf-8").to_owned();
    let taken = tokio::task::spawn_blocking({
        let (data, copy_arg) = (dir.path().to_owned(), copy_arg.clone());
        move || toolgate(&["backup", "--to", &copy_arg], &data)
    })
    .await
    .expect("join");
    assert!(
        taken.status.success(),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    assert!(
        String::from_utf8_lossy(&taken.stdout).contains("not in it"),
        "says the keys are not in the copy"
    );
    assert_eq!(calling.await.expect("calls"), 200);
    let again = toolgate(&["backup", "--to", &copy_arg], dir.path());
    assert!(!again.status.success(), "never overwrites");
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists"));
    let mut child = running.child;
    child.kill().expect("kill");
    child.wait().expect("wait");

    // Restored beside the keys it needs: the chain verifies, signatures included.
    for key in ["audit-signing-key", "admin-api-key"] {
        std::fs::copy(dir.path().join(key), restored.path().join(key)).expect("copy key");
    }
    let verified = toolgate(&["audit", "verify", "--tenant", "default"], restored.path());
    let said = String::from_utf8_lossy(&verified.stdout).into_owned();
    assert!(
        verified.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&verified.stderr)
    );
    let rows: usize = said
        .strip_prefix("ok: ")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert!(rows > 0 && rows <= 200, "{said}");
    // And a gateway serves it: its audit holds those rows, the admin key still works.
    let served = start(restored.path(), None);
    let page = admin_json(&served, reqwest::Method::GET, "/v1/audit?limit=500").await;
    assert_eq!(
        page["entries"].as_array().map(Vec::len),
        Some(rows),
        "{page}"
    );
    let mut child = served.child;
    child.kill().expect("kill");
    child.wait().expect("wait");

    // A Postgres store is not copied by this command.
    let refused = Command::new(BIN)
        .args(["backup", "--to"])
        .arg(restored.path().join("pg.db"))
        .env("DATABASE_URL", "postgres://toolgate@127.0.0.1:1/none")
        .output()
        .expect("run");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("pg_dump"));
}
