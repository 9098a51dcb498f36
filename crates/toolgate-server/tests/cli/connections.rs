//! Client connections against the process's open-file limit: idle connections opened by
//! anyone (no credentials needed) must not lock callers out.

use super::*;

/// Under an open-file limit of 256 (soft and hard, so the gateway cannot raise it),
/// 600 connections that send nothing used to take every descriptor: the gateway accepted
/// no other connection, and callers timed out until they let go. Now it holds at most
/// `http.max_connections` (by default three quarters of the limit less 64: 128) and closes
/// the idle ones to make room.
#[tokio::test]
async fn idle_connections_past_the_open_file_limit_do_not_lock_callers_out() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("workspace/default")).expect("workspace");
    std::fs::write(dir.path().join("workspace/default/hello.txt"), "hello").expect("file");
    let mut launcher = Command::new("prlimit");
    launcher.args(["--nofile=256:256", BIN]);
    let mut running = start_as(launcher, dir.path(), None, &[]);
    let addr = running.addr.clone();

    // Without the cap the listen queue filled too and stayed full: a connect then timed
    // out, so stop there. (Opened this fast, some wait for a SYN retried after 1 s.)
    let to: std::net::SocketAddr = addr.parse().expect("address");
    let idle: Vec<std::net::TcpStream> = (0..600)
        .map_while(|_| {
            std::net::TcpStream::connect_timeout(&to, std::time::Duration::from_secs(5)).ok()
        })
        .collect();
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .default_headers(
            [(
                reqwest::header::AUTHORIZATION,
                format!("Bearer {}", running.key).parse().expect("header"),
            )]
            .into_iter()
            .collect(),
        )
        .build()
        .expect("client");
    for (tool, arguments) in [
        ("echo", json!({"message": "still here"})),
        // A tool that opens a file of its own.
        ("read_file", json!({"path": "hello.txt"})),
    ] {
        let response = http
            .post(format!("http://{addr}/v1/tools/{tool}/invoke"))
            .json(&json!({"arguments": arguments}))
            .send()
            .await
            .unwrap_or_else(|err| panic!("{tool} beside 600 idle connections: {err}"));
        assert_eq!(response.status(), 200, "{tool}");
    }
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
