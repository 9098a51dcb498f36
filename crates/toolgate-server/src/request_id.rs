//! Request ids and the per-request observe middleware.
//!
//! Every request gets an id: the caller's `x-request-id` when it is sane (1–128 visible
//! ASCII characters), otherwise a new UUIDv7. The id is returned in `x-request-id`,
//! carried in the `request` span (and so into every event below it), put in problem
//! bodies, and handed to the executor in the call context.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use crate::rest::error::InternalCause;

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The id of the request being served on this task, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// The request's id, as an extractor-free extension.
#[derive(Clone, Debug)]
pub struct RequestId(pub String);

fn accept(header: &HeaderValue) -> Option<String> {
    let s = header.to_str().ok()?;
    ((1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())).then(|| s.to_owned())
}

/// Assigns the request id, opens the request span, and logs the outcome: 5xx with their
/// internal cause as errors, everything else at debug level (client mistakes are not
/// the gateway's errors).
pub async fn observe(mut req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(accept)
        .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let span = tracing::info_span!("request", method = %req.method(), route, request_id = %id);
    req.extensions_mut().insert(RequestId(id.clone()));
    let started = Instant::now();
    let mut response = REQUEST_ID
        .scope(id.clone(), next.run(req))
        .instrument(span.clone())
        .await;
    let _enter = span.enter();
    let status = response.status().as_u16();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    if response.status().is_server_error() {
        let cause = response
            .extensions()
            .get::<InternalCause>()
            .map(|c| c.0.clone());
        tracing::error!(
            status,
            latency_ms,
            error = cause.as_deref().unwrap_or(""),
            "request failed"
        );
    } else {
        tracing::debug!(status, latency_ms, "request finished");
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID.clone(), value);
    }
    response
}
