//! Approvals end to end: a tenant's policy holds calls from REST, MCP and agent runs for
//! a person; decisions by someone else (never the requester) release or refuse them;
//! everything lands in the audit log. The agent test runs two `toolgate` processes on one
//! Postgres, deciding on the one that did not pause the run.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use serde_json::{Value, json};
use toolgate_e2e::llm::{MockLlm, Reply, Wire, says};
use toolgate_e2e::{Gateway, PgDb, client_with_key, read, toolgate_binary};

mod calls;
mod runs;

/// A principal of the gateway's default tenant with `scopes`, and a client with its key.
pub(crate) async fn principal(
    base: &str,
    admin: &reqwest::Client,
    name: &str,
    scopes: &[&str],
) -> reqwest::Client {
    let (status, _, who) = read(
        admin
            .post(format!("{base}/v1/principals"))
            .json(&json!({"name": name, "scopes": scopes}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 201, "{who}");
    let (status, _, key) = read(
        admin
            .post(format!("{base}/v1/keys"))
            .json(&json!({"name": name, "principal_id": who["id"]}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 201, "{key}");
    client_with_key(key["secret"].as_str().expect("secret"))
}

async fn put_policy(base: &str, admin: &reqwest::Client, policy: Value) {
    let (status, _, body) = read(
        admin
            .put(format!("{base}/v1/policy"))
            .json(&policy)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

async fn decide(
    base: &str,
    client: &reqwest::Client,
    approval: &str,
    decision: &str,
    reason: &str,
) -> (u16, Value) {
    let (status, _, body) = read(
        client
            .post(format!("{base}/v1/approvals/{approval}"))
            .json(&json!({"decision": decision, "reason": reason}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    (status, body)
}

async fn get(base: &str, client: &reqwest::Client, path: &str) -> (u16, Value) {
    let (status, _, body) = read(
        client
            .get(format!("{base}{path}"))
            .send()
            .await
            .expect("request"),
    )
    .await;
    (status, body)
}

/// Audit rows carrying `approval`, oldest first.
async fn audit_of(base: &str, client: &reqwest::Client, approval: &str) -> Vec<Value> {
    let (status, page) = get(base, client, "/v1/audit?limit=1000").await;
    assert_eq!(status, 200, "{page}");
    let mut rows: Vec<Value> = page["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["approval_id"] == approval)
        .cloned()
        .collect();
    rows.reverse();
    rows
}

fn summary(rows: &[Value]) -> Vec<(String, String)> {
    rows.iter()
        .map(|r| {
            (
                r["adapter"].as_str().unwrap_or("").to_owned(),
                r["outcome"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// A `toolgate serve` process on `database_url`, with provider `llm` at `llm_base`.
struct Process {
    child: Child,
    base: String,
    _log: std::thread::JoinHandle<()>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_gateway(data: &std::path::Path, database_url: &str, llm_base: &str) -> Process {
    let config = data.join("toolgate.toml");
    std::fs::create_dir_all(data).expect("data dir");
    std::fs::write(
        &config,
        format!(
            "[providers.llm]\nkind = \"openai\"\nbase_url = \"{llm_base}\"\napi_key = \"test-secret-key\"\ntimeout_secs = 5\n"
        ),
    )
    .expect("config");
    let mut child = Command::new(toolgate_binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .arg("--config")
        .arg(&config)
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolgate");
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
    let log = std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    Process {
        child,
        base: format!("http://{addr}"),
        _log: log,
    }
}

async fn wait_for_status(base: &str, client: &reqwest::Client, run: &str, want: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        let (status, body) = get(base, client, &format!("/v1/runs/{run}")).await;
        assert_eq!(status, 200, "{body}");
        if body["status"] == want {
            return body;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("run {run} never reached {want}: {last:#}");
}

fn steps<'a>(run: &'a Value, kind: &str) -> Vec<&'a Value> {
    run["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["type"] == kind)
        .collect()
}

/// An MCP client whose user answers every elicitation with `approve` and `reason`.
struct User {
    approve: bool,
    reason: String,
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for User {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let mut capabilities = rmcp::model::ClientCapabilities::default();
        let mut elicitation = rmcp::model::ElicitationCapability::default();
        elicitation.form = Some(rmcp::model::FormElicitationCapability::default());
        capabilities.elicitation = Some(elicitation);
        rmcp::model::ClientConfig::new(
            capabilities,
            rmcp::model::Implementation::new("e2e-elicitation", "1.0.0"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        if let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().expect("lock").push(message);
        }
        let mut result = rmcp::model::ElicitResult::new(rmcp::model::ElicitationAction::Accept);
        result.content = Some(json!({"approve": self.approve, "reason": self.reason}));
        Ok(result)
    }
}
