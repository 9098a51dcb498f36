//! The real `toolgate` binary: flags, configuration errors, serving, graceful shutdown.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_toolgate");

#[test]
fn help_explains_every_serve_flag_and_its_variable() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--listen",
        "TOOLGATE_LISTEN",
        "--data-dir",
        "TOOLGATE_DATA_DIR",
        "--config",
        "TOOLGATE_CONFIG",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
}

#[test]
fn a_bad_config_value_fails_at_start_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("toolgate.toml");
    std::fs::write(&file, "[http]\nmax_body_bytes = \"lots\"\n").expect("write");
    let out = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&file)
        .env_remove("TOOLGATE_LISTEN")
        .output()
        .expect("run");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("http.max_body_bytes"), "{stderr}");

    let out = Command::new(BIN)
        .args(["serve", "--listen", "not-an-address"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("listen"));
}

#[tokio::test]
async fn serves_then_shuts_down_gracefully_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
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
    let health = reqwest::get(format!("http://{addr}/healthz"))
        .await
        .expect("request");
    assert_eq!(health.status(), 200);
    assert!(
        dir.path().join("workspace").is_dir(),
        "workspace defaults to <data-dir>/workspace"
    );

    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .expect("join")
        .expect("wait");
    assert!(status.success(), "exit status {status:?}");
    // Drain the rest of the log so nothing blocks.
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("stopped")), "{rest:?}");
}
