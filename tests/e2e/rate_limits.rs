//! Rate limits, concurrency limits and metrics, as an operator and a tenant admin meet
//! them: a call over a limit is 429 with `Retry-After` (REST) or an `isError` result
//! (MCP), runs nothing and leaves no audit row, and every refusal is counted at
//! `/metrics`; a tenant's policy tightens the operator's limits, never loosens them; one
//! tenant over its limit leaves another's calls untouched.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use toolgate_e2e::{Gateway, PgDb, client_with_key, read};
use toolgate_server::config::Secret;

/// The samples of a Prometheus text exposition, by metric name and label set, checked
/// line by line against the format (a sample is `name{labels} value`).
pub(crate) fn samples(text: &str) -> Vec<(String, HashMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            assert!(
                line.is_empty() || line.starts_with("# HELP ") || line.starts_with("# TYPE "),
                "bad comment line: {line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value in {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let rest = rest.strip_suffix('}').expect("labels close");
                let mut labels = HashMap::new();
                // Label values here never hold `",` (tool names, outcomes, limits).
                for pair in rest.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").expect("label=\"value\"");
                    labels.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
                }
                (name.to_owned(), labels)
            }
            None => (series.to_owned(), HashMap::new()),
        };
        assert!(
            name.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name {name}"
        );
        out.push((name, labels, value));
    }
    out
}

