//! The baseline for the REST benchmark: a bare axum handler doing the same JSON echo as
//! `POST /v1/tools/echo/invoke` (parse `{"arguments": {"message"}}`, answer with the same
//! response shape), with TCP_NODELAY like the gateway, and nothing else.
//!
//! Usage: `bare-echo ADDR` (e.g. `127.0.0.1:18081`); prints `listening ADDR` when ready.

use std::time::Instant;

use axum::serve::ListenerExt;
use axum::{Json, Router, routing::post};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The same allocator as the gateway, so the ratio measures the gateway's work, not malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Deserialize)]
struct Request {
    arguments: Arguments,
}

#[derive(Deserialize)]
struct Arguments {
    message: String,
}

#[derive(Serialize)]
struct Response {
    call_id: String,
    content: Vec<Value>,
    structured: Value,
    duration_ms: f64,
    truncated: bool,
}

async fn echo(Json(req): Json<Request>) -> Json<Response> {
    let started = Instant::now();
    let message = req.arguments.message;
    Json(Response {
        call_id: uuid::Uuid::now_v7().to_string(),
        content: vec![json!({"type": "text", "text": message})],
        structured: json!({ "message": message }),
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        truncated: false,
    })
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:18081".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening {}", listener.local_addr()?);
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let app = Router::new().route("/v1/tools/echo/invoke", post(echo));
    axum::serve(listener, app).await
}
