//! The deploy files users run, checked without a Docker engine or a cluster
//! (`tests/clients/deploy_check.py`): docker-compose.yml against the Compose
//! Specification's schema, the Kubernetes manifests against the Kubernetes 1.37 schemas
//! (strict), and what the gateway needs of both. Then the ConfigMap's TOML, with the
//! Secret's variables, goes through the gateway's own configuration loader: a replica
//! started from these files would accept its configuration.

use toolgate_e2e::sdk_clients;
use toolgate_server::config::{Config, Overrides};

#[tokio::test]
async fn compose_file_and_kubernetes_manifests_are_valid_and_load() {
    let dir = sdk_clients();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root");
    let output = tokio::process::Command::new(dir.join(".venv-deploy/bin/python"))
        .arg(dir.join("deploy_check.py"))
        .arg(root)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .expect("run deploy_check.py");
    assert!(
        output.status.success(),
        "the deploy files have problems:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let checked: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("deploy_check.py prints JSON");
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = scratch.path().join("toolgate.toml");
    std::fs::write(&file, checked["toml"].as_str().expect("toml")).expect("write");
    let env: Vec<(String, String)> = checked["env"]
        .as_object()
        .expect("env")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_owned()))
        .collect();
    let config = Config::load(
        &Overrides {
            config_file: Some(file),
            ..Overrides::default()
        },
        env,
    )
    .unwrap_or_else(|e| panic!("the ConfigMap does not load: {e}"));
    assert!(
        config.listen.ip().is_unspecified(),
        "listens on all interfaces"
    );
    assert!(
        config.database.url.is_some(),
        "DATABASE_URL from the Secret"
    );
    assert!(
        config.tenant_upstreams.key.is_some(),
        "the shared sealing key"
    );
    assert!(config.audit.signing_key.is_some(), "the shared signing key");
    assert!(config.auth.jwt.is_some(), "JWT settings from the Secret");
    assert!(config.telemetry.metrics_listen.is_some());
    assert!(config.mcp.allowed_hosts.iter().any(|h| h == "toolgate"));
}
