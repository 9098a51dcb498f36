//! `execute_command`: output, exit codes, the sandbox's walls and the deadline, through
//! the real gateway and the real `toolgate sandbox-exec` launcher.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolgate_e2e::Gateway;

async fn run(gw: &Gateway, command: &str) -> Value {
    let (status, _, body) = gw
        .invoke(
            "execute_command",
            json!({"arguments": {"command": command}}),
        )
        .await;
    assert_eq!(status, 200, "{command}: {body}");
    body
}

fn text(body: &Value) -> &str {
    body["content"][0]["text"].as_str().expect("text output")
}

#[tokio::test]
async fn runs_a_command_in_the_workspace_with_merged_output_and_exit_code() {
    let gw = Gateway::start().await;
    std::fs::create_dir_all(gw.workspace().join("sub")).expect("mkdir");
    let body = run(&gw, "echo out; echo err >&2; pwd; exit 3").await;
    let out = text(&body);
    assert!(out.contains("out\nerr\n"), "{out}");
    assert!(out.ends_with("[exit code 3]"), "{out}");
    assert!(
        out.contains(gw.workspace().to_str().expect("utf-8")),
        "{out}"
    );
    assert_eq!(body["structured"]["exit_code"], 3, "{body}");
    assert_eq!(body["structured"]["sandbox"], "workspace-write");

    let (status, _, body) = gw
        .invoke(
            "execute_command",
            json!({"arguments": {"command": "echo made > here.txt; pwd", "cwd": "sub"}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        std::fs::read_to_string(gw.workspace().join("sub/here.txt")).expect("written"),
        "made\n"
    );

    for cwd in ["../..", "/etc", "missing"] {
        let (status, _, body) = gw
            .invoke(
                "execute_command",
                json!({"arguments": {"command": "true", "cwd": cwd}}),
            )
            .await;
        assert!(matches!(status, 400 | 404), "{cwd}: {status} {body}");
    }
}

#[tokio::test]
async fn the_environment_is_scrubbed() {
    let gw = Gateway::start().await;
    let body = run(&gw, "env").await;
    let names: Vec<&str> = text(&body)
        .lines()
        .filter_map(|line| line.split_once('=').map(|(name, _)| name))
        .collect();
    for name in &names {
        assert!(
            [
                "PATH", "HOME", "TMPDIR", "LANG", "TERM", "PWD", "SHLVL", "_", "OLDPWD"
            ]
            .contains(name),
            "{name} leaked into the command's environment: {names:?}"
        );
    }
    assert!(names.contains(&"TMPDIR"), "{names:?}");
}

#[tokio::test]
async fn writes_and_reads_outside_the_workspace_are_refused() {
    let gw = Gateway::start().await;
    let other = gw.create_tenant("other").await;
    let other_ws = gw.data.path().join("workspace/other");
    std::fs::create_dir_all(&other_ws).expect("mkdir");
    std::fs::write(other_ws.join("secret.txt"), "other tenant's secret").expect("write");
    drop(other);
    let outside = std::env::temp_dir().join(format!("toolgate-escape-{}", std::process::id()));
    let escapes = [
        format!("echo x > {}", outside.display()),
        "echo x > ../escape.txt".to_owned(),
        "mkdir /tmp/toolgate-escape-dir".to_owned(),
        "cat ../other/secret.txt".to_owned(),
        "ls ..".to_owned(),
        format!("cat {}", gw.data.path().join("toolgate.db").display()),
        "cat /proc/self/environ".to_owned(),
        "cat /proc/1/environ".to_owned(),
        "ln -s /etc/passwd link && echo y > link".to_owned(),
    ];
    for command in &escapes {
        let body = run(&gw, command).await;
        assert_ne!(
            body["structured"]["exit_code"], 0,
            "{command} succeeded: {body}"
        );
        assert!(
            !text(&body).contains("other tenant's secret"),
            "{command}: {body}"
        );
    }
    assert!(!outside.exists());
    assert!(!gw.data.path().join("workspace/escape.txt").exists());
    assert!(!Path::new("/tmp/toolgate-escape-dir").exists());

    // Reading the system's programs and writing to $TMPDIR still work.
    let body = run(
        &gw,
        "echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\" && ls /usr/bin >/dev/null",
    )
    .await;
    assert_eq!(body["structured"]["exit_code"], 0, "{body}");
}

#[tokio::test]
async fn tcp_connections_are_refused_without_network() {
    let gw = Gateway::start().await;
    let port = gw.base.rsplit(':').next().expect("port");
    let probe = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('connected')\""
    );
    let body = run(&gw, &probe).await;
    assert_ne!(body["structured"]["exit_code"], 0, "{body}");
    assert!(!text(&body).contains("connected"), "{body}");
    assert!(text(&body).contains("PermissionError"), "{body}");

    let open = Gateway::start_with(|c| c.tools.execute_command.network = true).await;
    let port = open.base.rsplit(':').next().expect("port");
    let probe = probe.replace(
        &format!(", {}", gw.base.rsplit(':').next().expect("port")),
        &format!(", {port}"),
    );
    let body = run(&open, &probe).await;
    assert_eq!(body["structured"]["exit_code"], 0, "{body}");
}

#[tokio::test]
async fn the_deadline_kills_the_whole_process_group() {
    let gw = Gateway::start().await;
    let started = std::time::Instant::now();
    let (status, _, body) = gw
        .invoke(
            "execute_command",
            json!({
                "arguments": {"command": "sleep 600 & echo $! > bg.pid; echo $$ > sh.pid; sleep 600"},
                "timeout_ms": 1500
            }),
        )
        .await;
    assert_eq!(status, 504, "{body}");
    assert!(started.elapsed() < Duration::from_secs(30));
    for file in ["bg.pid", "sh.pid"] {
        let pid = std::fs::read_to_string(gw.workspace().join(file)).expect("pid file");
        let proc = format!("/proc/{}", pid.trim());
        let mut gone = false;
        for _ in 0..50 {
            // Gone, or a zombie waiting for its new parent to reap it.
            let state = std::fs::read_to_string(format!("{proc}/stat")).unwrap_or_default();
            if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(gone, "{file}: process {proc} outlived the deadline");
    }
}

#[tokio::test]
async fn long_output_is_truncated_with_a_marker() {
    let gw = Gateway::start().await;
    let body = run(&gw, "yes abcdefghi | head -c 200000").await;
    let out = text(&body);
    assert!(out.chars().count() < 30_200, "{}", out.len());
    assert!(
        out.contains("[output truncated: showing the first 30000 characters of 200000 bytes]"),
        "{}",
        &out[out.len() - 200..]
    );
    assert_eq!(body["structured"]["truncated"], true);
    assert_eq!(body["structured"]["output_bytes"], 200_000);
}

#[tokio::test]
async fn read_only_tenants_cannot_write_the_workspace() {
    let gw = Gateway::start_with(|c| {
        c.tools
            .execute_command
            .tenant_sandbox
            .insert("default".into(), toolgate_tools::SandboxMode::ReadOnly);
    })
    .await;
    std::fs::write(gw.workspace().join("a.txt"), "readable").expect("write");
    let body = run(&gw, "cat a.txt; echo x > b.txt").await;
    assert!(text(&body).contains("readable"), "{body}");
    assert_ne!(body["structured"]["exit_code"], 0, "{body}");
    assert_eq!(body["structured"]["sandbox"], "read-only");
    assert!(!gw.workspace().join("b.txt").exists());
}

#[tokio::test]
async fn git_status_reads_a_repository_without_running_its_configured_programs() {
    let gw = Gateway::start().await;
    let ws = gw.workspace();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&ws)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &ws)
            .output()
            .expect("run git");
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&[
        "-c",
        "user.email=t@example.org",
        "-c",
        "user.name=t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "init",
    ]);
    std::fs::write(ws.join("new.txt"), "x").expect("write");
    // A repository may name a program for git to run; git_status must not run it.
    git(&["config", "core.fsmonitor", "touch pwned"]);
    let (status, _, body) = gw.invoke("git_status", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["structured"]["branch"], "main", "{body}");
    assert_eq!(
        body["structured"]["files"],
        json!([{"path": "new.txt", "index": "?", "worktree": "?"}])
    );
    assert!(!ws.join("pwned").exists(), "the repository's fsmonitor ran");

    let bare = Gateway::start().await;
    bare.workspace();
    let (status, _, body) = bare.invoke("git_status", json!({"arguments": {}})).await;
    assert_eq!(status, 400, "{body}");
}
