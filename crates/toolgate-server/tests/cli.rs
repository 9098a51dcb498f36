//! The real `toolgate` binary: flags, configuration errors, serving, graceful shutdown.

use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

#[test]
fn help_explains_every_serve_flag_and_its_variable() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--listen",
        "TOOLGATE_LISTEN",
        "--data-dir",
        "TOOLGATE_DATA_DIR",
        "--config",
        "TOOLGATE_CONFIG",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[test]
fn help_and_version_speak_of_the_command_not_the_crate() {
    let run = |arg: &str| {
        let out = Command::new(BIN).arg(arg).output().expect("run");
        assert!(out.status.success(), "{arg}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let help = run("--help");
    assert!(
        help.starts_with("One gateway for every tool call"),
        "{help}"
    );
    for crate_words in ["axum", "adapter", "crate"] {
        assert!(!help.contains(crate_words), "{crate_words:?} in:\n{help}");
    }
    assert_eq!(
        run("--version").trim(),
        format!("toolgate {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn a_bad_config_value_fails_at_start_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("toolgate.toml");
    std::fs::write(&file, "[http]\nmax_body_bytes = \"lots\"\n").expect("write");
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .env_remove("TOOLGATE_LISTEN")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("http.max_body_bytes"), "{stderr}");

    let out = Command::new(BIN)
        .args(["serve", "--listen", "not-an-address"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("listen"));
}

#[tokio::test]
async fn serves_then_shuts_down_gracefully_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
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

/// A gateway process: its address and the admin key it wrote.
struct Running {
    child: std::process::Child,
    addr: String,
    key: String,
    _log: std::thread::JoinHandle<()>,
}

fn start(data: &std::path::Path, database_url: Option<&str>) -> Running {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .env("RUST_LOG", "info")
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(url) = database_url {
        command.env("DATABASE_URL", url);
    }
    let mut child = command.spawn().expect("spawn");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
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
    // Keep draining the log so the child never blocks on a full pipe.
    let log = std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    let key = std::fs::read_to_string(data.join("admin-api-key"))
        .expect("admin key")
        .trim()
        .to_owned();
    Running {
        child,
        addr,
        key,
        _log: log,
    }
}

fn client(key: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).expect("ascii"),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client")
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

/// A database of its own on the Postgres at 127.0.0.1:5432 (or `TOOLGATE_TEST_PG`),
/// dropped when this is.
struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    async fn create(purpose: &str) -> PgDatabase {
        let admin = std::env::var("TOOLGATE_TEST_PG")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let name = format!("toolgate_{purpose}_{}", std::process::id());
        let db = PgDatabase {
            url: format!("{}/{name}", &admin[..admin.rfind('/').expect("db in URL")]),
            admin,
            name,
        };
        db.admin_sql(&format!("drop database if exists {} with (force)", db.name))
            .await;
        db.admin_sql(&format!("create database {}", db.name)).await;
        db
    }

    async fn admin_sql(&self, sql: &str) {
        use sqlx::Connection;
        let mut conn = sqlx::PgConnection::connect(&self.admin)
            .await
            .expect("connect to Postgres");
        sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&mut conn)
            .await
            .expect(sql);
    }
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .arg(&self.admin)
            .args([
                "-qc",
                &format!("drop database if exists {} with (force)", self.name),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_under_load_loses_no_answered_call_on_postgres() {
    let db = PgDatabase::create("kill").await;
    sigkill_loses_no_answered_call(Some(db.url.clone())).await;
}

/// POSTs one MCP message; returns the status and the JSON-RPC payload (from JSON or from
/// the SSE `data:` line that carries it).
async fn mcp(
    http: &reqwest::Client,
    addr: &str,
    session: Option<&str>,
    body: serde_json::Value,
) -> (u16, Option<String>, serde_json::Value) {
    let mut request = http
        .post(format!("http://{addr}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .json(&body);
    if let Some(id) = session {
        request = request.header("mcp-session-id", id);
    }
    let response = request.send().await.expect("request");
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await.expect("body");
    let payload = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .chain(std::iter::once(text.as_str()))
        .find_map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).ok())
        .unwrap_or(serde_json::Value::Null);
    (status, session, payload)
}

/// Two gateway processes on one Postgres serve one session-mode MCP client alternately,
/// and a stream broken on one is resumed on the other: the session, its owner and its SSE
/// events live in the store, not in either process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_postgres_share_an_mcp_session() {
    let db = PgDatabase::create("mcp2").await;
    let dir_a = tempfile::tempdir().expect("tempdir");
    let dir_b = tempfile::tempdir().expect("tempdir");
    let mut a = start(dir_a.path(), Some(&db.url));
    // The second instance finds the store bootstrapped; it uses the same admin key.
    std::fs::copy(
        dir_a.path().join("admin-api-key"),
        dir_b.path().join("admin-api-key"),
    )
    .expect("copy key");
    let mut b = start(dir_b.path(), Some(&db.url));
    let http = client(&a.key);

    let (status, session, init) = mcp(
        &http,
        &a.addr,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "roaming-client", "version": "7"}}}),
    )
    .await;
    assert_eq!(status, 200, "{init}");
    let session = session.expect("session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, _) = mcp(&http, &b.addr, Some(&session), initialized).await;
    assert_eq!(status, 202);
    let (status, _, list) = mcp(
        &http,
        &b.addr,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    )
    .await;
    assert_eq!(status, 200, "{list}");
    assert!(list.to_string().contains("\"echo\""), "{list}");
    for (i, addr) in [&a.addr, &b.addr, &a.addr, &b.addr].into_iter().enumerate() {
        let (status, _, result) = mcp(
            &http,
            addr,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 10 + i, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"message": format!("hop {i}")}}}),
        )
        .await;
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["result"]["isError"], false, "{result}");
        assert_eq!(result["result"]["content"][0]["text"], format!("hop {i}"));
    }

    // A call's SSE stream breaks on B after its first event; the client resumes it with
    // `Last-Event-ID` on A, which replays the result from the store.
    let mut broken = http
        .post(format!("http://{}/mcp", b.addr))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .header("mcp-session-id", &session)
        .json(&json!({"jsonrpc": "2.0", "id": 20, "method": "tools/call",
                      "params": {"name": "sleep", "arguments": {"seconds": 0.5}}}))
        .send()
        .await
        .expect("call");
    assert_eq!(broken.status(), 200);
    let mut seen = String::new();
    let last_event_id = loop {
        let chunk = broken
            .chunk()
            .await
            .expect("read")
            .expect("an event before the end");
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if let Some(id) = seen
            .lines()
            .find_map(|l| l.strip_prefix("id:"))
            .filter(|_| seen.contains("\n\n"))
        {
            break id.trim().to_owned();
        }
    };
    assert!(
        !seen.contains("\"id\":20"),
        "the result came before the break: {seen}"
    );
    drop(broken);
    let mut replayed = String::new();
    for _ in 0..50 {
        replayed = http
            .get(format!("http://{}/mcp", a.addr))
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &session)
            .header("last-event-id", &last_event_id)
            .send()
            .await
            .expect("resume")
            .text()
            .await
            .expect("replay");
        if replayed.contains("\"id\":20") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let result = replayed
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .find_map(|d| {
            serde_json::from_str::<serde_json::Value>(d.trim())
                .ok()
                .filter(|v| v["id"] == 20)
        })
        .unwrap_or_else(|| panic!("the result replayed on the other instance: {replayed}"));
    assert_eq!(result["result"]["isError"], false, "{result}");

    // Another tenant presenting the session id is refused on either instance.
    let created: serde_json::Value = http
        .post(format!("http://{}/v1/tenants", a.addr))
        .json(&json!({"name": "intruder"}))
        .send()
        .await
        .expect("create tenant")
        .json()
        .await
        .expect("json");
    let intruder = client(created["admin_key"]["secret"].as_str().expect("secret"));
    for addr in [&a.addr, &b.addr] {
        let (status, _, _) = mcp(
            &intruder,
            addr,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        )
        .await;
        assert_eq!(status, 404);
    }

    // Every hop left its row, with the client's name from the original initialize.
    let audit: serde_json::Value = http
        .get(format!("http://{}/v1/audit?adapter=mcp", b.addr))
        .send()
        .await
        .expect("audit")
        .json()
        .await
        .expect("json");
    let entries = audit["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 5, "{audit}");
    assert!(
        entries.iter().all(|e| e["client"] == "roaming-client/7"),
        "{audit}"
    );
    for running in [&mut a, &mut b] {
        running.child.kill().expect("kill");
        running.child.wait().expect("wait");
    }
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

fn toolgate(args: &[&str], data: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("DATABASE_URL")
        .output()
        .expect("run toolgate")
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_drains_the_audit_writer_within_the_grace_period() {
    stopped_under_load_loses_no_answered_call(None, "TERM").await;
}
