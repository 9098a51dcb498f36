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
//!   the cap, the one whose last request began longest ago is asked to close (at once if
//!   idle, else after its request) before the one just accepted is served. Without a cap, anyone
//!   who could open connections (no credentials needed) used up the process's file
//!   descriptors: no connection was accepted, and no file, socket or pipe opened, until
//!   they let go.
//!
//! Every accepted connection gets `TCP_NODELAY` (see [`crate::tuned`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
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
/// stays open for its owner's next server. At most `connections`' cap are open at once;
/// the same `connections` may serve one server after another.
pub async fn serve(
    listener: impl std::borrow::Borrow<TcpListener>,
    app: Router,
    timeouts: ReadTimeouts,
    connections: Arc<Connections>,
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
        // At the cap, this one waits (its descriptor the only one over) while another goes.
        tokio::select! {
            () = connections.room() => {}
            () = &mut shutdown => break,
        }
        crate::nodelay(&mut tcp);
        let (admitted, open) = connections.admit();
        let service = app
            .clone()
            .map_request({
                let (open, epoch) = (open.clone(), connections.epoch);
                move |mut request: axum::http::Request<_>| {
                    open.began_request(epoch);
                    request.extensions_mut().insert(ConnectInfo(peer));
                    request.map(|body| axum::body::Body::new(Patient::new(body, timeouts.body)))
                }
            })
            .map_err(|never: Infallible| match never {});
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(tcp), TowerToHyperService::new(service))
            .into_owned();
        let stop = stop.clone();
        tokio::spawn(async move {
            // Its place is given back however the task ends, a panic included.
            let _admitted = admitted;
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => Some(ended),
                () = open.close.notified() => None,
                () = stop.cancelled() => None,
            };
            // Asked to close: at once when idle, else once its request is answered.
            let ended = match ended {
                Some(ended) => ended,
                None => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
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

/// The connections open on a server, at most `max`.
///
/// At the cap, a connection just accepted waits while the server asks another to close:
/// the one whose last request began longest ago (a connection that never sent one counts
/// from when it was accepted), among the next [`LOOKED_AT`] not yet asked from where the
/// last search stopped, so that finding one costs the same however many are open. Asked,
/// an idle connection closes at once; one in a request (a long call, an SSE stream)
/// closes once it is answered, and the server asks another.
pub struct Connections {
    max: usize,
    epoch: Instant,
    slots: Mutex<Slots>,
    ended: Notify,
    closed_at_cap: AtomicU64,
}

/// How many open connections a search for the one to close looks at.
const LOOKED_AT: usize = 32;

#[derive(Default)]
struct Slots {
    open: Vec<Option<Arc<Open>>>,
    free: Vec<usize>,
    cursor: usize,
}

impl Slots {
    /// How many are taken.
    fn len(&self) -> usize {
        self.open.len() - self.free.len()
    }
}

/// One open connection.
struct Open {
    /// When its last request began (or it was accepted), in ms since the epoch.
    active_ms: AtomicU64,
    asked: AtomicBool,
    close: Notify,
}

impl Open {
    fn began_request(&self, epoch: Instant) {
        self.active_ms.store(millis_since(epoch), Ordering::Relaxed);
    }
}

fn millis_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Connections {
    /// At most `max` (at least one) open at once.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            epoch: Instant::now(),
            slots: Mutex::default(),
            ended: Notify::new(),
            closed_at_cap: AtomicU64::new(0),
        })
    }

    /// How many are open now.
    pub fn open(&self) -> usize {
        self.slots().len()
    }

    /// How many the server has asked to close to make room for another, so far.
    pub fn closed_at_cap(&self) -> u64 {
        self.closed_at_cap.load(Ordering::Relaxed)
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns once fewer than `max` are open, asking one to close meanwhile.
    async fn room(&self) {
        self.until(|| !self.ask_one_to_close()).await;
    }

    /// Returns once none is open.
    async fn drained(&self) {
        self.until(|| self.open() == 0).await;
    }

    /// Returns once `done`, asked again each time a connection ends (and first at once).
    async fn until(&self, mut done: impl FnMut() -> bool) {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            // Registered before asking: an end in between still wakes it.
            ended.as_mut().enable();
            if done() {
                return;
            }
            ended.await;
        }
    }

    /// At the cap, asks the connection idle longest (of those looked at, and not asked
    /// before) to close; whether the cap was reached.
    fn ask_one_to_close(&self) -> bool {
        let mut slots = self.slots();
        if slots.len() < self.max {
            return false;
        }
        let n = slots.open.len();
        let (mut idlest, mut looked_at, mut i) = (None::<&Arc<Open>>, 0, 0);
        while looked_at < LOOKED_AT && i < n {
            if let Some(open) = &slots.open[(slots.cursor + i) % n]
                && !open.asked.load(Ordering::Relaxed)
            {
                looked_at += 1;
                let active = |o: &Open| o.active_ms.load(Ordering::Relaxed);
                if idlest.is_none_or(|o| active(open) < active(o)) {
                    idlest = Some(open);
                }
            }
            i += 1;
        }
        if let Some(open) = idlest {
            open.asked.store(true, Ordering::Relaxed);
            open.close.notify_one();
            let asked = self.closed_at_cap.fetch_add(1, Ordering::Relaxed) + 1;
            if asked.is_power_of_two() {
                tracing::warn!(
                    max = self.max,
                    asked,
                    "at the connection cap (http.max_connections): closing the connections idle longest"
                );
            }
        }
        slots.cursor = (slots.cursor + i) % n;
        true
    }

    fn admit(self: &Arc<Self>) -> (Admitted, Arc<Open>) {
        let open = Arc::new(Open {
            active_ms: AtomicU64::new(millis_since(self.epoch)),
            asked: AtomicBool::new(false),
            close: Notify::new(),
        });
        let mut slots = self.slots();
        let slot = match slots.free.pop() {
            Some(slot) => {
                slots.open[slot] = Some(open.clone());
                slot
            }
            None => {
                slots.open.push(Some(open.clone()));
                slots.open.len() - 1
            }
        };
        drop(slots);
        let admitted = Admitted {
            connections: self.clone(),
            slot,
        };
        (admitted, open)
    }
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

