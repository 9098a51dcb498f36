//! `toolgate audit prune`: old rows go up to a signed checkpoint while the gateway runs,
//! and what is kept still verifies, from the command and over REST.

use super::checkpoints::{echo, echo_then_stop};
use super::*;

/// The `seq`s of the checkpoints `audit checkpoints` exports, in its order.
fn checkpoint_seqs(data: &std::path::Path) -> Vec<i64> {
    let export = toolgate(&["audit", "checkpoints", "--tenant", "default"], data);
    String::from_utf8_lossy(&export.stdout)
        .lines()
        .map(|line| {
            let cp: serde_json::Value = serde_json::from_str(line).expect("json");
            cp["seq"].as_i64().expect("seq")
        })
        .collect()
}

/// The `seq` of the newest checkpoint `audit checkpoints` exports.
fn last_checkpoint(data: &std::path::Path) -> i64 {
    *checkpoint_seqs(data).last().expect("a checkpoint")
}

fn said(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_audit_rows_are_pruned_to_a_signed_checkpoint_while_the_gateway_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path();
    echo_then_stop(start(data, None), 6).await;
    let first = last_checkpoint(data);
    assert_eq!(first, 6);

    // Checked with a key that did not sign the checkpoints: refused, nothing deleted.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let stranger =
        String::from_utf8_lossy(&toolgate(&["audit", "public-key"], elsewhere.path()).stdout)
            .split_whitespace()
            .next()
            .expect("a public key")
            .to_owned();
    let later = (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let refused = toolgate(
        &[
            "audit",
            "prune",
            "--before",
            &later,
            "--public-key",
            &stranger,
        ],
        data,
    );
    assert!(!refused.status.success(), "{}", said(&refused));
    assert!(
        said(&refused).contains("tenant \"default\": not pruned, its chain does not verify"),
        "{}",
        said(&refused)
    );
    let whole = toolgate(&["audit", "verify", "--tenant", "default"], data);
    assert!(said(&whole).contains("ok: 6 rows"), "{}", said(&whole));

    // Pruned while the gateway runs, signs every second and answers calls.
    let running = start_with(data, None, &[("TOOLGATE_AUDIT__CHECKPOINT_SECS", "1")]);
    // One failed authentication, recorded as a security event.
    let refused = client("not-a-key")
        .get(format!("http://{}/v1/tools", running.addr))
        .send()
        .await
        .expect("request");
    assert_eq!(refused.status(), 401);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let data_dir = data.to_owned();
    let prune = tokio::task::spawn_blocking(move || {
        toolgate(&["audit", "prune", "--older-than-days", "0"], &data_dir)
    });
    echo(&running, 20).await;
    let pruned = prune.await.expect("join");
    assert!(pruned.status.success(), "{}", said(&pruned));
    // "tenant "default": N rows and M checkpoints deleted; pruned up to checkpoint N; …"
    let out = said(&pruned);
    let through: i64 = out
        .split("pruned up to checkpoint ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert!(through >= first, "{out}");
    assert!(out.contains(&format!("{through} rows and ")), "{out}");
    // The checkpoints below the base signed rows that are gone, and went with them: the
    // export now starts at the base.
    assert_eq!(checkpoint_seqs(data).first(), Some(&through), "{out}");
    assert!(
        out.contains(
            "0 finished runs deleted (with their events); 0 settled approvals deleted; 1 failed-authentication records deleted"
        ),
        "{out}"
    );

    let verified = admin_json(&running, reqwest::Method::POST, "/v1/audit/verify").await;
    assert_eq!(verified["verified"], true, "{verified}");
    assert_eq!(verified["pruned_through"], through, "{verified}");
    let oldest = admin_json(&running, reqwest::Method::GET, "/v1/audit?limit=100").await;
    let seqs: Vec<i64> = oldest["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("{oldest}"))
        .iter()
        .filter_map(|r| r["seq"].as_i64())
        .collect();
    assert_eq!(seqs.iter().min(), Some(&(through + 1)), "{oldest}");
    echo_then_stop(running, 1).await;

    // 6 + 20 + 1 calls; the command verifies the rows kept, from the base.
    let head = last_checkpoint(data);
    assert_eq!(head, 27);
    let kept = toolgate(&["audit", "verify", "--tenant", "default"], data);
    assert!(kept.status.success(), "{}", said(&kept));
    assert!(
        said(&kept).contains(&format!(
            "ok: {} rows of tenant \"default\" verify (from row {}",
            head - through,
            through + 1
        )),
        "{}",
        said(&kept)
    );
}
