//! Client connections against the process's open-file limit: idle connections opened by
//! anyone (no credentials needed) must not lock callers out.

use std::time::Duration;

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

    let metrics = http
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {metrics}"))
    };
    assert_eq!(idle.len(), 600, "every idle connection was taken");
    assert!(value("toolgate_http_connections{") <= 128.0, "{metrics}");
    assert!(
        value("toolgate_http_connections_closed_at_cap_total") >= 400.0,
        "{metrics}"
    );
    drop(idle);
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
