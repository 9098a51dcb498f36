//! Request ids and the per-request observe layer.
//!
//! Every request gets an id: the caller's `x-request-id` when it is sane (1–128 visible
//! ASCII characters), otherwise a new UUIDv7. The id is returned in `x-request-id`,
//! carried in the `request` span, put in problem bodies, and handed to the executor in the
//! call context. A hand-written tower layer rather than `middleware::from_fn`: it runs on
//! every request, and `from_fn` clones a boxed service per call.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderName, HeaderValue};
use axum::response::Response;
use tower::{Layer, Service};
use tracing::Instrument;

/// What the observe middleware logs for a 5xx: the internal cause.
#[derive(Clone, Debug)]
pub struct InternalCause(pub std::sync::Arc<str>);

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

tokio::task_local! {
    static REQUEST_ID: RequestId;
}

/// The id of the request being served on this task, if any.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(|id| id.0.to_string()).ok()
}

/// The request's id, in the request extensions. Cheap to clone.
#[derive(Clone, Debug)]
pub struct RequestId(pub Arc<str>);

fn accept(header: &HeaderValue) -> Option<Arc<str>> {
    let s = header.to_str().ok()?;
    ((1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())).then(|| s.into())
}

/// Assigns the request id, opens the request span, and logs the outcome: internal
/// failures with their cause as errors, everything else at debug level (client mistakes
/// are not the gateway's errors).
#[derive(Clone, Copy, Debug, Default)]
pub struct ObserveLayer;

impl<S> Layer<S> for ObserveLayer {
    type Service = Observe<S>;

    fn layer(&self, inner: S) -> Observe<S> {
        Observe { inner }
    }
}

#[derive(Clone, Debug)]
pub struct Observe<S> {
    inner: S,
}

impl<S> Service<Request> for Observe<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        let id = req
            .headers()
            .get(&X_REQUEST_ID)
            .and_then(accept)
            .unwrap_or_else(|| uuid::Uuid::now_v7().hyphenated().to_string().into());
        // Debug level: at the default `info` the per-call `call.finished` line carries the
        // request id itself, so plain requests cost no span bookkeeping.
        let span = tracing::debug_span!(
            "request",
            method = %req.method(),
            route = req.extensions().get::<MatchedPath>().map(MatchedPath::as_str),
            request_id = %id,
        );
        let id = RequestId(id);
        req.extensions_mut().insert(id.clone());
        let server = server_span(&mut req);
        let started = Instant::now();
        let future = self.inner.call(req);
        Box::pin(async move {
            let header = HeaderValue::from_str(&id.0);
            let mut response = match REQUEST_ID.scope(id, future).instrument(span.clone()).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let status = response.status().as_u16();
            if !server.is_disabled() {
                server.record("http.response.status_code", i64::from(status));
                if status >= 500 {
                    toolgate_core::context::span_failed(&server, &status.to_string());
                }
                drop(server);
            }
            let _enter = span.enter();
            let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
            // Only a failure inside the gateway is an error; an upstream failure or a
            // deadline is the call's outcome, already in its `call.finished` line.
            match response.extensions().get::<InternalCause>() {
                Some(cause) => {
                    tracing::error!(status, latency_ms, error = %cause.0, "request failed")
                }
                None => tracing::debug!(status, latency_ms, "request finished"),
            }
            if let Ok(value) = header {
                response.headers_mut().insert(X_REQUEST_ID.clone(), value);
            }
            Ok(response)
        })
    }
}

/// The HTTP server span of a REST request (`{method} {route}`, HTTP semantic
/// conventions), continuing the caller's `traceparent`. The span the request's calls
/// continue goes into its extensions ([`Continued`](toolgate_core::context::Continued)):
/// this span, an unrecorded one when the sampler skips the trace, or the caller's own
/// when traces are not exported. `/mcp` has its own server span (`crate::mcp`). No span
/// when traces are not exported: then only a `traceparent` header is read, if sent.
fn server_span(req: &mut Request) -> tracing::Span {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(MatchedPath::as_str);
    if route == Some("/mcp") {
        return tracing::Span::none();
    }
    use toolgate_core::context::{Continued, Root, root, set_remote_parent};
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    let parent = match root(traceparent) {
        Root::Recorded(parent) => parent,
        Root::Off(None) => return tracing::Span::none(),
        Root::Off(Some(continued)) | Root::Skipped(continued) => {
            req.extensions_mut().insert(continued);
            return tracing::Span::none();
        }
    };
    let span = tracing::info_span!(
        target: "toolgate::otel",
        "http",
        otel.name = tracing::field::Empty,
        otel.kind = "server",
        http.request.method = %req.method(),
        http.route = route,
        url.path = req.uri().path(),
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if span.is_disabled() {
        return span;
    }
    span.record(
        "otel.name",
        format!("{} {}", req.method(), route.unwrap_or("")).trim_end(),
    );
    set_remote_parent(&span, parent);
    if let Some(continued) = Continued::exported(&span) {
        req.extensions_mut().insert(continued);
    }
    span
}
