//! Client connections against the process's open-file limit: idle connections opened by
//! anyone (no credentials needed) must not lock callers out.

use std::time::Duration;

use tokio::net::TcpStream;

use super::*;

/// A gateway under an open-file limit of 256, soft and hard, so that it cannot raise it
/// (`max_connections` defaults to three quarters of the limit less 64: 128), with a
/// workspace file to read.
fn start_limited(dir: &std::path::Path, env: &[(&str, &str)]) -> Running {
    std::fs::create_dir_all(dir.join("workspace/default")).expect("workspace");
    std::fs::write(dir.join("workspace/default/hello.txt"), "hello").expect("file");
    let mut launcher = Command::new("prlimit");
    launcher.args(["--nofile=256:256", BIN]);
    start_as(launcher, dir, None, env)
}

/// Up to `n` connections to `addr` that send nothing. Without a cap the listen queue
/// filled too and stayed full: a connect then timed out, so it stops there. (Opened this
/// fast, some wait for a SYN sent again after 1 s.)
fn idle_connections(addr: &str, n: usize) -> Vec<std::net::TcpStream> {
    let to: std::net::SocketAddr = addr.parse().expect("address");
    (0..n)
        .map_while(|_| std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5)).ok())
        .collect()
}

/// A client that gives up after 10 s.
fn patient_client(key: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {key}").parse().expect("header"),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .expect("client")
}

/// `echo`, then `read_file` (a tool that opens a file of its own), each answered 200.
async fn calls_are_answered(http: &reqwest::Client, addr: &str, beside: &str) {
    for (tool, arguments) in [
        ("echo", json!({"message": "still here"})),
        ("read_file", json!({"path": "hello.txt"})),
    ] {
        let response = http
            .post(format!("http://{addr}/v1/tools/{tool}/invoke"))
            .json(&json!({"arguments": arguments}))
            .send()
            .await
            .unwrap_or_else(|err| panic!("{tool} beside {beside}: {err}"));
        assert_eq!(response.status(), 200, "{tool}");
    }
}

