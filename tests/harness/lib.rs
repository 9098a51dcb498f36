//! Test harness: starts the real gateway in-process on `127.0.0.1:0` with its own data
//! directory, and stops it when dropped.

use std::path::PathBuf;

use tempfile::TempDir;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use toolgate_server::Config;

/// A running gateway.
pub struct Gateway {
    pub base: String,
    pub http: reqwest::Client,
    pub data: TempDir,
    shutdown: Option<oneshot::Sender<()>>,
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
        adjust(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        // Binding happened above, so the workspace exists before the first request.
        std::fs::create_dir_all(config.workspace_root()).expect("workspace dir");
        let (tx, rx) = oneshot::channel();
        tokio::spawn(async move {
            let stop = async {
                let _ = rx.await;
            };
            if let Err(err) = toolgate_server::serve(config, listener, stop).await {
                eprintln!("gateway failed: {err:#}");
            }
        });
        Self {
            base: format!("http://{addr}"),
            http: reqwest::Client::new(),
            data,
            shutdown: Some(tx),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The workspace root the file tools see.
    pub fn workspace(&self) -> PathBuf {
        self.data.path().join("workspace")
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

    pub async fn get(&self, path: &str) -> (u16, String, serde_json::Value) {
        read(self.http.get(self.url(path)).send().await.expect("request")).await
    }
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
