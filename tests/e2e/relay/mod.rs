//! An upstream tool's log messages, sampling and elicitation requests, relayed to the MCP
//! client whose call caused them, and to no one else: the conformance fixture
//! (`tests/clients/conformance_fixture.py`, the official Python SDK) federated over
//! Streamable HTTP, where each request arrives on its call's own response stream, and
//! over stdio, where nothing ties a message to a call.
// Sampling and logging are deprecated by SEP-2577 (2026-07-28); 2025-11-25 clients use them.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolResult, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData,
    Implementation, LoggingMessageNotificationParam, SamplingMessage,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ServiceExt};
use serde_json::{Value, json};
use toolgate_e2e::{Gateway, sdk_clients};

use crate::mcp::{
    call, messages, open_session, post_mcp, post_stateless, sessions_in_memory_come_to,
};
use crate::upstream::listed_once;

mod bounds;

/// An MCP client that answers sampling as `name`, accepts elicitations with its name,
/// and keeps the log messages it hears.
struct Answering {
    name: &'static str,
    /// How long it takes to answer, so that calls overlap.
    delay: Duration,
    logs: Arc<Mutex<Vec<Value>>>,
}

impl ClientHandler for Answering {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .build(),
            Implementation::new(self.name, "1.0.0"),
        )
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        tokio::time::sleep(self.delay).await;
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("sampled by {}", self.name)),
            "test-model".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        _params: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({"username": self.name, "email": "x@example.com"})))
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(params.data);
    }
}

async fn client(
    gw: &Gateway,
    name: &'static str,
    delay: Duration,
) -> (
    RunningService<RoleClient, Answering>,
    Arc<Mutex<Vec<Value>>>,
) {
    let logs = Arc::new(Mutex::new(Vec::new()));
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp")).auth_header(&gw.admin_key),
    );
    let service = Answering {
        name,
        delay,
        logs: logs.clone(),
    }
    .serve(transport)
    .await
    .expect("connect");
    (service, logs)
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fixture over stdio as upstream `fx`, relaying messages to the one call in flight.
pub(crate) fn stdio_fixture() -> Value {
    let dir = sdk_clients();
    json!({
        "name": "fx",
        "command": dir.join(".venv/bin/python"),
        "args": [dir.join("conformance_fixture.py")],
        "relay_unattributed": true,
    })
}

async fn gateway_with_fixture(upstream: Value) -> Gateway {
    gateway_with_fixture_and(upstream, |_| {}).await
}

/// [`gateway_with_fixture`], with the rest of the configuration as `configure` sets it.
pub(crate) async fn gateway_with_fixture_and(
    upstream: Value,
    configure: impl FnOnce(&mut toolgate_server::config::Config),
) -> Gateway {
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![serde_json::from_value(upstream).expect("an upstream entry")];
        configure(c);
    })
    .await;
    listed_once(&gw, "fx__test_sampling").await;
    gw
}

