//! Bad input gets a clear, structured error: problem+json, the right status, never a 500.

use serde_json::json;
use toolgate_e2e::{Gateway, read};

#[tokio::test]
async fn schema_violations_are_400_listing_each_with_its_pointer() {
    let gw = Gateway::start().await;
    let (status, content_type, problem) = gw
        .invoke(
            "read_file",
            json!({"arguments": {"offset": 0, "limit": "ten", "colour": "red"}}),
        )
        .await;
    assert_eq!(
        (status, content_type.as_str()),
        (400, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:toolgate:error:invalid_arguments");
    assert_eq!(problem["status"], 400);
    let errors = problem["errors"].as_array().expect("errors");
    let mut pointers: Vec<&str> = errors
        .iter()
        .map(|e| e["pointer"].as_str().expect("pointer"))
        .collect();
    pointers.sort();
    // Missing "path" and unknown "colour" are pointed at by name, not at their object.
    assert_eq!(
        pointers,
        ["/colour", "/limit", "/offset", "/path"],
        "{problem}"
    );
    assert!(
        errors
            .iter()
            .all(|e| e["message"].as_str().is_some_and(|m| !m.is_empty()))
    );
    assert_eq!(problem["recoverable"], true);
}

#[tokio::test]
async fn unknown_tools_are_404() {
    let gw = Gateway::start().await;
    let (status, content_type, problem) = gw.invoke("no_such_tool", json!({"arguments": {}})).await;
    assert_eq!(
        (status, content_type.as_str()),
        (404, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:toolgate:error:not_found");
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let gw = Gateway::start().await;
    let message = "x".repeat(2 * 1024 * 1024);
    let (status, content_type, problem) = gw
        .invoke("echo", json!({"arguments": {"message": message}}))
        .await;
    assert_eq!(
        (status, content_type.as_str()),
        (413, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:toolgate:error:payload_too_large");
}

#[tokio::test]
async fn malformed_json_wrong_content_type_and_unknown_fields_are_client_errors() {
    let gw = Gateway::start().await;
    let url = gw.url("/v1/tools/echo/invoke");
    let cases = [
        (
            "application/json",
            "{\"arguments\": ",
            400,
            "malformed_request",
        ),
        ("application/json", "[1, 2]", 400, "malformed_request"),
        (
            "application/json",
            "{\"argumnets\": {}}",
            400,
            "malformed_request",
        ),
        (
            "application/json",
            "{\"arguments\": {}, \"timeout_ms\": 0}",
            400,
            "malformed_request",
        ),
        (
            "text/plain",
            "{\"arguments\": {}}",
            415,
            "unsupported_media_type",
        ),
    ];
    for (content_type, body, expected, kind) in cases {
        let response = gw
            .http
            .post(&url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("request");
        let (status, problem_type, problem) = read(response).await;
        assert_eq!(
            (status, problem_type.as_str()),
            (expected, "application/problem+json"),
            "{body}: {problem}"
        );
        assert_eq!(
            problem["type"],
            format!("urn:toolgate:error:{kind}"),
            "{body}"
        );
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{body}"
        );
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problems_too() {
    let gw = Gateway::start().await;
    let (status, content_type, _) = gw.get("/v1/nothing-here").await;
    assert_eq!(
        (status, content_type.as_str()),
        (404, "application/problem+json")
    );
    let response = gw
        .http
        .delete(gw.url("/v1/tools"))
        .send()
        .await
        .expect("request");
    let (status, content_type, _) = read(response).await;
    assert_eq!(
        (status, content_type.as_str()),
        (405, "application/problem+json")
    );
}

#[tokio::test]
async fn request_ids_are_accepted_or_generated_and_returned() {
    let gw = Gateway::start().await;
    let response = gw
        .http
        .get(gw.url("/v1/tools/nope"))
        .header("x-request-id", "trace-me-123")
        .send()
        .await
        .expect("request");
    assert_eq!(response.headers()["x-request-id"], "trace-me-123");
    let (_, _, problem) = read(response).await;
    assert_eq!(problem["request_id"], "trace-me-123");

    let response = gw
        .http
        .get(gw.url("/healthz"))
        .send()
        .await
        .expect("request");
    let generated = response.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(generated.len(), 36, "a UUID: {generated}");

    let response = gw
        .http
        .get(gw.url("/healthz"))
        .header("x-request-id", "has space")
        .send()
        .await
        .expect("request");
    assert_ne!(
        response.headers()["x-request-id"],
        "has space",
        "unsafe ids are replaced"
    );
}

#[tokio::test]
async fn cors_is_off_by_default_and_follows_the_allow_list() {
    let gw = Gateway::start().await;
    let response = gw
        .http
        .get(gw.url("/v1/tools"))
        .header("origin", "https://app.example")
        .send()
        .await
        .expect("request");
    assert!(
        response
            .headers()
            .get("access-control-allow-origin")
            .is_none()
    );

    let gw =
        Gateway::start_with(|c| c.http.cors_allowed_origins = vec!["https://app.example".into()])
            .await;
    let preflight = gw
        .http
        .request(reqwest::Method::OPTIONS, gw.url("/v1/tools/echo/invoke"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .expect("request");
    assert!(preflight.status().is_success());
    assert_eq!(
        preflight.headers()["access-control-allow-origin"],
        "https://app.example"
    );
    let other = gw
        .http
        .get(gw.url("/v1/tools"))
        .header("origin", "https://evil.example")
        .send()
        .await
        .expect("request");
    assert!(other.headers().get("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn health_and_readiness() {
    let gw = Gateway::start().await;
    let (status, _, body) = gw.get("/healthz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let (status, _, body) = gw.get("/readyz").await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ready")));
    std::fs::remove_dir_all(gw.data.path().join("workspace")).expect("remove workspace root");
    let (status, _, body) = gw.get("/readyz").await;
    assert_eq!(
        (status, body["status"].as_str()),
        (503, Some("not_ready")),
        "{body}"
    );
}

/// A client that sends its request head or body too slowly (slowloris) loses its
/// connection after the configured read timeouts, on REST and /mcp alike.
#[tokio::test]
async fn slow_request_heads_and_bodies_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = Gateway::start_with(|c| {
        c.http.header_read_timeout_secs = 1;
        c.http.body_read_timeout_secs = 1;
    })
    .await;
    let addr = gw.base.trim_start_matches("http://").to_owned();
    // What the server does with the connection, within a bound far above the timeouts.
    async fn outcome(addr: &str, sent: String) -> String {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        tcp.write_all(sent.as_bytes()).await.expect("write");
        let mut got = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(15),
            tcp.read_to_end(&mut got),
        )
        .await;
        assert!(read.is_ok(), "the connection was held open: {sent:?}");
        String::from_utf8_lossy(&got).into_owned()
    }
    // A head that never ends: closed (hyper answers nothing, or 408).
    let answer = outcome(&addr, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ".into()).await;
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
    // A body that stops coming: a client error, and the connection ends.
    for path in ["/v1/tools/echo/invoke", "/mcp"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             Content-Length: 100\r\n\r\n{{\"argu",
            gw.admin_key
        );
        let answer = outcome(&addr, head).await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 4"),
            "{path}: {answer}"
        );
    }
    // A complete request is still served.
    let (status, _, _) = gw
        .invoke(
            "echo",
            serde_json::json!({"arguments": {"message": "fine"}}),
        )
        .await;
    assert_eq!(status, 200);
}
