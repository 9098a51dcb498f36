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
use tower_http::timeout::RequestBodyTimeoutLayer;

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
    let app = app.layer(RequestBodyTimeoutLayer::new(timeouts.body));
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
        let (tcp, peer) = tokio::select! {
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
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::warn!(error = %err, "could not set TCP_NODELAY");
        }
        let service = app
            .clone()
            .map_request(move |mut request: axum::http::Request<_>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request.map(axum::body::Body::new)
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
