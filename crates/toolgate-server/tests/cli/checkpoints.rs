//! Signed audit checkpoints revealing a truncated log.

use super::*;

/// Makes `calls` echo calls, one after another, each answered 200.
pub(super) async fn echo(running: &Running, calls: usize) {
    let http = client(&running.key);
    for i in 0..calls {
        let response = http
            .post(format!("http://{}/v1/tools/echo/invoke", running.addr))
            .json(&json!({"arguments": {"message": format!("m{i}")}}))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200);
    }
}

/// [`echo`], then stops the gateway with SIGTERM (it signs its chain heads as it stops)
/// and checks it exited cleanly.
pub(super) async fn echo_then_stop(running: Running, calls: usize) {
    echo(&running, calls).await;
    let mut child = running.child;
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(status.success(), "{status:?}");
}

/// The gateway signs its chain heads (the last ones as it stops); the checkpoints export
/// as JSON lines; after the newest rows are removed and the chain head rewritten to match,
/// `audit verify` still names the truncation — from the stored checkpoints, and from the
/// export once those are deleted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_checkpoints_reveal_a_truncated_audit_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    echo_then_stop(start(dir.path(), None), 5).await;

    let verify = |extra: &[&str]| {
        let mut args = vec!["audit", "verify", "--tenant", "default"];
        args.extend_from_slice(extra);
        toolgate(&args, dir.path())
    };
    let ok = verify(&[]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let key = toolgate(&["audit", "public-key"], dir.path());
    let public = String::from_utf8_lossy(&key.stdout);
    let public = public
        .split_whitespace()
        .next()
        .expect("public key")
        .to_owned();
    assert_eq!(public.len(), 64, "{public}");
    let export = toolgate(&["audit", "checkpoints", "--tenant", "default"], dir.path());
    let lines = String::from_utf8_lossy(&export.stdout).into_owned();
    let last: serde_json::Value =
        serde_json::from_str(lines.lines().last().expect("a checkpoint")).expect("json");
    assert_eq!(last["seq"], 5, "{lines}");
    let exported = dir.path().join("checkpoints.jsonl");
    std::fs::write(&exported, &lines).expect("write");

    // Someone with the file removes the newest two rows and rewrites the head to match.
    let db = format!("sqlite://{}", dir.path().join("toolgate.db").display());
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&db)
        .await
        .expect("open the database");
    for sql in [
        "drop trigger audit_log_no_delete",
        "drop trigger audit_checkpoint_no_delete",
        "delete from audit_log where seq > 3",
        "update audit_chain_head set seq = 3, row_hash = (select row_hash from audit_log l where l.tenant_id = audit_chain_head.tenant_id and l.seq = 3)",
    ] {
        sqlx::query(sql).execute(&mut conn).await.expect(sql);
    }
    let caught = verify(&[]);
    assert!(!caught.status.success());
    let said = String::from_utf8_lossy(&caught.stderr);
    assert!(said.contains("newest rows were removed"), "{said}");

    // The stored checkpoints deleted too: the export, with the public key alone.
    sqlx::query("delete from audit_checkpoint")
        .execute(&mut conn)
        .await
        .expect("delete checkpoints");
    assert!(
        verify(&[]).status.success(),
        "nothing left on the host to tell"
    );
    std::fs::remove_file(dir.path().join("audit-signing-key")).expect("key off the host");
    let caught = verify(&[
        "--checkpoints",
        exported.to_str().expect("utf-8"),
        "--public-key",
        &public,
    ]);
    assert!(!caught.status.success());
    assert!(
        String::from_utf8_lossy(&caught.stderr).contains("newest rows were removed"),
        "{}",
        String::from_utf8_lossy(&caught.stderr)
    );
}

/// Rotating the audit signing key: checkpoints signed with the key it replaced read as
/// forged unless that key's public half is accepted — `audit.previous_public_keys` for
/// `audit verify` and `POST /v1/audit/verify`, or `--public-key` given once per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_signed_before_a_key_rotation_still_verify() {
    let dir = tempfile::tempdir().expect("tempdir");
    let public_key = || {
        let out = toolgate(&["audit", "public-key"], dir.path());
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.split_whitespace()
            .next()
            .expect("public key")
            .to_owned()
    };
    echo_then_stop(start(dir.path(), None), 2).await;
    let old = public_key();
    // The key replaced (its file, as an operator would swap the Secret).
    std::fs::write(
        dir.path().join("audit-signing-key"),
        format!("{}\n", "ab".repeat(32)),
    )
    .expect("new key");
    echo_then_stop(start(dir.path(), None), 2).await;
    let new = public_key();
    assert_ne!(old, new);

    let verify = |extra: &[&str]| {
        let mut args = vec!["audit", "verify", "--tenant", "default"];
        args.extend_from_slice(extra);
        let out = toolgate(&args, dir.path());
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, said) = verify(&[]);
    assert!(!ok, "the old key's checkpoints are not the new key's");
    assert!(
        said.contains("not signed by this deployment's key"),
        "{said}"
    );
    let (ok, said) = verify(&["--public-key", &new]);
    assert!(!ok, "{said}");
    let (ok, said) = verify(&["--public-key", &new, "--public-key", &old]);
    assert!(ok, "{said}");
    let config = dir.path().join("rotated.toml");
    std::fs::write(
        &config,
        format!("[audit]\nprevious_public_keys = [\"{old}\"]\n"),
    )
    .expect("config");
    let (ok, said) = verify(&["--config", config.to_str().expect("utf-8")]);
    assert!(ok, "{said}");

    // The REST verification, with the previous key in the environment's configuration.
    let listed = format!("[\"{old}\"]");
    let running = start_with(
        dir.path(),
        None,
        &[("TOOLGATE_AUDIT__PREVIOUS_PUBLIC_KEYS", listed.as_str())],
    );
    let verified = admin_json(&running, reqwest::Method::POST, "/v1/audit/verify").await;
    assert_eq!(verified["verified"], true, "{verified}");
    assert_eq!(
        verified["previous_keys"].as_array().map(Vec::len),
        Some(1),
        "{verified}"
    );
    let mut child = running.child;
    child.kill().expect("kill");
    child.wait().expect("wait");
}
