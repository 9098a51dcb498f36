//! The gateway process under signals: graceful SIGTERM, SIGKILL under load losing no answered call, a sandboxed command dying with the gateway, the audit writer drained.

use super::*;

#[tokio::test]
async fn serves_then_shuts_down_gracefully_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Process(
        Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("the gateway exited before listening")
            .expect("read line");
        if let Some(rest) = line
            .split("addr=")
            .nth(1)
            .filter(|_| line.contains("listening"))
        {
            break rest.split_whitespace().next().expect("address").to_owned();
        }
    };
    let health = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .expect("request");
    assert_eq!(health.status(), 200);
    assert!(
        dir.path().join("workspace").is_dir(),
        "workspace defaults to <data-dir>/workspace"
    );

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(status.success(), "exit status {status:?}");
    // Drain the rest of the log so nothing blocks.
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}

/// Drives concurrent calls, SIGKILLs the gateway mid-load, restarts it on the same store,
/// and checks that every call whose response arrived has its audit row.
async fn sigkill_loses_no_answered_call(database_url: Option<String>) {
    stopped_under_load_loses_no_answered_call(database_url, "KILL").await;
}

/// The same with `signal` (`KILL`, or `TERM`, after which the gateway must also have
/// exited within its grace period, audit writer drained).
async fn stopped_under_load_loses_no_answered_call(database_url: Option<String>, signal: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(dir.path(), database_url.as_deref());
    let http = client(&running.key);
    let url = format!("http://{}/v1/tools/echo/invoke", running.addr);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..16 {
        let (http, url, stop) = (http.clone(), url.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut answered = Vec::new();
            for i in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let body = serde_json::json!({"arguments": {"message": format!("w{w}-{i}")}});
                let Ok(response) = http.post(&url).json(&body).send().await else {
                    break;
                };
                if response.status() != 200 {
                    continue;
                }
                let Ok(value) = response.json::<serde_json::Value>().await else {
                    break;
                };
                answered.push(value["call_id"].as_str().expect("call id").to_owned());
            }
            answered
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let mut child = running.child;
    let signalled = std::time::Instant::now();
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    if signal == "TERM" {
        assert!(status.success(), "{status:?}");
        // The default grace period is 10 s; the bound leaves room for a slow machine.
        assert!(
            signalled.elapsed() < std::time::Duration::from_secs(20),
            "stopped after {:?}",
            signalled.elapsed()
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answered = Vec::new();
    for worker in workers {
        answered.extend(worker.await.expect("join"));
    }
    assert!(
        answered.len() > 100,
        "the load reached the gateway: {} calls",
        answered.len()
    );

    let restarted = start(dir.path(), database_url.as_deref());
    let http = client(&restarted.key);
    let mut recorded = std::collections::HashSet::new();
    let mut cursor = String::new();
    loop {
        let page: serde_json::Value = http
            .get(format!(
                "http://{}/v1/audit?limit=1000{cursor}",
                restarted.addr
            ))
            .send()
            .await
            .expect("request")
            .json()
            .await
            .expect("json");
        for entry in page["entries"].as_array().expect("entries") {
            recorded.insert(entry["call_id"].as_str().expect("id").to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => break,
        }
    }
    let lost: Vec<&String> = answered
        .iter()
        .filter(|id| !recorded.contains(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} answered calls have no audit row",
        lost.len(),
        answered.len()
    );
    let mut child = restarted.child;
    let _ = child.kill();
    let _ = child.wait();

    let mut verify = Command::new(BIN);
    verify
        .args(["audit", "verify", "--tenant", "default", "--data-dir"])
        .arg(dir.path())
        .env_remove("DATABASE_URL");
    if let Some(url) = &database_url {
        verify.env("DATABASE_URL", url);
    }
    let out = verify.output().expect("verify");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_answered_call_on_sqlite() {
    sigkill_loses_no_answered_call(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_answered_call_on_postgres() {
    let db = pgdb::PgDb::create().await;
    sigkill_loses_no_answered_call(Some(db.url.clone())).await;
}

/// A gateway killed with SIGKILL mid-command takes the command with it: neither the
/// shell nor what it started in the background gets to its side effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_command_kills_the_command_before_its_side_effects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let running = start(dir.path(), None);
    let workspace = dir.path().join("workspace").join("default");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let http = client(&running.key);
    let url = format!("http://{}/v1/tools/execute_command/invoke", running.addr);
    let command = "(sleep 2; echo late > background.txt) & \
                   echo up > started.txt; sleep 2; echo late > foreground.txt; wait";
    let call = tokio::spawn(async move {
        http.post(url)
            .json(&json!({"arguments": {"command": command}}))
            .send()
            .await
    });
    for _ in 0..600 {
        if workspace.join("started.txt").exists() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(workspace.join("started.txt").exists(), "the command ran");
    let mut child = running.child;
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    assert!(
        call.await.expect("join").is_err(),
        "no answer from a dead gateway"
    );
    // Past the command's own sleep, with room to spare: nothing of it may still run.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    for file in ["foreground.txt", "background.txt"] {
        assert!(
            !workspace.join(file).exists(),
            "{file} was written after the gateway died"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_drains_the_audit_writer_within_the_grace_period() {
    stopped_under_load_loses_no_answered_call(None, "TERM").await;
}