/// The sum of `name`'s samples whose labels include every pair of `want`.
pub(crate) fn total(text: &str, name: &str, want: &[(&str, &str)]) -> f64 {
    samples(text)
        .into_iter()
        .filter(|(n, labels, _)| {
            n == name
                && want
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

/// A 429 `rate_limited` problem: its `Retry-After` seconds, and the problem.
pub(crate) async fn rate_limited(refused: reqwest::Response) -> (u64, serde_json::Value) {
    assert_eq!(refused.status(), 429);
    let wait: u64 = refused.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("Retry-After seconds");
    let (_, content_type, problem) = read(refused).await;
    assert_eq!(content_type, "application/problem+json");
    assert_eq!(
        problem["type"], "urn:toolgate:error:rate_limited",
        "{problem}"
    );
    (wait, problem)
}

pub(crate) async fn metrics(gw: &Gateway) -> String {
    let response = gw
        .http
        .get(gw.url("/metrics"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .expect("ascii")
            .starts_with("text/plain; version=0.0.4"),
    );
    response.text().await.expect("body")
}

async fn echo(client: &reqwest::Client, gw: &Gateway) -> reqwest::Response {
    client
        .post(gw.url("/v1/tools/echo/invoke"))
        .json(&json!({"arguments": {"message": "hi"}}))
        .send()
        .await
        .expect("request")
}

async fn audit_rows(gw: &Gateway, key: &str, tool: &str) -> usize {
    let (status, _, body) = read(
        client_with_key(key)
            .get(gw.url(&format!("/v1/audit?tool={tool}&limit=500")))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["entries"].as_array().expect("entries").len()
}

async fn limited_tenant(gw: &Gateway) {
    // The tenant asks for more than the operator allows: the operator's 3 per minute hold.
    let (status, _, policy) = read(
        gw.http
            .put(gw.url("/v1/policy"))
            .json(&json!({"rate_limits": {"tenant_per_minute": 1000}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{policy}");
    assert_eq!(policy["rate_limits"]["tenant_per_minute"], 1000);
    for _ in 0..3 {
        assert_eq!(echo(&gw.http, gw).await.status(), 200);
    }
    let (wait, problem) = rate_limited(echo(&gw.http, gw).await).await;
    assert!((1..=20).contains(&wait), "one call every 20 s: {wait}");
    assert_eq!(problem["details"]["not_run"], true, "{problem}");
    // Three rows: the refusal was never accepted.
    assert_eq!(audit_rows(gw, &gw.admin_key, "echo").await, 3);

    // MCP: the same refusal as a tool error the model can read.
    let answer = crate::mcp::post_stateless(
        gw,
        "e2e",
        1,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}}),
    )
    .await;
    let result = &answer.last().expect("an answer")["result"];
    assert_eq!(result["isError"], true, "{answer:?}");
    let text = result["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("rate_limited"), "{text}");

    let exposition = metrics(gw).await;
    assert_eq!(
        total(
            &exposition,
            "toolgate_admission_rejections_total",
            &[("toolgate_limit", "tenant"), ("toolgate_adapter", "rest")]
        ),
        1.0,
        "{exposition}"
    );
    assert_eq!(
        total(
            &exposition,
            "toolgate_admission_rejections_total",
            &[("toolgate_limit", "tenant"), ("toolgate_adapter", "mcp")]
        ),
        1.0
    );
    assert_eq!(
        total(
            &exposition,
            "toolgate_tool_calls_total",
            &[("gen_ai_tool_name", "echo"), ("toolgate_outcome", "ok")]
        ),
        3.0
    );
    assert_eq!(
        total(
            &exposition,
            "toolgate_tool_call_duration_seconds_count",
            &[("gen_ai_tool_name", "echo")]
        ),
        3.0
    );
    assert!(
        total(
            &exposition,
            "toolgate_audit_commit_duration_seconds_count",
            &[]
        ) >= 3.0
    );
}

#[tokio::test]
async fn a_call_over_the_limit_is_refused_unrun_unaudited_and_counted() {
    let gw = Gateway::start_with(|c| c.limits.tenant_per_minute = Some(3)).await;
    limited_tenant(&gw).await;
    gw.stop().await;
}

#[tokio::test]
async fn a_call_over_the_limit_is_refused_unrun_unaudited_and_counted_on_postgres() {
    let db = PgDb::create().await;
    let gw = Gateway::start_with(|c| {
        c.limits.tenant_per_minute = Some(3);
        c.database.url = Some(Secret::new(db.url.clone()));
    })
    .await;
    limited_tenant(&gw).await;
    // This instance counts itself among those sharing the limits.
    let exposition = metrics(&gw).await;
    assert_eq!(total(&exposition, "toolgate_instances", &[]), 1.0);
    gw.stop().await;
    db.drop_db().await;
}

/// Made-up tool names make no series of their own (else a client could grow the
/// exposition without end), and an agent's chat calls are measured with their tokens.
#[tokio::test]
async fn unknown_tools_share_one_series_and_agent_chat_calls_are_measured() {
    use toolgate_e2e::llm::{MockLlm, Reply, Wire, says};
    let mock = MockLlm::start(Wire::Openai, vec![Reply::ok(says::openai_text("done"))]).await;
    let base = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &base));
    })
    .await;
    for name in ["no_such_tool_1", "no_such_tool_2"] {
        let (status, _, _) = gw.invoke(name, json!({"arguments": {}})).await;
        assert_eq!(status, 404);
    }
    let (status, _, agent) = gw
        .post(
            "/v1/agents",
            json!({"name": "a", "provider": "llm", "model": "gpt-test"}),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let (status, _, run) = gw
        .post(
            &format!("/v1/agents/{}/runs", agent["id"].as_str().expect("id")),
            json!({"input": "hi", "wait_secs": 30}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "completed", "{run}");
    let exposition = metrics(&gw).await;
    assert!(!exposition.contains("no_such_tool"), "{exposition}");
    assert_eq!(
        total(
            &exposition,
            "toolgate_tool_calls_total",
            &[
                ("gen_ai_tool_name", "_unknown"),
                ("toolgate_outcome", "not_found")
            ]
        ),
        2.0
    );
    assert_eq!(
        total(
            &exposition,
            "gen_ai_client_operation_duration_seconds_count",
            &[
                ("gen_ai_operation_name", "chat"),
                ("gen_ai_provider_name", "openai"),
                ("gen_ai_request_model", "gpt-test")
            ]
        ),
        1.0,
        "{exposition}"
    );
    let input_tokens = total(
        &exposition,
        "gen_ai_client_token_usage_count",
        &[("gen_ai_token_type", "input")],
    );
    assert_eq!(input_tokens, 1.0, "{exposition}");
    gw.stop().await;
}

/// Made-up MCP methods share the conventions' `_OTHER` series (a client could otherwise
/// grow the exposition without end, and crowd out everyone's series at the SDK's
/// cardinality limit); a tool call's series carries `gen_ai.operation.name` and the
/// HTTP version, and a failure that is an HTTP 200 (a JSON-RPC error, a tool's error
/// result) its `error.type`, as the MCP semantic conventions ask.
#[tokio::test]
async fn made_up_mcp_methods_share_one_series_and_tool_calls_are_named_as_the_conventions_ask() {
    let gw = Gateway::start().await;
    let post = |id: u64, method: &str, params: serde_json::Value| {
        let mut request = gw
            .http
            .post(gw.url("/mcp"))
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = params["name"].as_str() {
            request = request.header("mcp-name", name);
        }
        let request =
            request.json(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        async move { request.send().await.expect("mcp").status() }
    };
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    for (id, method) in [(1, "no_such/method_one"), (2, "no_such/method_two")] {
        let status = post(id, method, json!({"_meta": meta})).await;
        assert!(status.is_success() || status.is_client_error(), "{status}");
    }
    let status = post(
        3,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi"}, "_meta": meta}),
    )
    .await;
    assert_eq!(status, 200);
    // Failures the HTTP status does not show: a JSON-RPC error (no such tool: -32602)
    // and a tool's error result (`isError`: arguments that do not fit its schema).
    let status = post(
        4,
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}, "_meta": meta}),
    )
    .await;
    assert_eq!(status, 200);
    let status = post(
        5,
        "tools/call",
        json!({"name": "echo", "arguments": {"volume": 11}, "_meta": meta}),
    )
    .await;
    assert_eq!(status, 200);
    // A refusal rmcp answers itself, before the handler runs: an HTTP 400 whose JSON-RPC
    // error (2026-07-28's `_meta` without the client's capabilities: -32602) is the one
    // the operation records.
    let status = post(
        6,
        "tools/list",
        json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
        }}),
    )
    .await;
    assert_eq!(status, 400);
    let exposition = metrics(&gw).await;
    assert!(!exposition.contains("no_such"), "{exposition}");
    let operations: [(&[(&str, &str)], f64); 5] = [
        (
            &[
                ("mcp_method_name", "_OTHER"),
                ("error_type", "-32601"),
                ("rpc_response_status_code", "-32601"),
            ],
            2.0,
        ),
        (
            &[
                ("mcp_method_name", "tools/call"),
                ("gen_ai_operation_name", "execute_tool"),
                ("gen_ai_tool_name", "echo"),
                ("network_protocol_name", "http"),
                ("network_protocol_version", "1.1"),
            ],
            2.0,
        ),
        (
            &[
                ("mcp_method_name", "tools/call"),
                ("error_type", "-32602"),
                ("rpc_response_status_code", "-32602"),
            ],
            1.0,
        ),
        (
            &[
                ("mcp_method_name", "tools/call"),
                ("gen_ai_tool_name", "echo"),
                ("error_type", "tool_error"),
            ],
            1.0,
        ),
        (
            &[
                ("mcp_method_name", "tools/list"),
                ("error_type", "-32602"),
                ("rpc_response_status_code", "-32602"),
            ],
            1.0,
        ),
    ];
    for (labels, count) in operations {
        assert_eq!(
            total(
                &exposition,
                "mcp_server_operation_duration_seconds_count",
                labels
            ),
            count,
            "{labels:?} in {exposition}"
        );
    }
    gw.stop().await;
}

