//! What `toolgate --help` and `--version` say, and a bad configuration value at start.

use super::*;

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
fn help_and_version_speak_of_the_command_not_the_crate() {
    let run = |arg: &str| {
        let out = Command::new(BIN).arg(arg).output().expect("run");
        assert!(out.status.success(), "{arg}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let help = run("--help");
    assert!(
        help.starts_with("One gateway for every tool call"),
        "{help}"
    );
    for crate_words in ["axum", "adapter", "crate"] {
        assert!(!help.contains(crate_words), "{crate_words:?} in:\n{help}");
    }
    assert_eq!(
        run("--version").trim(),
        format!("toolgate {}", env!("CARGO_PKG_VERSION"))
    );
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
