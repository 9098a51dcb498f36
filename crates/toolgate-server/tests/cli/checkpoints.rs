//! Signed audit checkpoints revealing a truncated log.

use super::*;

/// The gateway signs its chain heads (the last ones as it stops); the checkpoints export
/// as JSON lines; after the newest rows are removed and the chain head rewritten to match,
/// `audit verify` still names the truncation — from the stored checkpoints, and from the
/// export once those are deleted too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_checkpoints_reveal_a_truncated_audit_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(dir.path(), None);
    let http = client(&running.key);
    for i in 0..5 {
        let response = http
            .post(format!("http://{}/v1/tools/echo/invoke", running.addr))
            .json(&json!({"arguments": {"message": format!("m{i}")}}))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200);
    }
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