/// Over Streamable HTTP each sampling or elicitation request arrives on the response
/// stream of the call that made it: two clients calling at once each get their own
/// answer. Log messages carry no such tie, so with `relay_unattributed` off (the
/// default for the operator's upstreams) they reach no one.
#[tokio::test]
async fn over_http_each_request_reaches_the_client_whose_call_made_it() {
    let (_server, port) = toolgate_e2e::python_server("conformance_fixture.py").await;
    let gw = gateway_with_fixture(json!({
        "name": "fx",
        "url": format!("http://127.0.0.1:{port}/mcp"),
    }))
    .await;
    let (alice, alice_logs) = client(&gw, "alice", Duration::from_millis(300)).await;
    let (bob, bob_logs) = client(&gw, "bob", Duration::from_millis(300)).await;
    let ask = |name| {
        call(
            "fx__test_sampling",
            json!({"prompt": format!("hello from {name}")}),
        )
    };
    let (a, b) = tokio::join!(alice.call_tool(ask("alice")), bob.call_tool(ask("bob")));
    let (a, b) = (a.expect("alice's call"), b.expect("bob's call"));
    assert_eq!(text(&a), "LLM response: sampled by alice", "{a:?}");
    assert_eq!(text(&b), "LLM response: sampled by bob", "{b:?}");

    let asked = alice
        .call_tool(call(
            "fx__test_elicitation",
            json!({"message": "who are you?"}),
        ))
        .await
        .expect("elicitation call");
    assert_eq!(asked.is_error, Some(false), "{asked:?}");
    assert!(text(&asked).contains("'username': 'alice'"), "{asked:?}");

    let logged = alice
        .call_tool(call("fx__test_tool_with_logging", json!({})))
        .await
        .expect("logging call");
    assert_eq!(logged.is_error, Some(false), "{logged:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(alice_logs.lock().expect("logs").is_empty());
    assert!(bob_logs.lock().expect("logs").is_empty());

    // A caller that is not an MCP client cannot be asked: the tool hears why.
    let (status, _, problem) = gw
        .invoke(
            "fx__test_sampling",
            json!({"arguments": {"prompt": "from curl"}}),
        )
        .await;
    assert_eq!(status, 502, "{problem}");
    assert!(
        problem.to_string().contains("did not call over MCP"),
        "{problem}"
    );
    alice.cancel().await.expect("close");
    bob.cancel().await.expect("close");
    gw.stop().await;
}

/// Over stdio nothing ties a message to a call. With `relay_unattributed` on, a log
/// message or request goes to the one call in flight; while two calls are in flight it
/// goes to neither (refused), never to the wrong one.
#[tokio::test]
async fn over_stdio_only_the_one_call_in_flight_hears_its_upstream() {
    let gw = gateway_with_fixture(stdio_fixture()).await;
    let (alice, alice_logs) = client(&gw, "alice", Duration::from_millis(500)).await;
    let (bob, bob_logs) = client(&gw, "bob", Duration::from_millis(500)).await;

    let logged = alice
        .call_tool(call("fx__test_tool_with_logging", json!({})))
        .await
        .expect("logging call");
    assert_eq!(logged.is_error, Some(false), "{logged:?}");
    let mut heard = Vec::new();
    for _ in 0..40 {
        heard = alice_logs.lock().expect("logs").clone();
        if heard.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        heard,
        vec![
            json!("Tool execution started"),
            json!("Tool processing data"),
            json!("Tool execution completed")
        ]
    );
    assert!(bob_logs.lock().expect("logs").is_empty());

    // Alone, a call's sampling request reaches its client.
    let ask = |name| {
        call(
            "fx__test_sampling",
            json!({"prompt": format!("hello from {name}")}),
        )
    };
    let alone = alice.call_tool(ask("alice")).await.expect("alice's call");
    assert_eq!(text(&alone), "LLM response: sampled by alice", "{alone:?}");

    // Side by side (each client takes 500 ms to answer, so the calls overlap), a request
    // goes to its own caller or to no one.
    let (a, b) = tokio::join!(alice.call_tool(ask("alice")), bob.call_tool(ask("bob")));
    let (a, b) = (a.expect("alice's call"), b.expect("bob's call"));
    let mut refused = 0;
    for (result, own) in [(&a, "alice"), (&b, "bob")] {
        let said = text(result);
        if result.is_error == Some(true) {
            assert!(said.contains("calls are in flight"), "{said}");
            refused += 1;
        } else {
            assert_eq!(said, format!("LLM response: sampled by {own}"));
        }
    }
    assert!(
        refused > 0,
        "two calls in flight, yet both requests were relayed: {a:?} {b:?}"
    );
    alice.cancel().await.expect("close");
    bob.cancel().await.expect("close");
    gw.stop().await;
}

/// A relayed request rides the response stream of the `tools/call` it serves (SEP-2260),
/// whatever id the upstream gave its own request, over stdio and over HTTP: a raw client
/// with no standalone GET stream open hears the elicitation on its call's stream, answers
/// it, and gets the result there. rmcp tagged the request with the *upstream's* request
/// id (a task-local of the upstream handler's task, which overwrote the gateway's tag), so
/// it fell back to the standalone stream: lost to a client without one, and a flake of the
/// conformance suite whenever that stream opened late.
#[tokio::test]
async fn a_relayed_request_rides_its_calls_own_response_stream() {
    let (_server, port) = toolgate_e2e::python_server("conformance_fixture.py").await;
    let over_http = json!({"name": "fx", "url": format!("http://127.0.0.1:{port}/mcp")});
    for upstream in [stdio_fixture(), over_http] {
        let gw = gateway_with_fixture(upstream).await;
        let session = raw_session_that_elicits(&gw).await;
        // The upstream's own request ids are small; the call's is not.
        let mut stream = post_mcp(
            &gw,
            &gw.http,
            Some(&session),
            json!({"jsonrpc": "2.0", "id": 4141, "method": "tools/call", "params": {
                "name": "fx__test_elicitation", "arguments": {"message": "who are you?"}}}),
        )
        .await;
        assert_eq!(stream.status(), 200);
        let mut seen = String::new();
        let asked = next_message(&mut stream, &mut seen, |m| {
            m["method"] == "elicitation/create"
        })
        .await;
        let answer = json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
            "action": "accept", "content": {"username": "raw", "email": "r@example.com"}}});
        let taken = post_mcp(&gw, &gw.http, Some(&session), answer).await;
        assert_eq!(taken.status(), 202);
        let result = next_message(&mut stream, &mut seen, |m| m["id"] == 4141).await;
        assert_eq!(result["result"]["isError"], false, "{result}");
        assert!(
            result["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("'username': 'raw'")),
            "{result}"
        );
        gw.stop().await;
    }
}

