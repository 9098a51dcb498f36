//! OTLP over gRPC: spans and metrics exported, and flushed when the gateway exits.

use super::*;

/// OTLP over gRPC, chosen in `[telemetry]`: a REST call's spans and the metrics reach a
/// gRPC receiver. The batch delay is a minute, so the spans only go out in the flush at
/// SIGTERM: the exporter's connection must outlive the server's runtime. And sampling
/// (`parentbased_traceidratio`, ratio 0): a trace whose caller sampled it is recorded;
/// one the caller did not sample, or with no caller trace, has no span at all (not even
/// an `execute_tool` root), yet its calls keep their trace ids in the audit.
#[tokio::test]
async fn otlp_over_grpc_exports_spans_and_metrics_and_flushes_at_exit() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let received = scratch.path().join("otlp.jsonl");
    let (_receiver, port) = receiver(&received, "grpc");
    let config = scratch.path().join("toolgate.toml");
    std::fs::write(
        &config,
        format!(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\notlp_protocol = \"grpc\"\n"
        ),
    )
    .expect("config");
    let data = scratch.path().join("data");
    let (mut gateway, base, admin) = gateway(&config, &data, |c| {
        c.env("OTEL_BSP_SCHEDULE_DELAY", "60000")
            .env("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
            .env("OTEL_TRACES_SAMPLER_ARG", "0")
            .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
    })
    .await;
    let trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    let unsampled = "6bf92f3577b34da6a3ce929d0e0e4738";
    for traceparent in [
        Some(format!("00-{trace}-00f067aa0ba902b8-01")),
        Some(format!("00-{unsampled}-00f067aa0ba902b8-00")),
        None,
    ] {
        let mut request = admin
            .post(format!("{base}/v1/tools/echo/invoke"))
            .json(&json!({"arguments": {"message": "over grpc"}}));
        if let Some(traceparent) = traceparent {
            request = request.header("traceparent", traceparent);
        }
        assert_eq!(request.send().await.expect("invoke").status(), 200);
    }
    let mcp = admin
        .post(format!("{base}/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "echo")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"message": "not traced"},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientInfo": {"name": "e2e", "version": "1"},
                      "io.modelcontextprotocol/clientCapabilities": {}}}}),
        )
        .send()
        .await
        .expect("mcp");
    assert_eq!(mcp.status(), 200);
    let _ = mcp.text().await;
    let (audit, traces) = echo_traces(&admin, &base).await;
    let traces: Vec<&str> = traces.iter().map(String::as_str).collect();
    assert_eq!(traces.len(), 4, "every call has its trace id: {audit}");
    assert!(traces.contains(&unsampled), "{audit}");

    // Metrics go out every 200 ms.
    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&received)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
            .collect()
    };
    let called = |v: &Value| v["signal"] == "metric" && v["name"] == "toolgate.tool.calls";
    for _ in 0..100 {
        if lines().iter().any(called) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metric = lines()
        .into_iter()
        .find(called)
        .expect("toolgate.tool.calls over gRPC");
    assert_eq!(metric["transport"], "grpc");
    assert!(
        !lines().iter().any(|v| v["signal"] == "span"),
        "no span before the batch delay or the flush"
    );

    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(gateway.0.id().to_string())
        .status();
    let status = gateway.0.wait().expect("wait");
    assert!(status.success(), "{status}");
    let got = spans(&received);
    let http = got
        .iter()
        .find(|s| s["name"] == "POST /v1/tools/{name}/invoke" && s["trace_id"] == trace)
        .unwrap_or_else(|| panic!("the server span, flushed at exit: {got:#?}"));
    assert_eq!(http["transport"], "grpc");
    let executed = got
        .iter()
        .find(|s| s["name"] == "execute_tool echo" && s["trace_id"] == trace)
        .unwrap_or_else(|| panic!("the executor's span: {got:#?}"));
    assert_eq!(executed["parent_span_id"], http["span_id"]);
    assert_eq!(executed["attributes"]["gen_ai.tool.name"], "echo");
    let others: Vec<&Value> = got.iter().filter(|s| s["trace_id"] != trace).collect();
    assert!(others.is_empty(), "only the sampled trace: {others:#?}");
}
