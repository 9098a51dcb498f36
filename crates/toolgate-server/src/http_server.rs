//! The HTTP server loop: what `axum::serve` does (HTTP/1 and HTTP/2, upgrades, graceful
//! shutdown, the peer address as `ConnectInfo`), plus the read timeouts it leaves unset.
//!
//! Without them a client that sends a request head one byte a minute (slowloris), or a
//! body that never arrives, holds its connection — and on `/mcp` a session's resources —
//! for ever. Here:
//! - the request head must arrive within `http.header_read_timeout_secs` of the
//!   connection being ready for it (a new connection, or an idle keep-alive one), else
//!   the connection is closed;
//! - each chunk of a request body must arrive within `http.body_read_timeout_secs` of the
//!   one before, else the request fails (a client error) and the connection ends.
//!
//! Every accepted connection gets `TCP_NODELAY` (see [`crate::tuned`]).

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

/// How long a client may take to send a request's head, and between two body chunks.
#[derive(Clone, Copy, Debug)]
pub struct ReadTimeouts {
    pub header: Duration,
    pub body: Duration,
}

/// Serves `app` on `listener` until `shutdown` completes, then waits for the open
/// connections to finish their requests (the caller bounds that wait). A listener given
/// by value is closed first, so new connections are refused during that wait; one lent
/// stays open for its owner's next server.
pub async fn serve(
    listener: impl std::borrow::Borrow<TcpListener>,
    app: Router,
    timeouts: ReadTimeouts,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header);
    builder
        .http2()
        .timer(TokioTimer::new())
        .enable_connect_protocol();
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (mut tcp, peer) = tokio::select! {
            accepted = listener.borrow().accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    tracing::warn!(error = %err, "could not accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        crate::nodelay(&mut tcp);
        let service = app
            .clone()
            .map_request(move |mut request: axum::http::Request<_>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request.map(|body| axum::body::Body::new(Patient::new(body, timeouts.body)))
            })
            .map_err(|never: Infallible| match never {});
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), TowerToHyperService::new(service))
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::trace!(error = %err, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// A request body that must keep coming: a pause longer than `timeout` between two
/// chunks ends it with an error. The timer is armed only while the body is pending
/// (tower-http's `RequestBodyTimeout` arms one on every poll, data ready or not: two
/// timer registrations per request on the hot path).
struct Patient<B> {
    body: B,
    timeout: Duration,
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl<B> Patient<B> {
    fn new(body: B, timeout: Duration) -> Self {
        Self {
            body,
            timeout,
            sleep: None,
        }
    }
}

/// A body chunk that did not come in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body paused longer than the read timeout")]
struct BodyTimedOut;

impl<B> http_body::Body for Patient<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = B::Data;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        use std::future::Future;
        use std::task::Poll;
        let this = &mut *self;
        if let Poll::Ready(frame) = std::pin::Pin::new(&mut this.body).poll_frame(cx) {
            this.sleep = None;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let timeout = this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if sleep.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