/// A raw 2025-11-25 session whose client declares elicitation, initialized; no GET stream.
async fn raw_session_that_elicits(gw: &Gateway) -> String {
    let mut initialize = crate::mcp::initialize_body();
    initialize["params"]["capabilities"] = json!({"elicitation": {}});
    crate::mcp::open_session_with(gw, initialize).await
}

/// The next JSON-RPC message on an SSE response that `wanted` picks, within 10 s; `seen`
/// keeps what was read past it.
async fn next_message(
    stream: &mut reqwest::Response,
    seen: &mut String,
    wanted: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        while let Some(end) = seen.find("\n\n") {
            let event: String = seen.drain(..end + 2).collect();
            let data = event.lines().find_map(|l| l.strip_prefix("data:"));
            if let Some(message) = data.and_then(|d| serde_json::from_str::<Value>(d.trim()).ok())
                && wanted(&message)
            {
                return message;
            }
        }
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .unwrap_or_else(|_| {
                panic!("nothing wanted on the call's stream in 10 s; read: {seen:?}")
            })
            .expect("the stream")
            .unwrap_or_else(|| panic!("the call's stream ended; read: {seen:?}"));
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// A 2026-07-28 request hears log messages only at the level in its own `_meta`, and none
/// without one (SEP-2575: the server MUST NOT send them); `logging/setLevel` is a session's.
#[tokio::test]
async fn a_stateless_call_hears_log_messages_only_at_the_level_it_asked_for() {
    let gw = gateway_with_fixture(stdio_fixture()).await;
    // The fixture logs three messages at `info`.
    for (id, level, heard) in [(1, None, 0), (2, Some("warning"), 0), (3, Some("info"), 3)] {
        let mut params = json!({"name": "fx__test_tool_with_logging", "arguments": {}});
        if let Some(level) = level {
            params["_meta"] = json!({"io.modelcontextprotocol/logLevel": level});
        }
        let messages = post_stateless(&gw, "stateless", id, "tools/call", params).await;
        let (response, before) = messages.split_last().expect("response");
        assert_eq!(response["result"]["isError"], false, "{response}");
        let logs: Vec<&Value> = before
            .iter()
            .filter(|m| m["method"] == "notifications/message")
            .collect();
        assert_eq!(logs.len(), heard, "level {level:?}: {messages:#?}");
    }
    gw.stop().await;
}

/// A session's `logging/setLevel` choice is kept with it in the store: the session leaves
/// memory once dormant (a level used to keep it there, ~110 KiB each) and, restored by its
/// next request, still hears only what it chose.
#[tokio::test]
async fn a_sessions_log_level_outlives_its_time_out_of_memory() {
    let gw = gateway_with_fixture_and(stdio_fixture(), |c| c.mcp.session_dormant_secs = 1).await;
    // The fixture logs three messages at `info`.
    let mut sessions = Vec::new();
    for (level, heard) in [("warning", 0), ("info", 3)] {
        let session = open_session(&gw).await;
        let set = json!({"jsonrpc": "2.0", "id": 2, "method": "logging/setLevel",
                         "params": {"level": level}});
        let answer = messages(post_mcp(&gw, &gw.http, Some(&session), set).await).await;
        assert_eq!(answer, [json!({"jsonrpc": "2.0", "id": 2, "result": {}})]);
        sessions.push((session, level, heard));
    }

    assert!(
        sessions_in_memory_come_to(&gw, 0.0).await,
        "sessions with a log level went dormant too"
    );

    // A session's log messages go out on its standalone stream.
    for (session, level, heard) in sessions {
        let mut stream = gw
            .http
            .get(gw.url("/mcp"))
            .header("accept", "text/event-stream")
            .header("mcp-protocol-version", "2025-11-25")
            .header("mcp-session-id", &session)
            .send()
            .await
            .expect("the session's stream");
        assert_eq!(stream.status(), 200, "restored at {level}");
        let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                          "params": {"name": "fx__test_tool_with_logging", "arguments": {}}});
        let answer = messages(post_mcp(&gw, &gw.http, Some(&session), call).await).await;
        assert_eq!(
            answer.last().expect("an answer")["result"]["isError"],
            false
        );
        // What the call said went out before its result.
        let mut seen = String::new();
        let mut logs = 0;
        while tokio::time::timeout(Duration::from_millis(500), async {
            next_message(&mut stream, &mut seen, |m| {
                m["method"] == "notifications/message"
            })
            .await
        })
        .await
        .is_ok()
        {
            logs += 1;
        }
        assert_eq!(logs, heard, "restored at {level}");
    }
    assert_eq!(
        gw.metric("toolgate_mcp_sessions{").await,
        2.0,
        "both restored"
    );
    gw.stop().await;
}

