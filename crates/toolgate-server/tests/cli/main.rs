//! The real `toolgate` binary: flags, configuration errors, serving, graceful shutdown.

use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[path = "../../../../tests/harness/pgdb.rs"]
mod pgdb;

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

mod backup;
mod checkpoints;
mod connections;
mod help;
mod instances;
mod retention;
mod signals;

/// A gateway process: its address and the admin key it wrote.
struct Running {
    child: Process,
    addr: String,
    key: String,
    _log: std::thread::JoinHandle<()>,
}

/// A child process, killed when dropped: a test that fails leaves no gateway behind.
struct Process(std::process::Child);

impl std::ops::Deref for Process {
    type Target = std::process::Child;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Process {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Both do nothing if it has exited and been waited for.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(data: &std::path::Path, database_url: Option<&str>) -> Running {
    start_with(data, database_url, &[])
}

/// [`start`] with more environment variables.
fn start_with(data: &std::path::Path, database_url: Option<&str>, env: &[(&str, &str)]) -> Running {
    start_as(Command::new(BIN), data, database_url, env)
}

/// [`start_with`], the gateway started by `command`: the binary itself, or a launcher
/// given it as its first argument (`prlimit … BIN`).
fn start_as(
    mut command: Command,
    data: &std::path::Path,
    database_url: Option<&str>,
    env: &[(&str, &str)],
) -> Running {
    command.envs(env.iter().copied());
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
        child: Process(child),
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

/// `method path` on `running` with its admin key; the JSON answer.
async fn admin_json(running: &Running, method: reqwest::Method, path: &str) -> serde_json::Value {
    client(&running.key)
        .request(method, format!("http://{}{path}", running.addr))
        .send()
        .await
        .expect("request")
        .json()
        .await
        .expect("json")
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

fn toolgate(args: &[&str], data: &std::path::Path) -> std::process::Output {
    Command::new(BIN)
        .args(args)
        .arg("--data-dir")
        .arg(data)
        .env_remove("DATABASE_URL")
        .output()
        .expect("run toolgate")
}
