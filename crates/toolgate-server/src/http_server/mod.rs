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
//!   one before, else the request fails (a client error) and the connection ends;
//! - at most `http.max_connections` connections are open at once ([`Connections`]): at
//!   the cap, the one whose last request began longest ago is asked to close before the
//!   one just accepted is served. Without a cap, anyone who could open connections (no
//!   credentials needed) used up the process's file descriptors: no connection was
//!   accepted, and no file, socket or pipe opened, until they let go.
//! - a connection asked to close that is waiting on its client goes at once: idle, part
//!   way through a request's head, or part way through its body (the request fails).
//!   One whose client does not read its answer goes once its writes have been blocked
//!   (or, over HTTP/2, its answers have waited for a flow-control window) for 2 s
//!   (`STALLED_WRITES`). A long-lived stream (SSE, marked [`Interruptible`]) ends between
//!   two events, and its client reconnects. One waiting on the gateway (a call running)
//!   closes after its answer; meanwhile, every 50 ms (`ASK_AGAIN`) another is asked.
//!   Before, a client sending a body a byte a minute, a head part way, reading nothing,
//!   or following a stream held its place at the cap, and enough of them locked everyone
//!   else out.
//!
//! `connections` keeps the open connections and the cap; `progress` the request
//! bodies, answers and sockets that note how a connection's requests progress.
//!
//! Every accepted connection gets `TCP_NODELAY` (see [`crate::tuned`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

mod bodies;
mod connections;
mod progress;
#[cfg(test)]
mod tests;

pub use bodies::BodyBytes;
pub(crate) use bodies::{BodyCharge, OverBudget, over_budget};
pub use connections::Connections;
use progress::{Answering, Busy, Patient, Watched};
pub(crate) use progress::{Interruptible, body_was_cut};

/// How long a client may take to send a request's head, and between two body chunks.
#[derive(Clone, Copy, Debug)]
pub struct ReadTimeouts {
    pub header: Duration,
    pub body: Duration,
}

/// Serves `app` on `listener` until `shutdown` completes, then waits for the open
/// connections to finish their requests (the caller bounds that wait). A listener given
/// by value is closed first, so new connections are refused during that wait; one lent
/// stays open for its owner's next server. At most `connections`' cap are open at once;
/// the same `connections` may serve one server after another. Request bodies are held
/// within `bodies`.
pub async fn serve(
    listener: impl std::borrow::Borrow<TcpListener>,
    app: Router,
    timeouts: ReadTimeouts,
    connections: Arc<Connections>,
    bodies: Arc<BodyBytes>,
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
    let stop = CancellationToken::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let mut failed_accepts = FailedAccepts::default();
    loop {
        let (mut tcp, peer) = tokio::select! {
            accepted = listener.borrow().accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: pause rather than spin.
                    failed_accepts.warn(&err);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // At the cap, this one waits (its descriptor the only one over) while another goes.
        tokio::select! {
            () = connections.room() => {}
            () = &mut shutdown => break,
        }
        crate::nodelay(&mut tcp);
        let (admitted, open) = connections.admit();
        let service = tower::service_fn({
            let (mut app, open, bodies) = (app.clone(), open.clone(), bodies.clone());
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                let charge = BodyCharge::new(&bodies);
                let busy = Busy::new(&open, charge.clone());
                request.extensions_mut().insert(ConnectInfo(peer));
                request.extensions_mut().insert(charge.clone());
                let request = request.map(|body| {
                    axum::body::Body::new(Patient::new(body, timeouts.body, &open.close, charge))
                });
                // Always ready: a router needs no `poll_ready`.
                let call = tower::Service::call(&mut app, request);
                async move {
                    let response = call.await?;
                    let interruptible = response.extensions().get::<Interruptible>().is_some();
                    Ok::<_, Infallible>(
                        response.map(|body| Answering::new(body, busy, interruptible)),
                    )
                }
            }
        });
        let io = Watched {
            tcp,
            open: open.clone(),
        };
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service))
            .into_owned();
        let stop = stop.clone();
        tokio::spawn(async move {
            // Its place is given back however the task ends, a panic included.
            let _admitted = admitted;
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => Some(ended),
                () = open.close.cancelled() => None,
                () = stop.cancelled() => None,
            };
            // Asked to close: at once when idle (hyper closes it) or waiting on its client
            // (a body arriving fails, see `Patient`; a head arriving or writes blocked:
            // dropped), else once its request is answered.
            let ended = match ended {
                Some(ended) => ended,
                None => {
                    connection.as_mut().graceful_shutdown();
                    tokio::select! {
                        ended = connection.as_mut() => ended,
                        () = open.waiting_on_client() => {
                            tracing::debug!(%peer, "dropped a connection waiting on its client");
                            return;
                        }
                    }
                }
            };
            if let Err(err) = ended {
                tracing::trace!(error = %err, %peer, "connection ended with an error");
            }
        });
    }
    drop(listener);
    stop.cancel();
    connections.drained().await;
}

/// Connections that could not be accepted, told at most once per [`FailedAccepts::EVERY`]:
/// out of file descriptors, the accept loop retries every 50 ms, and warned 20 times a
/// second for as long as it lasted.
#[derive(Default)]
struct FailedAccepts {
    told: Option<std::time::Instant>,
    since: u64,
}

impl FailedAccepts {
    const EVERY: Duration = Duration::from_secs(10);

    fn warn(&mut self, err: &std::io::Error) {
        self.since += 1;
        if self.told.is_some_and(|t| t.elapsed() < Self::EVERY) {
            return;
        }
        tracing::warn!(
            error = %err,
            failed = self.since,
            "could not accept a connection (failures since last told)"
        );
        self.told = Some(std::time::Instant::now());
        self.since = 0;
    }
}