/// An upstream that writes a call's progress report, log message and result in one write
/// (`tests/clients/one_write_server.py`): the gateway reads all three at once, and still
/// relays the first two before the result ends the call. Before, rmcp's task per
/// notification raced the result, and lost whenever the call had ended first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_upstream_says_before_its_result_arrives_before_it() {
    let dir = sdk_clients();
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![
            serde_json::from_value(json!({
                "name": "ow",
                "command": dir.join(".venv/bin/python"),
                "args": [dir.join("one_write_server.py")],
                "relay_unattributed": true,
            }))
            .expect("an upstream entry"),
        ];
    })
    .await;
    listed_once(&gw, "ow__say_then_answer").await;

    // A session hears each call's log message (on its standalone stream).
    let (alice, logs) = client(&gw, "alice", Duration::ZERO).await;
    const CALLS: usize = 30;
    for n in 0..CALLS {
        let done = alice
            .call_tool(call("ow__say_then_answer", json!({"n": n})))
            .await
            .expect("call");
        assert_eq!(text(&done), format!("answer {n}"), "{done:?}");
    }
    let expected: Vec<Value> = (0..CALLS)
        .map(|n| json!(format!("said before answer {n}")))
        .collect();
    let mut heard = Vec::new();
    for _ in 0..40 {
        heard = logs.lock().expect("logs").clone();
        if heard.len() >= CALLS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(heard, expected);
    alice.cancel().await.expect("close");

    // A stateless call hears progress and the log message on its own stream, before the
    // result that ends it (each kind in order; the two kinds are not ordered between
    // them).
    for n in 0..10 {
        let messages = post_stateless(
            &gw,
            "stateless",
            n,
            "tools/call",
            json!({"name": "ow__say_then_answer", "arguments": {"n": n},
                   "_meta": {"progressToken": format!("p-{n}"),
                             "io.modelcontextprotocol/logLevel": "info"}}),
        )
        .await;
        let (result, before) = messages.split_last().expect("a response");
        assert_eq!(
            result["result"]["content"][0]["text"],
            format!("answer {n}")
        );
        assert_eq!(before.len(), 2, "{messages:#?}");
        let said = |method: &str, field: &str| {
            before
                .iter()
                .find(|m| m["method"] == method)
                .map(|m| m["params"][field].clone())
        };
        assert_eq!(
            said("notifications/progress", "progressToken"),
            Some(json!(format!("p-{n}"))),
            "{messages:#?}"
        );
        assert_eq!(
            said("notifications/message", "data"),
            Some(json!(format!("said before answer {n}"))),
            "{messages:#?}"
        );
    }
    gw.stop().await;
}
