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

/// A principal of the gateway's default tenant with `scopes`, and a client with its key.
async fn principal(
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

#[tokio::test]
async fn a_rest_call_waits_for_someone_else_to_approve_then_runs_once() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 5})).await;
    let reviewer = principal(
        &base,
        &gw.http,
        "reviewer",
        &["approvals:decide", "audit:read"],
    )
    .await;

    // Low risk runs; high risk waits: 202, the approval id, a status URL.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "hi"}}))
        .await;
    assert_eq!(status, 200);
    let command = json!({"arguments": {"command": "echo ran >> log.txt; cat log.txt"}});
    let response = gw
        .http
        .post(gw.url("/v1/tools/execute_command/invoke"))
        .json(&command)
        .send()
        .await
        .expect("request");
    let location = response.headers()["location"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let (status, _, held) = read(response).await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "awaiting_approval");
    assert_eq!(location, held["status_url"]);
    let approval = held["approval_id"]
        .as_str()
        .expect("approval id")
        .to_owned();
    assert!(
        !gw.workspace().join("log.txt").exists(),
        "ran before approval"
    );

    // Listed for the reviewer, arguments shown; the requester cannot decide its own call.
    let (status, list) = get(&base, &reviewer, "/v1/approvals").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["approvals"][0]["id"], approval.as_str());
    assert_eq!(list["approvals"][0]["tool"], "execute_command");
    assert_eq!(list["approvals"][0]["risk"], "high");
    assert_eq!(list["approvals"][0]["adapter"], "rest");
    let (status, body) = decide(&base, &gw.http, &approval, "approve", "mine").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("someone else"),
        "{body}"
    );

    // Another tenant neither sees nor decides it.
    let other = client_with_key(&gw.create_tenant("other").await);
    let (status, _) = get(&base, &other, &format!("/v1/approvals/{approval}")).await;
    assert_eq!(status, 404);
    let (status, list) = get(&base, &other, "/v1/approvals").await;
    assert_eq!(
        (status, list["approvals"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    let (status, _) = decide(&base, &other, &approval, "approve", "sure").await;
    assert_eq!(status, 404);
    let (status, _) = get(&base, &other, &location).await;
    assert_eq!(status, 404);

    // Approved: the call runs once, its outcome at the status URL.
    let (status, decided) = decide(&base, &reviewer, &approval, "approve", "looks safe").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "approved");
    let (status, body) = decide(&base, &reviewer, &approval, "deny", "changed my mind").await;
    assert_eq!(status, 409, "decided once: {body}");
    let mut call = Value::Null;
    for _ in 0..100 {
        let (status, body) = get(&base, &gw.http, &location).await;
        assert_eq!(status, 200, "{body}");
        if body["status"] == "completed" {
            call = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(call["result"]["status"], 200, "{call}");
    let text = call["result"]["body"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with("ran\n"), "{text}");
    assert_eq!(
        std::fs::read_to_string(gw.workspace().join("log.txt")).expect("ran"),
        "ran\n"
    );

    // The audit log: the held call, the decision, the call that ran.
    let rows = audit_of(&base, &reviewer, &approval).await;
    assert_eq!(
        summary(&rows),
        [
            ("rest".into(), "approval_required".into()),
            ("approval".into(), "ok".into()),
            ("rest".into(), "ok".into()),
        ],
        "{rows:#?}"
    );
    assert_eq!(rows[0]["principal_id"], rows[2]["principal_id"]);
    assert_ne!(rows[0]["principal_id"], rows[1]["principal_id"]);
}

#[tokio::test]
async fn prefer_wait_answers_with_the_outcome_and_a_denial_is_a_403_with_the_reason() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let approve_next = |decision: &'static str, reason: &'static str| {
        let reviewer = reviewer.clone();
        let base = base.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                let (_, list) = get(&base, &reviewer, "/v1/approvals").await;
                if let Some(id) = list["approvals"][0]["id"].as_str() {
                    let (status, body) = decide(&base, &reviewer, id, decision, reason).await;
                    assert_eq!(status, 200, "{body}");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("no approval appeared");
        })
    };
    let waiting = |message: &'static str| {
        gw.http
            .post(gw.url("/v1/tools/echo/invoke"))
            .header("prefer", "wait=20")
            .json(&json!({"arguments": {"message": message}}))
            .send()
    };

    let decider = approve_next("approve", "ok");
    let (status, _, body) = read(waiting("first").await.expect("request")).await;
    decider.await.expect("decider");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["structured"]["message"], "first");

    let decider = approve_next("deny", "not this one");
    let (status, content_type, problem) = read(waiting("second").await.expect("request")).await;
    decider.await.expect("decider");
    assert_eq!(
        (status, content_type.as_str()),
        (403, "application/problem+json"),
        "{problem}"
    );
    assert_eq!(problem["type"], "urn:toolgate:error:denied");
    assert_eq!(problem["details"]["reason"], "not this one");
}