/// An open connection's place among [`Connections`], given back when dropped.
struct Admitted {
    connections: Arc<Connections>,
    slot: usize,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut slots = self.connections.slots();
        slots.open[self.slot] = None;
        slots.free.push(self.slot);
        drop(slots);
        self.connections.ended.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    async fn get(conn: &mut TcpStream) -> String {
        conn.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let mut buf = vec![0; 1024];
        let n = conn.read(&mut buf).await.expect("read");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    /// At the cap, the connection idle longest goes: here one that never sent a request,
    /// not the one that sent its request since.
    #[tokio::test]
    async fn at_the_cap_the_connection_idle_longest_is_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let connections = Connections::new(2);
        let timeouts = ReadTimeouts {
            header: Duration::from_secs(30),
            body: Duration::from_secs(30),
        };
        let app = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, timeouts, connections.clone(), {
            let stop = stop.clone();
            async move { stop.cancelled().await }
        }));

        let mut idle = TcpStream::connect(addr).await.expect("connect");
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut busy = TcpStream::connect(addr).await.expect("connect");
        assert!(get(&mut busy).await.ends_with("ok"));
        let mut third = TcpStream::connect(addr).await.expect("connect");
        assert!(get(&mut third).await.ends_with("ok"), "the third is served");

        let mut buf = [0; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf)).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "the idle one is closed: {read:?}"
        );
        let again = get(&mut busy).await;
        assert!(again.ends_with("ok"), "the busy one stays: {again:?}");
        assert_eq!(connections.closed_at_cap(), 1);
        assert_eq!(connections.open(), 2);

        stop.cancel();
        drop((busy, third));
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the server drains")
            .expect("join");
        assert_eq!(connections.open(), 0);
    }
}