#[tokio::test]
async fn metrics_need_the_operator_scope_and_a_policy_cannot_set_a_zero_limit() {
    let gw = Gateway::start().await;
    let tenant_admin = gw.create_tenant("other").await;
    let response = client_with_key(&tenant_admin)
        .get(gw.url("/metrics"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 403);
    assert_eq!(
        gw.anonymous
            .get(gw.url("/metrics"))
            .send()
            .await
            .expect("request")
            .status(),
        401
    );
    let (status, _, problem) = read(
        gw.http
            .put(gw.url("/v1/policy"))
            .json(&json!({"rate_limits": {"tools": {"echo": 0}}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 400, "{problem}");
    assert_eq!(
        problem["errors"][0]["pointer"], "/rate_limits/tools/echo",
        "{problem}"
    );
    gw.stop().await;
}

#[tokio::test]
async fn the_metrics_listener_serves_without_credentials_and_gauges_move() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let gw = Gateway::start_with(|c| {
        c.telemetry.metrics_listen = Some(([127, 0, 0, 1], port).into());
    })
    .await;
    let url = format!("http://127.0.0.1:{port}/metrics");
    // The listener starts with the gateway; wait for it.
    let mut text = String::new();
    for _ in 0..100 {
        if let Ok(r) = gw.anonymous.get(&url).send().await
            && r.status() == 200
        {
            text = r.text().await.expect("body");
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(total(&text, "toolgate_sse_streams", &[]), 0.0, "{text}");
    // An open SSE stream shows in the gauge while it is open.
    let stream = gw
        .http
        .get(gw.url("/v1/approvals/events"))
        .send()
        .await
        .expect("stream");
    assert_eq!(stream.status(), 200);
    let text = gw
        .anonymous
        .get(&url)
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("body");
    assert_eq!(total(&text, "toolgate_sse_streams", &[]), 1.0, "{text}");
    assert_eq!(total(&text, "toolgate_calls_in_flight", &[]), 0.0);
    drop(stream);
    gw.stop().await;
}

/// One tenant far over its limit (all of its excess refused) and another within none:
/// every call of the other succeeds while the first is refused, and each refusal is
/// counted. (Latency under that load is measured in `bench/`, not asserted here.)
#[tokio::test]
async fn a_tenant_over_its_limit_leaves_another_tenants_calls_untouched() {
    let gw = Gateway::start().await;
    let noisy = gw.create_tenant("noisy").await;
    let quiet = gw.create_tenant("quiet").await;
    let noisy_client = client_with_key(&noisy);
    let (status, _, body) = read(
        noisy_client
            .put(gw.url("/v1/policy"))
            .json(&json!({"rate_limits": {"tenant_per_minute": 60, "tenant_concurrency": 4}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let quiet_client = client_with_key(&quiet);
    let hammer = {
        let (client, url) = (noisy_client.clone(), gw.url("/v1/tools/echo/invoke"));
        tokio::spawn(async move {
            let mut codes: HashMap<u16, usize> = HashMap::new();
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..8 {
                let (client, url) = (client.clone(), url.clone());
                tasks.spawn(async move {
                    let mut codes = Vec::new();
                    for _ in 0..75 {
                        let r = client
                            .post(&url)
                            .json(&json!({"arguments": {"message": "x"}}))
                            .send()
                            .await
                            .expect("request");
                        if r.status() == 429 {
                            assert!(r.headers().contains_key("retry-after"));
                        }
                        codes.push(r.status().as_u16());
                    }
                    codes
                });
            }
            while let Some(done) = tasks.join_next().await {
                for code in done.expect("task") {
                    *codes.entry(code).or_default() += 1;
                }
            }
            codes
        })
    };
    let mut quiet_ok = 0;
    for _ in 0..100 {
        let r = echo(&quiet_client, &gw).await;
        assert_eq!(r.status(), 200, "the quiet tenant is never refused");
        quiet_ok += 1;
    }
    let codes = hammer.await.expect("hammer");
    assert_eq!(quiet_ok, 100);
    let refused = codes.get(&429).copied().unwrap_or(0);
    let ok = codes.get(&200).copied().unwrap_or(0);
    assert_eq!(ok + refused, 600, "{codes:?}");
    // 60 per minute: a burst of 60 (and perhaps one or two more as the bucket refills).
    assert!((60..=63).contains(&ok), "{codes:?}");
    assert_eq!(audit_rows(&gw, &noisy, "echo").await, ok);
    let exposition = metrics(&gw).await;
    let counted = total(&exposition, "toolgate_admission_rejections_total", &[]);
    assert_eq!(counted as usize, refused, "{exposition}");
    gw.stop().await;
}