#[tokio::test]
async fn an_expired_approval_cannot_be_decided_and_counts_as_denied() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9, "approval_ttl_secs": 1})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let (status, _, held) = gw
        .invoke("echo", json!({"arguments": {"message": "late"}}))
        .await;
    assert_eq!(status, 202, "{held}");
    let approval = held["approval_id"].as_str().expect("id").to_owned();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, body) = decide(&base, &reviewer, &approval, "approve", "too late").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("expired"),
        "{body}"
    );
    let (status, view) = get(&base, &reviewer, &format!("/v1/approvals/{approval}")).await;
    assert_eq!(
        (status, view["status"].as_str()),
        (200, Some("expired")),
        "{view}"
    );
    let (_, call) = get(
        &base,
        &gw.http,
        &format!("/v1/calls/{}", held["call_id"].as_str().expect("id")),
    )
    .await;
    assert_eq!(call["status"], "expired", "{call}");
    let (status, list) = get(&base, &reviewer, "/v1/approvals?status=expired").await;
    assert_eq!(
        (status, list["approvals"].as_array().map(Vec::len)),
        (200, Some(1))
    );

    // Bad policies are refused, each problem named.
    let (status, _, problem) = read(
        gw.http
            .put(gw.url("/v1/policy"))
            .json(&json!({"level": 11, "approval_ttl_secs": 0, "rules": [{"action": "deny"}]}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 400, "{problem}");
    let pointers: Vec<&str> = problem["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["pointer"].as_str())
        .collect();
    assert_eq!(pointers, ["/level", "/approval_ttl_secs", "/rules/0"]);
}

#[tokio::test]
async fn an_mcp_call_gets_an_error_result_naming_the_approval_and_runs_when_retried() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(
        &base,
        &gw.http,
        json!({"level": 9, "rules": [{"tool": "list_files", "action": "deny"}]}),
    )
    .await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let client = crate::mcp::connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    let call = || {
        let Value::Object(args) = json!({"message": "via mcp"}) else {
            unreachable!()
        };
        CallToolRequestParams::new("echo").with_arguments(args)
    };
    let held = client.call_tool(call()).await.expect("tools/call");
    assert_eq!(held.is_error, Some(true), "{held:?}");
    let text = held.content[0].as_text().expect("text").text.clone();
    let error: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(error["error"]["kind"], "approval_required", "{text}");
    let approval = error["error"]["details"]["approval_id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(&approval)
    );
    // Retrying before a decision waits on the same approval.
    let again = client.call_tool(call()).await.expect("tools/call");
    assert!(
        again.content[0]
            .as_text()
            .expect("text")
            .text
            .contains(&approval)
    );

    let (status, body) = decide(&base, &reviewer, &approval, "approve", "fine").await;
    assert_eq!(status, 200, "{body}");
    let ran = client.call_tool(call()).await.expect("tools/call");
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    assert_eq!(ran.structured_content, Some(json!({"message": "via mcp"})));
    // Used once: the next identical call asks again.
    let next = client.call_tool(call()).await.expect("tools/call");
    assert_eq!(next.is_error, Some(true), "{next:?}");

    // A rule that denies outright needs no person.
    let Value::Object(args) = json!({}) else {
        unreachable!()
    };
    let denied = client
        .call_tool(CallToolRequestParams::new("list_files").with_arguments(args))
        .await
        .expect("tools/call");
    let text = denied.content[0].as_text().expect("text").text.clone();
    assert!(text.contains("\"denied\""), "{text}");
    client.cancel().await.expect("close");
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

#[tokio::test]
async fn an_agent_run_pauses_for_approval_and_resumes_on_another_gateway_process() {
    let db = PgDb::create().await;
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "call_1",
                "execute_command",
                r#"{"command":"echo deployed"}"#,
            )])),
            Reply::ok(says::openai_text("Deployed.")),
            Reply::ok(says::openai_calls(&[(
                "call_2",
                "execute_command",
                r#"{"command":"rm -rf build"}"#,
            )])),
            Reply::ok(says::openai_text("I was not allowed to clean the build.")),
        ],
    )
    .await;
    let dirs = tempfile::tempdir().expect("temp");
    let first = spawn_gateway(&dirs.path().join("a"), &db.url, &mock.base);
    let key = std::fs::read_to_string(dirs.path().join("a/admin-api-key"))
        .expect("admin key")
        .trim()
        .to_owned();
    let second = spawn_gateway(&dirs.path().join("b"), &db.url, &mock.base);
    let admin = client_with_key(&key);
    put_policy(&first.base, &admin, json!({"level": 5})).await;
    let reviewer = principal(
        &first.base,
        &admin,
        "reviewer",
        &["approvals:decide", "audit:read"],
    )
    .await;
    let (status, _, agent) = read(
        admin
            .post(format!("{}/v1/agents", first.base))
            .json(&json!({"name": "deployer", "provider": "llm", "model": "gpt-test", "tools": ["execute_command"]}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let agent = agent["id"].as_str().expect("id").to_owned();
    let start = |input: &'static str| {
        let admin = admin.clone();
        let url = format!("{}/v1/agents/{agent}/runs", first.base);
        async move {
            let (status, _, run) = read(
                admin
                    .post(url)
                    .json(&json!({"input": input, "wait_secs": 30}))
                    .send()
                    .await
                    .expect("request"),
            )
            .await;
            assert_eq!(status, 201, "{run}");
            run
        }
    };

    // The run pauses at execute_command (high risk at level 5), on the first process.
    let run = start("Deploy it.").await;
    assert_eq!(run["status"], "awaiting_approval", "{run:#}");
    let run_id = run["id"].as_str().expect("id").to_owned();
    let held = steps(&run, "approval_requested");
    assert_eq!(held.len(), 1, "{run:#}");
    assert_eq!(steps(&run, "run_paused").len(), 1);
    let approval = held[0]["approval_id"]
        .as_str()
        .expect("approval")
        .to_owned();

    // Approved on the second process: it takes the run over and finishes it.
    let (status, list) = get(&second.base, &reviewer, "/v1/approvals").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["approvals"][0]["adapter"], "agent");
    assert_eq!(list["approvals"][0]["run_id"], run_id.as_str());
    assert_eq!(list["approvals"][0]["agent"], "deployer");
    let (status, body) = decide(&second.base, &admin, &approval, "approve", "self").await;
    assert_eq!(status, 403, "the requester may not approve: {body}");
    let (status, body) = decide(&second.base, &reviewer, &approval, "approve", "ship it").await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for_status(&first.base, &admin, &run_id, "completed").await;
    assert_eq!(done["output"], "Deployed.");
    let finished = steps(&done, "tool_call_finished");
    let content = finished[0]["result"]["content"].as_str().expect("content");
    assert!(
        content.contains("deployed") && content.contains("[exit code 0]"),
        "{content}"
    );

    // Denied: the model is told why and goes on.
    let run = start("Clean the build.").await;
    assert_eq!(run["status"], "awaiting_approval", "{run:#}");
    let denied_run = run["id"].as_str().expect("id").to_owned();
    let denied_approval = steps(&run, "approval_requested")[0]["approval_id"]
        .as_str()
        .expect("approval")
        .to_owned();
    let (status, body) = decide(
        &second.base,
        &reviewer,
        &denied_approval,
        "deny",
        "not during the freeze",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for_status(&first.base, &admin, &denied_run, "completed").await;
    assert_eq!(done["output"], "I was not allowed to clean the build.");
    let result: Value = serde_json::from_str(
        steps(&done, "tool_call_finished")[0]["result"]["content"]
            .as_str()
            .expect("content"),
    )
    .expect("JSON result");
    assert_eq!(result["status"], "denied", "{result}");
    assert_eq!(result["reason"], "not during the freeze");
    let told = &mock.requests()[3].body;
    assert!(told.to_string().contains("not during the freeze"), "{told}");

    // Both decisions, and the calls they released or refused, are in the audit log.
    let rows = audit_of(&first.base, &reviewer, &approval).await;
    assert_eq!(
        summary(&rows),
        [
            ("agent".into(), "approval_required".into()),
            ("approval".into(), "ok".into()),
            ("agent".into(), "ok".into()),
        ],
        "{rows:#?}"
    );
    let rows = audit_of(&first.base, &reviewer, &denied_approval).await;
    assert_eq!(
        summary(&rows),
        [
            ("agent".into(), "approval_required".into()),
            ("approval".into(), "denied".into()),
            ("agent".into(), "denied".into()),
        ],
        "{rows:#?}"
    );
    assert_eq!(rows[1]["error"], "not during the freeze");
    drop(first);
    drop(second);
    db.drop_db().await;
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

#[tokio::test]
async fn an_mcp_client_that_can_elicit_lets_its_user_decide_when_the_tenant_allows_it() {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9, "self_approval": true})).await;
    let call = |message: &str| {
        let Value::Object(args) = json!({"message": message}) else {
            unreachable!()
        };
        CallToolRequestParams::new("echo").with_arguments(args)
    };
    for approve in [true, false] {
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
                .auth_header(gw.admin_key.clone()),
        );
        let client = User {
            approve,
            reason: "asked in the client".into(),
            asked: asked.clone(),
        }
        .serve(transport)
        .await
        .expect("connect");
        let result = client
            .call_tool(call(&format!("approve={approve}")))
            .await
            .expect("tools/call");
        let prompts = asked.lock().expect("lock").clone();
        assert_eq!(prompts.len(), 1, "{prompts:?}");
        assert!(prompts[0].contains("echo"), "{prompts:?}");
        if approve {
            assert_eq!(result.is_error, Some(false), "{result:?}");
            assert_eq!(
                result.structured_content,
                Some(json!({"message": "approve=true"}))
            );
        } else {
            assert_eq!(result.is_error, Some(true), "{result:?}");
            let text = result.content[0].as_text().expect("text").text.clone();
            assert!(
                text.contains("\"denied\"") && text.contains("asked in the client"),
                "{text}"
            );
        }
        client.cancel().await.expect("close");
    }
    // Without self-approval the client is not asked: the call stays held.
    put_policy(&base, &gw.http, json!({"level": 9})).await;
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
            .auth_header(gw.admin_key.clone()),
    );
    let client = User {
        approve: true,
        reason: "asked in the client".into(),
        asked: asked.clone(),
    }
    .serve(transport)
    .await
    .expect("connect");
    let held = client.call_tool(call("held")).await.expect("tools/call");
    assert_eq!(held.is_error, Some(true));
    assert!(
        held.content[0]
            .as_text()
            .expect("text")
            .text
            .contains("approval_required")
    );
    assert!(asked.lock().expect("lock").is_empty());
    client.cancel().await.expect("close");

    // A decision through the client follows the rules a REST one does: a reason longer
    // than 2,000 characters is refused there, and here too (it was taken): the call
    // stays held, its approval pending.
    put_policy(&base, &gw.http, json!({"level": 9, "self_approval": true})).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
            .auth_header(gw.admin_key.clone()),
    );
    let client = User {
        approve: true,
        reason: "x".repeat(2001),
        asked: asked.clone(),
    }
    .serve(transport)
    .await
    .expect("connect");
    let held = client
        .call_tool(call("long reason"))
        .await
        .expect("tools/call");
    assert_eq!(held.is_error, Some(true), "{held:?}");
    assert_eq!(asked.lock().expect("lock").len(), 1, "the user was asked");
    let (_, _, pending) = gw.get("/v1/approvals?status=pending").await;
    assert!(
        pending.to_string().contains("long reason"),
        "still pending: {pending}"
    );
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn a_paused_run_resumes_after_a_restart_and_decisions_stream_as_events() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "c1",
                "write_file",
                r#"{"path":"out.txt","content":"hi"}"#,
            )])),
            Reply::ok(says::openai_text("Written.")),
        ],
    )
    .await;
    let data = tempfile::tempdir().expect("data dir");
    let dir = data.path().to_path_buf();
    let llm = mock.base.clone();
    let configure = move |c: &mut toolgate_server::Config| {
        c.data_dir = dir.clone();
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &llm));
    };
    let first = Gateway::start_with(configure.clone()).await;
    put_policy(&first.base, &first.http, json!({"level": 5})).await;
    let reviewer = principal(&first.base, &first.http, "reviewer", &["approvals:decide"]).await;
    let (status, _, agent) = first
        .post(
            "/v1/agents",
            json!({"name": "writer", "provider": "llm", "model": "gpt-test", "tools": ["write_file"]}),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let (status, _, run) = first
        .post(
            &format!("/v1/agents/{}/runs", agent["id"].as_str().expect("id")),
            json!({"input": "write it", "wait_secs": 30}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "awaiting_approval", "{run:#}");
    let run_id = run["id"].as_str().expect("id").to_owned();
    let key = first.admin_key.clone();
    first.stop().await;

    // A new gateway on the same store; the decision reaches it, and it resumes the run.
    let second = Gateway::start_with(configure).await;
    let admin = client_with_key(&key);
    let events = reviewer
        .get(format!("{}/v1/approvals/events", second.base))
        .send()
        .await
        .expect("sse");
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let (_, list) = get(&second.base, &reviewer, "/v1/approvals").await;
    let approval = list["approvals"][0]["id"]
        .as_str()
        .expect("pending approval")
        .to_owned();
    let (status, body) = decide(&second.base, &reviewer, &approval, "approve", "fine").await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for_status(&second.base, &admin, &run_id, "completed").await;
    assert_eq!(done["output"], "Written.");
    assert_eq!(
        std::fs::read_to_string(data.path().join("workspace/default/out.txt")).expect("written"),
        "hi"
    );

    // The stream told of the decision.
    let mut stream = events.bytes_stream();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("event: approval_decided") && tokio::time::Instant::now() < deadline {
        use futures::StreamExt;
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    assert!(seen.contains("event: approval_decided"), "{seen}");
    assert!(seen.contains(&format!("id: {approval}:approved")), "{seen}");
    second.stop().await;
}

/// Two runs hold the same call: each gets its own approval. Approving one resumes that run
/// alone; cancelling the other expires its approval, which leaves the inbox.
#[tokio::test]
async fn two_runs_holding_the_same_call_are_approved_and_cancelled_apart() {
    let call = || {
        Reply::ok(says::openai_calls(&[(
            "c1",
            "write_file",
            r#"{"path":"out.txt","content":"hi"}"#,
        )]))
    };
    // Both runs ask first; the one approved then hears the tool's result and answers.
    let mock = MockLlm::start(
        Wire::Openai,
        vec![call(), call(), Reply::ok(says::openai_text("Written."))],
    )
    .await;
    let llm = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &llm));
    })
    .await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 5})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let (status, _, agent) = gw
        .post(
            "/v1/agents",
            json!({"name": "writer", "provider": "llm", "model": "gpt-test", "tools": ["write_file"]}),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (status, _, run) = gw
            .post(
                &format!("/v1/agents/{}/runs", agent["id"].as_str().expect("id")),
                json!({"input": "write it", "wait_secs": 30}),
            )
            .await;
        assert_eq!(
            (status, run["status"].as_str()),
            (201, Some("awaiting_approval")),
            "{run}"
        );
        runs.push(run["id"].as_str().expect("id").to_owned());
    }
    let (_, list) = get(&base, &reviewer, "/v1/approvals").await;
    let pending = list["approvals"].as_array().expect("approvals").clone();
    assert_eq!(pending.len(), 2, "one approval per run: {list:#}");
    let of_run = |run: &str| {
        pending
            .iter()
            .find(|a| a["run_id"] == run)
            .and_then(|a| a["id"].as_str())
            .unwrap_or_else(|| panic!("an approval for run {run}: {pending:#?}"))
            .to_owned()
    };
    let (first, second) = (of_run(&runs[0]), of_run(&runs[1]));
    let (status, body) = decide(&base, &reviewer, &first, "approve", "fine").await;
    assert_eq!(status, 200, "{body}");
    wait_for_status(&base, &gw.http, &runs[0], "completed").await;
    let (_, other) = get(&base, &gw.http, &format!("/v1/runs/{}", runs[1])).await;
    assert_eq!(other["status"], "awaiting_approval", "{other:#}");

    let (status, _, _) = gw
        .post(&format!("/v1/runs/{}/cancel", runs[1]), json!({}))
        .await;
    assert_eq!(status, 202);
    wait_for_status(&base, &gw.http, &runs[1], "cancelled").await;
    let (_, held) = get(&base, &reviewer, &format!("/v1/approvals/{second}")).await;
    assert_eq!(held["status"], "expired", "{held:#}");
    let (_, list) = get(&base, &reviewer, "/v1/approvals").await;
    assert_eq!(list["approvals"], json!([]), "{list:#}");
    gw.stop().await;
}
