//! Traces over OTLP to a real receiver (`tests/clients/otlp_receiver.py`, the official
//! `opentelemetry-proto` messages) on loopback: the `toolgate` binary, configured by the
//! standard `OTEL_*` variables, exports a REST call's server span and its `execute_tool`
//! child under the caller's `traceparent`, and an MCP call's server span (`tools/call echo`, MCP
//! semantic conventions) with the executor's span as its child, all in the caller's trace;
//! a federated call's client span to its upstream; an agent run's spans.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_e2e::{client_with_key, sdk_clients, toolgate_binary};

mod grpc;

struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `otlp_receiver.py` over `transport` (`http`, `grpc`), writing to `received`;
/// answers it and its port.
fn receiver(received: &std::path::Path, transport: &str) -> (Killed, String) {
    let dir = sdk_clients();
    let mut receiver = Command::new(dir.join(".venv-otel/bin/python"))
        .arg(dir.join("otlp_receiver.py"))
        .arg("0")
        .arg(received)
        .arg(transport)
        .stdout(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("start the OTLP receiver");
    let mut port = String::new();
    BufReader::new(receiver.stdout.take().expect("stdout"))
        .read_line(&mut port)
        .expect("the receiver's port");
    (Killed(receiver), port.trim().to_owned())
}

/// Starts the `toolgate` binary on a free port with `config`, its data in `data`, the
/// environment as `env` sets it; waits until it answers. Answers the process (killed
/// when dropped), its base URL and a client with the admin key.
async fn gateway(
    config: &std::path::Path,
    data: &std::path::Path,
    env: impl FnOnce(&mut Command) -> &mut Command,
) -> (Killed, String, reqwest::Client) {
    let listen = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    let mut command = Command::new(toolgate_binary());
    command
        .args(["serve", "--listen", &listen.to_string(), "--data-dir"])
        .arg(data)
        .arg("--config")
        .arg(config)
        .env_remove("DATABASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null());
    let gateway = Killed(env(&mut command).spawn().expect("start toolgate"));
    let key_file = data.join("admin-api-key");
    let base = format!("http://{listen}");
    let client = reqwest::Client::new();
    for _ in 0..300 {
        if key_file.exists() && client.get(format!("{base}/healthz")).send().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let key = std::fs::read_to_string(&key_file).expect("admin key");
    (gateway, base, client_with_key(key.trim()))
}

/// The audit log's `echo` rows, and the trace id of each.
async fn echo_traces(admin: &reqwest::Client, base: &str) -> (Value, Vec<String>) {
    let audit: Value = admin
        .get(format!("{base}/v1/audit?tool=echo"))
        .send()
        .await
        .expect("audit")
        .json()
        .await
        .expect("json");
    let traces = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter_map(|e| e["trace_id"].as_str().map(str::to_owned))
        .collect();
    (audit, traces)
}

/// A 2026-07-28 (stateless) MCP request `(method, name)` whose `_meta` carries
/// `traceparent` (SEP-414), and `header` as the HTTP `traceparent` too; its answer's body.
async fn mcp_traced(
    admin: &reqwest::Client,
    base: &str,
    id: u64,
    (method, name): (&str, &str),
    mut params: Value,
    traceparent: &str,
    header: Option<&str>,
) -> String {
    params["_meta"] = json!({"traceparent": traceparent,
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}});
    let mut request = admin
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", method)
        .header("mcp-name", name);
    if let Some(header) = header {
        request = request.header("traceparent", header);
    }
    let response = request
        .json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .send()
        .await
        .expect("mcp");
    assert_eq!(response.status(), 200, "{method}");
    response.text().await.expect("body")
}

fn spans(file: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|v| v["signal"] == "span")
        .collect()
}

#[tokio::test]
async fn rest_and_mcp_calls_export_their_spans_in_the_callers_trace() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let received = scratch.path().join("otlp.jsonl");
    let (_receiver, port) = receiver(&received, "http");
    // A model provider for an agent run: one tool call, then the answer.
    use toolgate_e2e::llm::{MockLlm, Reply, Wire, says};
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "call_1",
                "echo",
                r#"{"message":"from the agent"}"#,
            )])),
            Reply::ok(says::openai_text("done")),
        ],
    )
    .await;
    // An upstream MCP server over HTTP (the official Python SDK's).
    let (_fixture, fixture_port) = toolgate_e2e::python_server("fixture_server.py").await;
    let config = scratch.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.llm]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key = \"test-secret-key\"\ntimeout_secs = 5\n\n[[upstreams]]\nname = \"fx\"\nurl = \"http://127.0.0.1:{fixture_port}/mcp\"\n",
            mock.base
        ),
    )
    .expect("config");
    let data = scratch.path().join("data");
    let (mut gateway, base, admin) = gateway(&config, &data, |c| {
        c.env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{port}"),
        )
        .env("OTEL_SERVICE_NAME", "toolgate-e2e")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
    })
    .await;

    // REST, continuing the caller's trace.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let response = admin
        .post(format!("{base}/v1/tools/echo/invoke"))
        .header("traceparent", format!("00-{trace}-{caller_span}-01"))
        .json(&json!({"arguments": {"message": "traced"}}))
        .send()
        .await
        .expect("invoke");
    assert_eq!(response.status(), 200);
    let unknown = admin
        .post(format!("{base}/v1/tools/no_such_tool/invoke"))
        .json(&json!({"arguments": {}}))
        .send()
        .await
        .expect("invoke");
    assert_eq!(unknown.status(), 404);

    // A federated call: a client span to the upstream, under the call's span.
    let mut federated = None;
    for _ in 0..200 {
        let r = admin
            .post(format!("{base}/v1/tools/fx__add/invoke"))
            .json(&json!({"arguments": {"a": 2, "b": 3}}))
            .send()
            .await
            .expect("invoke");
        if r.status() == 200 {
            federated = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(federated.is_some(), "the upstream's tool answered");
    // The upstream's tool answers with an error result (`isError`).
    let failed_upstream = admin
        .post(format!("{base}/v1/tools/fx__fail/invoke"))
        .json(&json!({"arguments": {}}))
        .send()
        .await
        .expect("invoke");
    assert!(!failed_upstream.status().is_success());

    // MCP (2026-07-28, stateless), with the caller's trace in `_meta` (SEP-414), which
    // wins over another in the HTTP header.
    let mcp_trace = "0af7651916cd43dd8448eb211c80319c";
    mcp_traced(
        &admin,
        &base,
        42,
        ("tools/call", "echo"),
        json!({"name": "echo", "arguments": {"message": "over mcp"}}),
        &format!("00-{mcp_trace}-b7ad6b7169203331-01"),
        Some("00-1af7651916cd43dd8448eb211c80319d-c7ad6b7169203332-01"),
    )
    .await;

    // A JSON-RPC error is an HTTP 200: the server span says it failed all the same.
    let error_trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    mcp_traced(
        &admin,
        &base,
        44,
        ("tools/call", "no_such_tool"),
        json!({"name": "no_such_tool", "arguments": {}}),
        &format!("00-{error_trace}-00f067aa0ba902b7-01"),
        None,
    )
    .await;

    // A resource read relayed to the upstream, in a trace of its own: a client span for
    // the upstream request under the request's server span.
    let read_trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let read = mcp_traced(
        &admin,
        &base,
        43,
        ("resources/read", "fixture://note"),
        json!({"uri": "fixture://note"}),
        &format!("00-{read_trace}-00f067aa0ba902b7-01"),
        None,
    )
    .await;
    assert!(read.contains("a note from the fixture"), "{read}");
    // One the upstream answers with an error.
    let broken_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let broken = mcp_traced(
        &admin,
        &base,
        45,
        ("resources/read", "fixture://broken/x"),
        json!({"uri": "fixture://broken/x"}),
        &format!("00-{broken_trace}-00f067aa0ba902b7-01"),
        None,
    )
    .await;
    assert!(broken.contains(r#""error":{"code":"#), "{broken}");

    // An agent run: its span, a client span per model call, its tool call under it.
    let agent: Value = admin
        .post(format!("{base}/v1/agents"))
        .json(&json!({"name": "tracer", "provider": "llm", "model": "gpt-test", "tools": ["echo"]}))
        .send()
        .await
        .expect("agent")
        .json()
        .await
        .expect("json");
    let run: Value = admin
        .post(format!(
            "{base}/v1/agents/{}/runs",
            agent["id"].as_str().expect("agent id")
        ))
        .json(&json!({"input": "say it", "wait_secs": 30}))
        .send()
        .await
        .expect("run")
        .json()
        .await
        .expect("json");
    assert_eq!(run["status"], "completed", "{run}");
    let run_trace = run["id"].as_str().expect("run id").replace('-', "");

    // The audit row carries the trace id the spans are in.
    let (audit, traces) = echo_traces(&admin, &base).await;
    let traces: Vec<&str> = traces.iter().map(String::as_str).collect();
    assert!(
        traces.contains(&trace) && traces.contains(&mcp_trace),
        "{audit}"
    );

    // Spans are batched (100 ms here); wait for them.
    let mut got = Vec::new();
    for _ in 0..100 {
        got = spans(&received);
        if got
            .iter()
            .filter(|s| s["name"] == "execute_tool echo")
            .count()
            >= 2
            && got.iter().any(|s| s["name"] == "tools/call echo")
            && got.iter().any(|s| s["name"] == "execute_tool no_such_tool")
            && got.iter().any(|s| s["name"] == "invoke_agent tracer")
            && got.iter().any(|s| s["name"] == "tools/call add")
            && got
                .iter()
                .any(|s| s["name"] == "resources/read" && s["kind"] == 3)
            && got
                .iter()
                .any(|s| s["trace_id"] == error_trace && s["kind"] == 2)
            && got.iter().any(|s| s["name"] == "tools/call fail")
            && got
                .iter()
                .any(|s| s["trace_id"] == broken_trace && s["kind"] == 3)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let find = |name: &str, trace: &str| -> Value {
        got.iter()
            .find(|s| s["name"] == name && s["trace_id"] == trace)
            .cloned()
            .unwrap_or_else(|| panic!("no span {name} in trace {trace}: {got:#?}"))
    };
    let http = find("POST /v1/tools/{name}/invoke", trace);
    assert_eq!(http["kind"], 2, "server");
    assert_eq!(http["parent_span_id"], caller_span, "{http}");
    assert_eq!(http["attributes"]["http.request.method"], "POST");
    assert_eq!(http["attributes"]["http.route"], "/v1/tools/{name}/invoke");
    assert_eq!(http["attributes"]["http.response.status_code"], 200);
    let rest = find("execute_tool echo", trace);
    assert_eq!(rest["parent_span_id"], http["span_id"], "{rest}");
    assert_eq!(rest["service"], "toolgate-e2e");
    assert_eq!(rest["attributes"]["gen_ai.operation.name"], "execute_tool");
    assert_eq!(rest["attributes"]["gen_ai.tool.name"], "echo");
    assert!(
        rest["attributes"]["gen_ai.tool.call.id"].is_string(),
        "{rest}"
    );
    assert_eq!(rest["kind"], 1, "internal");

    let server = find("tools/call echo", mcp_trace);
    assert_eq!(server["kind"], 2, "server");
    assert_eq!(server["parent_span_id"], "b7ad6b7169203331");
    let attributes = &server["attributes"];
    assert_eq!(attributes["mcp.method.name"], "tools/call");
    assert_eq!(attributes["mcp.protocol.version"], "2026-07-28");
    assert_eq!(attributes["jsonrpc.request.id"], "42");
    assert_eq!(attributes["gen_ai.tool.name"], "echo");
    assert_eq!(attributes["gen_ai.operation.name"], "execute_tool");
    assert_eq!(attributes["network.transport"], "tcp");
    assert_eq!(attributes["network.protocol.name"], "http");
    assert_eq!(attributes["network.protocol.version"], "1.1");
    assert_eq!(attributes["client.address"], "127.0.0.1");
    assert!(attributes["client.port"].is_number(), "{server}");
    assert!(
        attributes.get("mcp.session.id").is_none(),
        "no session: {server}"
    );
    let refused = find("tools/call", error_trace);
    assert_eq!(refused["attributes"]["error.type"], "-32602", "{refused}");
    assert_eq!(
        refused["attributes"]["rpc.response.status_code"], "-32602",
        "{refused}"
    );
    assert_eq!(refused["status"], 2, "status ERROR: {refused}");
    let executed = find("execute_tool echo", mcp_trace);
    assert_eq!(executed["parent_span_id"], server["span_id"], "{executed}");

    let invoke = find("invoke_agent tracer", &run_trace);
    assert_eq!(
        invoke["attributes"]["gen_ai.operation.name"],
        "invoke_agent"
    );
    assert_eq!(invoke["attributes"]["gen_ai.agent.name"], "tracer");
    let chats: Vec<&Value> = got
        .iter()
        .filter(|s| s["name"] == "chat gpt-test" && s["trace_id"] == run_trace.as_str())
        .collect();
    assert_eq!(chats.len(), 2, "{got:#?}");
    for chat in chats {
        assert_eq!(chat["kind"], 3, "client");
        assert_eq!(chat["parent_span_id"], invoke["span_id"]);
        assert_eq!(chat["attributes"]["gen_ai.provider.name"], "openai");
        assert_eq!(chat["attributes"]["gen_ai.request.model"], "gpt-test");
        assert!(
            chat["attributes"]["gen_ai.usage.input_tokens"].is_number(),
            "{chat}"
        );
    }
    let agent_call = find("execute_tool echo", &run_trace);
    assert_eq!(
        agent_call["parent_span_id"], invoke["span_id"],
        "{agent_call}"
    );

    // A resource's URI is an attribute, never in a span's name (the conventions keep
    // names low in cardinality).
    let relayed = got
        .iter()
        .find(|s| s["name"] == "resources/read" && s["kind"] == 3)
        .expect("the relayed read's client span");
    assert_eq!(relayed["trace_id"], read_trace, "{relayed}");
    assert_eq!(relayed["attributes"]["mcp.method.name"], "resources/read");
    assert_eq!(relayed["attributes"]["mcp.resource.uri"], "fixture://note");
    let read_server = got
        .iter()
        .find(|s| s["trace_id"] == read_trace && s["kind"] == 2)
        .expect("the read's server span");
    assert_eq!(
        relayed["parent_span_id"], read_server["span_id"],
        "{relayed} under {read_server}"
    );
    assert_eq!(read_server["name"], "resources/read", "{read_server}");
    let read_attributes = &read_server["attributes"];
    assert_eq!(read_attributes["mcp.method.name"], "resources/read");
    assert_eq!(read_attributes["mcp.resource.uri"], "fixture://note");
    assert!(
        read_attributes.get("gen_ai.operation.name").is_none(),
        "not a tool call: {read_server}"
    );

    // An upstream's error answer: its JSON-RPC code is the client span's `error.type`.
    let broken = got
        .iter()
        .find(|s| s["trace_id"] == broken_trace && s["kind"] == 3)
        .expect("the broken read's client span");
    let code = broken["attributes"]["rpc.response.status_code"]
        .as_str()
        .unwrap_or_else(|| panic!("a JSON-RPC code: {broken}"));
    assert!(code.parse::<i32>().is_ok(), "{broken}");
    assert_eq!(broken["attributes"]["error.type"], code, "{broken}");
    assert_eq!(broken["status"], 2, "status ERROR: {broken}");

    let upstream = got
        .iter()
        .find(|s| s["name"] == "tools/call add")
        .expect("the upstream call's client span");
    assert_eq!(upstream["kind"], 3, "client");
    assert_eq!(upstream["attributes"]["mcp.method.name"], "tools/call");
    let federated = got
        .iter()
        .find(|s| s["name"] == "execute_tool fx__add" && s["trace_id"] == upstream["trace_id"])
        .expect("the federated call's span");
    assert_eq!(
        upstream["parent_span_id"], federated["span_id"],
        "{upstream}"
    );

    // The conventions' `error.type` for a tool's error result.
    let tool_error = got
        .iter()
        .find(|s| s["name"] == "tools/call fail")
        .expect("the failing upstream call's client span");
    assert_eq!(tool_error["kind"], 3, "client");
    assert_eq!(
        tool_error["attributes"]["error.type"], "tool_error",
        "{tool_error}"
    );
    assert_eq!(tool_error["status"], 2, "status ERROR");

    let failed = got
        .iter()
        .find(|s| s["name"] == "execute_tool no_such_tool")
        .expect("the failed call's span");
    assert_eq!(failed["attributes"]["error.type"], "not_found", "{failed}");
    assert_eq!(failed["status"], 2, "status ERROR");

    // The same instruments as /metrics go out over OTLP too.
    let wanted = [
        "toolgate.tool.calls",
        "toolgate.tool.call.duration",
        "mcp.server.operation.duration",
    ];
    let mut metrics = Vec::new();
    for _ in 0..50 {
        metrics = std::fs::read_to_string(&received)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["signal"] == "metric")
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect::<Vec<_>>();
        // Exports are periodic: wait for one after every kind of call was made.
        if wanted.iter().all(|w| metrics.iter().any(|m| m == w)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for name in wanted {
        assert!(metrics.iter().any(|m| m == name), "{name} in {metrics:?}");
    }

    // Stopping flushes what is left; nothing is lost in the stop.
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(gateway.0.id().to_string())
        .status();
    let _ = gateway.0.wait();
}