/// 600 connections that send nothing used to take every descriptor: the gateway accepted
/// no other connection, and callers timed out until they let go. Now it holds at most
/// `http.max_connections` and closes the idle ones to make room.
#[tokio::test]
async fn idle_connections_past_the_open_file_limit_do_not_lock_callers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start_limited(dir.path(), &[]);
    let addr = running.addr.clone();
    let idle = idle_connections(&addr, 600);
    let http = patient_client(&running.key);
    calls_are_answered(&http, &addr, "600 idle connections").await;

    assert_eq!(idle.len(), 600, "every idle connection was taken");
    let open = metric(&http, &addr, "toolgate_http_connections{").await;
    assert!(open <= 128.0, "{open} open");
    let closed = metric(
        &http,
        &addr,
        "toolgate_http_connections_closed_at_cap_total",
    )
    .await;
    assert!(closed >= 400.0, "{closed} closed at the cap");
    drop(idle);
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// 200 connections, no credentials needed, each part way through a request's head
/// (slowloris): each held its place at the cap until its head timed out (30 s), and
/// nobody else was served meanwhile. Now one asked to close goes at once.
#[tokio::test]
async fn heads_sent_part_way_do_not_lock_callers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start_limited(dir.path(), &[]);
    let addr = running.addr.clone();
    let slow = sending(&addr, 200, None, |_| {
        b"GET /healthz HTTP/1.1\r\nhost: x\r\n".to_vec()
    })
    .await;
    let http = patient_client(&running.key);
    calls_are_answered(&http, &addr, "200 heads sent part way").await;
    drop(slow);
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// The metrics listener's connections come out of the same limit. It was served with no
/// cap (and no read timeouts): 400 idle connections to it left the main listener no
/// descriptor. Now it holds at most 64.
#[tokio::test]
async fn idle_connections_on_the_metrics_listener_do_not_lock_callers_out() {
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start_limited(
        dir.path(),
        &[("TOOLGATE_TELEMETRY__METRICS_LISTEN", &metrics_addr)],
    );
    let addr = running.addr.clone();
    let idle = idle_connections(&metrics_addr, 400);
    assert_eq!(idle.len(), 400, "every idle connection was taken");
    let http = patient_client(&running.key);
    calls_are_answered(&http, &addr, "400 idle connections to the metrics listener").await;
    let scrape = http
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .expect("a scrape beside them");
    assert_eq!(scrape.status(), 200);
    drop(idle);
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// `n` connections to `addr` (each with a receive buffer of `receive_buffer` bytes if
/// given), the `i`th having sent `bytes(i)`.
async fn sending(
    addr: &str,
    n: usize,
    receive_buffer: Option<u32>,
    bytes: impl Fn(usize) -> Vec<u8>,
) -> Vec<TcpStream> {
    use tokio::io::AsyncWriteExt;
    let to: std::net::SocketAddr = addr.parse().expect("address");
    let mut conns = Vec::new();
    for i in 0..n {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        if let Some(size) = receive_buffer {
            socket.set_recv_buffer_size(size).expect("receive buffer");
        }
        let mut conn = tokio::time::timeout(Duration::from_secs(5), socket.connect(to))
            .await
            .expect("connected in time")
            .expect("connect");
        conn.write_all(&bytes(i)).await.expect("write");
        conns.push(conn);
    }
    conns
}

/// A client with a key sent 200 bodies a byte at a time (each byte within the body read
/// timeout): every place at the cap was held by a request waiting for its body, and
/// nobody else was served. Now a connection asked to close while its body arrives goes
/// at once, its request answered 503 with `Retry-After` (REST and MCP alike).
#[tokio::test]
async fn bodies_sent_a_byte_at_a_time_do_not_lock_callers_out() {
    use tokio::io::AsyncReadExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start_limited(dir.path(), &[]);
    let addr = running.addr.clone();
    // Every other one a REST call, the others MCP; 100,000 bytes announced, one sent.
    let key = running.key.clone();
    let slow = sending(&addr, 200, None, |i| {
        let path = if i % 2 == 0 {
            "/v1/tools/echo/invoke"
        } else {
            "/mcp"
        };
        format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
             accept: application/json, text/event-stream\r\n\
             content-type: application/json\r\ncontent-length: 100000\r\n\r\n{{"
        )
        .into_bytes()
    })
    .await;
    let http = patient_client(&running.key);
    calls_are_answered(&http, &addr, "200 bodies arriving a byte at a time").await;

    // Those cut (at least the 72 over the cap), REST calls and MCP ones among them.
    let mut reads = tokio::task::JoinSet::new();
    for (i, mut conn) in slow.into_iter().enumerate() {
        reads.spawn(async move {
            let mut answer = String::new();
            let read =
                tokio::time::timeout(Duration::from_secs(3), conn.read_to_string(&mut answer));
            read.await.ok().map(|_| (i % 2 == 1, answer))
        });
    }
    let cut: Vec<(bool, String)> = reads.join_all().await.into_iter().flatten().collect();
    assert!(cut.len() >= 72, "{} cut", cut.len());
    // One asked before the gateway read its request (it waited to be let in) is closed
    // with nothing to answer, as an idle one; the rest are answered.
    let cut: Vec<(bool, String)> = cut.into_iter().filter(|(_, a)| !a.is_empty()).collect();
    assert!(cut.len() >= 64, "{} answered", cut.len());
    for (_, answer) in &cut {
        let head = answer.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 503"), "{answer}");
        assert!(head.contains("retry-after: 1"), "{answer}");
        assert!(answer.contains("connection cap"), "{answer}");
    }
    let mcp = cut.iter().filter(|(mcp, _)| *mcp).count();
    assert!(
        mcp > 0 && mcp < cut.len(),
        "{mcp} of {} cut are MCP",
        cut.len()
    );
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// 200 clients, no credentials needed, each asked for the OpenAPI document 100 times in
/// one go (pipelined) and read none of it: each connection's writes blocked, and every
/// place at the cap was held for ever. Now a connection asked to close whose writes stay
/// blocked is dropped.
#[tokio::test]
async fn clients_that_read_nothing_do_not_lock_callers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start_limited(dir.path(), &[]);
    let addr = running.addr.clone();
    let deaf = sending(&addr, 200, Some(4096), |_| {
        b"GET /openapi.json HTTP/1.1\r\nhost: x\r\n\r\n".repeat(100)
    })
    .await;
    let http = patient_client(&running.key);
    calls_are_answered(&http, &addr, "200 clients that read nothing").await;
    drop(deaf);
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// The same over HTTP/2 (cleartext, prior knowledge), no credentials needed: 200 clients
/// that keep their streams' flow-control window shut block no socket write, but their
/// answers wait in the gateway. Each held its place at the cap for ever; now a connection
/// asked to close whose answers have waited 2 s, none taken, is dropped.
#[tokio::test]
async fn http2_clients_that_take_nothing_do_not_lock_callers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start_limited(dir.path(), &[]);
    let addr = running.addr.clone();
    let mut shut = Vec::new();
    for conn in sending(&addr, 200, None, |_| Vec::new()).await {
        let (mut h2, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, axum::body::Bytes>(conn)
            .await
            .expect("handshake");
        let driver = tokio::spawn(connection);
        let request = axum::http::Request::get(format!("http://{addr}/openapi.json"))
            .body(())
            .expect("request");
        let (answer, _) = h2.send_request(request, true).expect("send");
        shut.push((h2, answer, driver));
    }
    let http = patient_client(&running.key);
    calls_are_answered(&http, &addr, "200 HTTP/2 clients that take nothing").await;
    for (_, _, driver) in &shut {
        driver.abort();
    }
    drop(shut);
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// Streams followed (`/v1/approvals/events`, `/v1/audit/events`), one per connection, as
/// many as the cap: each held its place for as long as it was followed, and nobody else
/// was served. Now a stream whose connection is asked to close ends, cleanly, between
/// two events (its client reconnects, with `Last-Event-ID` where the stream has ids).
#[tokio::test]
async fn streams_followed_do_not_lock_callers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("workspace/default")).expect("workspace");
    std::fs::write(dir.path().join("workspace/default/hello.txt"), "hello").expect("file");
    let mut running = start_with(dir.path(), None, &[("TOOLGATE_HTTP__MAX_CONNECTIONS", "8")]);
    let addr = running.addr.clone();
    let mut followed = Vec::new();
    for i in 0..8 {
        // A client each: a connection each.
        let path = if i % 2 == 0 {
            "/v1/approvals/events"
        } else {
            "/v1/audit/events"
        };
        let stream = patient_client(&running.key)
            .get(format!("http://{addr}{path}"))
            .timeout(Duration::from_secs(60))
            .send()
            .await
            .expect("a stream");
        assert_eq!(stream.status(), 200, "{path}");
        followed.push(stream);
    }
    let http = patient_client(&running.key);
    calls_are_answered(&http, &addr, "8 streams followed").await;

    // Those asked to close ended between two events, not cut part way.
    let mut ends = tokio::task::JoinSet::new();
    for mut stream in followed {
        ends.spawn(async move {
            let end = async {
                loop {
                    match stream.chunk().await {
                        Ok(Some(_)) => {}
                        Ok(None) => return true,
                        Err(_) => return false,
                    }
                }
            };
            tokio::time::timeout(Duration::from_secs(3), end).await.ok()
        });
    }
    let ended: Vec<bool> = ends.join_all().await.into_iter().flatten().collect();
    assert!(!ended.is_empty(), "a stream ended to make room");
    assert!(ended.iter().all(|clean| *clean), "ended cleanly: {ended:?}");
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// One tenant's key sending ~1 MB bodies on 64 connections, the last bytes of each never
/// sent: the gateway held every byte until each body's read timeout (300 such held
/// 580 MB), and enough of them took the process and every tenant's calls down with it.
/// Now a body past its tenant's share of body bytes (4 MiB here) is refused at once, 429
/// with `Retry-After`, and counted; another tenant's calls are answered.
#[tokio::test]
async fn bodies_held_by_one_tenant_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let mut running = start_with(
        dir.path(),
        None,
        &[(
            "TOOLGATE_HTTP__MAX_BODY_BYTES_IN_FLIGHT_PER_TENANT",
            "4194304",
        )],
    );
    let addr = running.addr.clone();
    let created = client(&running.key)
        .post(format!("http://{addr}/v1/tenants"))
        .json(&json!({"name": "bystander"}))
        .send()
        .await
        .expect("create tenant");
    assert_eq!(created.status(), 201);
    let created: serde_json::Value = created.json().await.expect("json");
    let bystander = patient_client(created["admin_key"]["secret"].as_str().expect("secret"));

    let key = running.key.clone();
    let mut heavy = tokio::task::JoinSet::new();
    for (i, conn) in sending(&addr, 64, None, |_| Vec::new())
        .await
        .into_iter()
        .enumerate()
    {
        let key = key.clone();
        heavy.spawn(async move {
            let mut conn = conn;
            // Every other one a REST call, the others MCP.
            let (path, start) = if i % 2 == 0 {
                ("/v1/tools/echo/invoke", r#"{"arguments": {"message": ""#)
            } else {
                (
                    "/mcp",
                    r#"{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": ""#,
                )
            };
            let head = format!(
                "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\
                 accept: application/json, text/event-stream\r\n\
                 content-type: application/json\r\ncontent-length: 1048000\r\n\r\n{start}"
            );
            let mut bytes = head.into_bytes();
            bytes.resize(bytes.len() + 1_000_000, b'x');
            // Refused, the gateway closes the connection before taking it all.
            let _ = conn.write_all(&bytes).await;
            let mut answer = vec![0; 4096];
            let read = tokio::time::timeout(Duration::from_secs(3), conn.read(&mut answer));
            let answer = match read.await {
                Ok(Ok(n)) => String::from_utf8_lossy(&answer[..n]).into_owned(),
                _ => String::new(),
            };
            (conn, i % 2 == 1, answer)
        });
    }
    // Answered while the bodies held are still arriving.
    let answered: Vec<(TcpStream, bool, String)> = heavy.join_all().await;
    let refused: Vec<(bool, &String)> = answered
        .iter()
        .map(|(_, mcp, a)| (*mcp, a))
        .filter(|(_, a)| !a.is_empty())
        .collect();
    assert!(refused.len() >= 56, "{} of 64 refused", refused.len());
    let mcp = refused.iter().filter(|(mcp, _)| *mcp).count();
    assert!(
        mcp > 0 && mcp < refused.len(),
        "{mcp} of {} refused are MCP",
        refused.len()
    );
    for (_, answer) in &refused {
        let head = answer.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 429"), "{answer}");
        assert!(head.contains("retry-after: 1"), "{answer}");
        assert!(
            answer.contains("max_body_bytes_in_flight_per_tenant"),
            "{answer}"
        );
    }
    let response = bystander
        .post(format!("http://{addr}/v1/tools/echo/invoke"))
        .json(&json!({"arguments": {"message": "x".repeat(90_000)}}))
        .send()
        .await
        .expect("another tenant's call");
    let status = response.status();
    assert_eq!(status, 200, "{}", response.text().await.unwrap_or_default());

    let counted = metric(
        &client(&running.key),
        &addr,
        "toolgate_http_request_body_refused_total",
    )
    .await;
    assert!(counted >= refused.len() as f64, "{counted} counted");
    drop(answered);
    running.child.kill().expect("kill");
    running.child.wait().expect("wait");
}

/// The value of the first series at `addr`'s `/metrics` whose line starts with `series`.
async fn metric(http: &reqwest::Client, addr: &str, series: &str) -> f64 {
    let metrics = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{series} in {metrics}"))
}
