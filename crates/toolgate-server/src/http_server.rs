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
//!   (or, over HTTP/2, its answers have waited for a flow-control window) for
//!   [`STALLED_WRITES`]. One waiting on the gateway (a call running) closes after its
//!   answer; meanwhile, every [`ASK_AGAIN`] another is asked. Before, an authenticated
//!   client sending bodies a byte a minute held every place at the cap, and nobody else
//!   was served.
//!
//! Every accepted connection gets `TCP_NODELAY` (see [`crate::tuned`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

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
        let epoch = connections.epoch;
        let service = tower::service_fn({
            let (mut app, open) = (app.clone(), open.clone());
            move |mut request: axum::http::Request<hyper::body::Incoming>| {
                let busy = Busy::new(&open, epoch);
                request.extensions_mut().insert(ConnectInfo(peer));
                let request = request.map(|body| {
                    axum::body::Body::new(Patient::new(body, timeouts.body, &open.close))
                });
                // Always ready: a router needs no `poll_ready`.
                let call = tower::Service::call(&mut app, request);
                async move {
                    let response = call.await?;
                    Ok::<_, Infallible>(response.map(|body| Answering::new(body, busy)))
                }
            }
        });
        let io = Watched {
            tcp,
            open: open.clone(),
            epoch,
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
                        () = open.waiting_on_client(epoch) => {
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

/// The connections open on a server, at most `max`.
///
/// At the cap, a connection just accepted waits while the server asks another to close:
/// the one whose last request began longest ago (a connection that never sent one counts
/// from when it was accepted), among the next [`LOOKED_AT`] not yet asked from where the
/// last search stopped, so that finding one costs the same however many are open. Asked,
/// a connection waiting on its client closes at once; one in a request (a long call, an
/// SSE stream) closes once it is answered, and if none has closed [`ASK_AGAIN`] later the
/// server asks another.
pub struct Connections {
    max: usize,
    epoch: Instant,
    slots: Mutex<Slots>,
    ended: Notify,
    closed_at_cap: AtomicU64,
}

/// How many open connections a search for the one to close looks at.
const LOOKED_AT: usize = 32;

/// How long a connection waiting for room waits for the one asked to close before
/// another is asked: the one asked may be busy for minutes (the oldest request is often
/// a long call or an SSE stream) while others sit idle.
const ASK_AGAIN: Duration = Duration::from_millis(50);

/// How often a connection asked to close looks whether it waits on its client.
const LOOK_AGAIN: Duration = Duration::from_millis(100);

/// How long the writes of a connection asked to close may be blocked (its client reads
/// nothing) before it is dropped, its answer unfinished.
const STALLED_WRITES: Duration = Duration::from_secs(2);

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
    /// Since when its writes have been blocked, in ms since the epoch plus one; 0 if not.
    blocked_ms: AtomicU64,
    asked: AtomicBool,
    /// Cancelled when asked to close.
    close: CancellationToken,
    /// Requests being handled or answered.
    busy: AtomicUsize,
    /// Answers waiting for the connection to take what they have (see [`Answering`]).
    answers_waiting: AtomicUsize,
    /// When an answer was last taken while others waited (or the first began to wait),
    /// in ms since the epoch.
    answers_taken_ms: AtomicU64,
}

impl Open {
    fn began_request(&self, epoch: Instant) {
        self.active_ms.store(millis_since(epoch), Ordering::Relaxed);
    }

    /// Returns once, asked to close, it is seen waiting on its client: not answering a
    /// request (hyper closes an idle one by itself, so one left is part way through a
    /// request's head) nor writing, or with its writes blocked, or its answers waiting
    /// and none taken, for [`STALLED_WRITES`].
    async fn waiting_on_client(&self, epoch: Instant) {
        let stalled_since = |since: u64| {
            Duration::from_millis(millis_since(epoch).saturating_sub(since)) >= STALLED_WRITES
        };
        loop {
            tokio::time::sleep(LOOK_AGAIN).await;
            if self.answers_waiting.load(Ordering::Relaxed) > 0
                && stalled_since(self.answers_taken_ms.load(Ordering::Relaxed))
            {
                return;
            }
            match self.blocked_ms.load(Ordering::Relaxed) {
                0 if self.busy.load(Ordering::Relaxed) == 0 => return,
                0 => {}
                since if stalled_since(since - 1) => return,
                _ => {}
            }
        }
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

    /// Returns once fewer than `max` are open, asking one to close meanwhile, and another
    /// each [`ASK_AGAIN`] none closes.
    async fn room(&self) {
        self.until(|| !self.ask_one_to_close(), Some(ASK_AGAIN))
            .await;
    }

    /// Returns once none is open.
    async fn drained(&self) {
        self.until(|| self.open() == 0, None).await;
    }

    /// Returns once `done`, asked again each time a connection ends, and after `every`
    /// without one (and first at once).
    async fn until(&self, mut done: impl FnMut() -> bool, every: Option<Duration>) {
        loop {
            let ended = self.ended.notified();
            let mut ended = std::pin::pin!(ended);
            // Registered before asking: an end in between still wakes it.
            ended.as_mut().enable();
            if done() {
                return;
            }
            match every {
                Some(every) => _ = tokio::time::timeout(every, ended).await,
                None => ended.await,
            }
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
            open.close.cancel();
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
            blocked_ms: AtomicU64::new(0),
            asked: AtomicBool::new(false),
            close: CancellationToken::new(),
            busy: AtomicUsize::new(0),
            answers_waiting: AtomicUsize::new(0),
            answers_taken_ms: AtomicU64::new(0),
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
/// chunks ends it with an error, and so does its connection being asked to close while
/// it waits for the next. The timer is armed only while the body is pending
/// (tower-http's `RequestBodyTimeout` arms one on every poll, data ready or not: two
/// timer registrations per request on the hot path).
struct Patient<B> {
    body: B,
    timeout: Duration,
    close: CancellationToken,
    /// While pending: the error it ends with if no data comes first.
    waiting: Option<Pin<Box<dyn Future<Output = axum::BoxError> + Send>>>,
}

impl<B> Patient<B> {
    fn new(body: B, timeout: Duration, close: &CancellationToken) -> Self {
        Self {
            body,
            timeout,
            close: close.clone(),
            waiting: None,
        }
    }
}

/// A body chunk that did not come in time.
#[derive(Debug, thiserror::Error)]
#[error("the request body paused longer than the read timeout")]
struct BodyTimedOut;

/// A body still arriving when its connection was asked to close.
#[derive(Debug, thiserror::Error)]
#[error(
    "the gateway is at its connection cap (http.max_connections) and closed this connection while its request body was still arriving"
)]
struct BodyCut;

impl<B> http_body::Body for Patient<B>
where
    B: http_body::Body + Unpin,
    B::Error: Into<axum::BoxError>,
{
    type Data = B::Data;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.waiting = None;
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let (timeout, close) = (this.timeout, &this.close);
        let waiting = this.waiting.get_or_insert_with(|| {
            let close = close.clone();
            Box::pin(async move {
                tokio::select! {
                    () = close.cancelled() => axum::BoxError::from(BodyCut),
                    () = tokio::time::sleep(timeout) => axum::BoxError::from(BodyTimedOut),
                }
            })
        });
        waiting.as_mut().poll(cx).map(|err| Some(Err(err)))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Whether `err` (or what caused it) is a request body cut because its connection was
/// asked to close: the client is told to try again (503), not that it sent a bad request.
pub(crate) fn body_was_cut(err: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(err), |e| e.source()).any(|e| e.is::<BodyCut>())
}

/// A request of a connection being handled or answered: from the call until its answer's
/// body is done with (sent, or dropped with the connection).
struct Busy {
    open: Arc<Open>,
    epoch: Instant,
}

impl Busy {
    fn new(open: &Arc<Open>, epoch: Instant) -> Self {
        open.began_request(epoch);
        open.busy.fetch_add(1, Ordering::Relaxed);
        Self {
            open: open.clone(),
            epoch,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.open.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer's body, its request [`Busy`] until it is done with. It *waits* from when it
/// is made, and from each frame it gives, until the connection asks it for more: an
/// HTTP/2 client that keeps its flow-control window shut blocks no socket write, but
/// leaves its answers waiting (hyper asks a body for data only once it may send it).
struct Answering<B> {
    body: B,
    busy: Busy,
    waiting: bool,
}

impl<B> Answering<B> {
    fn new(body: B, busy: Busy) -> Self {
        let mut answer = Self {
            body,
            busy,
            waiting: false,
        };
        answer.waits();
        answer
    }

    fn waits(&mut self) {
        self.waiting = true;
        let open = &self.busy.open;
        // The first to wait starts the clock; while others are taken it is kept moving.
        if open.answers_waiting.fetch_add(1, Ordering::Relaxed) == 0 {
            open.answers_taken_ms
                .store(millis_since(self.busy.epoch), Ordering::Relaxed);
        }
    }

    fn taken(&mut self) {
        if std::mem::take(&mut self.waiting) {
            let open = &self.busy.open;
            if open.answers_waiting.fetch_sub(1, Ordering::Relaxed) > 1 {
                open.answers_taken_ms
                    .store(millis_since(self.busy.epoch), Ordering::Relaxed);
            }
        }
    }
}

impl<B> Drop for Answering<B> {
    fn drop(&mut self) {
        if self.waiting {
            self.busy
                .open
                .answers_waiting
                .fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Answering<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        self.taken();
        let poll = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = poll {
            self.waits();
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's socket, noting in its [`Open`] since when its writes are blocked.
struct Watched {
    tcp: tokio::net::TcpStream,
    open: Arc<Open>,
    epoch: Instant,
}

impl Watched {
    /// Notes whether a write was blocked, on the blocked path or after one only.
    fn note<T>(&self, poll: Poll<T>) -> Poll<T> {
        let blocked = &self.open.blocked_ms;
        match poll {
            Poll::Pending => {
                if blocked.load(Ordering::Relaxed) == 0 {
                    blocked.store(millis_since(self.epoch) + 1, Ordering::Relaxed);
                }
            }
            Poll::Ready(_) => {
                if blocked.load(Ordering::Relaxed) != 0 {
                    blocked.store(0, Ordering::Relaxed);
                }
            }
        }
        poll
    }
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.tcp).poll_write(cx, buf);
        self.note(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        self.note(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    // Not noted: a TCP stream's flush is ready at once, blocked writes or not.
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
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

    /// A server of `app` with a cap of `max`, stopped by the token.
    fn server(
        max: usize,
        app: Router,
    ) -> (
        std::net::SocketAddr,
        Arc<Connections>,
        CancellationToken,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let listener = TcpListener::from_std(listener).expect("listener");
        let connections = Connections::new(max);
        let timeouts = ReadTimeouts {
            header: Duration::from_secs(30),
            body: Duration::from_secs(30),
        };
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, app, timeouts, connections.clone(), {
            let stop = stop.clone();
            async move { stop.cancelled().await }
        }));
        (addr, connections, stop, server)
    }

    fn routes() -> Router {
        Router::new()
            .route("/", axum::routing::get(|| async { "ok" }))
            .route("/echo", axum::routing::post(|body: String| async { body }))
            .route(
                "/big",
                axum::routing::get(|| async { vec![b'x'; 16 << 20] }),
            )
            .route(
                "/slow",
                axum::routing::get(|| async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    "late"
                }),
            )
    }

    /// A new connection that has sent `bytes`, the server given time to read them.
    async fn sent(addr: std::net::SocketAddr, bytes: &[u8]) -> TcpStream {
        let mut conn = TcpStream::connect(addr).await.expect("connect");
        conn.write_all(bytes).await.expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
        conn
    }

    /// Asserts that the server closes `conn` within 5 s.
    async fn closed(conn: &mut TcpStream, what: &str) {
        let mut buf = [0; 16];
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0))), "{what} is closed: {read:?}");
    }

    /// `GET /` on a new connection is answered within `within`.
    async fn served_within(addr: std::net::SocketAddr, within: Duration) -> TcpStream {
        tokio::time::timeout(within, async {
            let mut conn = TcpStream::connect(addr).await.expect("connect");
            assert!(get(&mut conn).await.ends_with("ok"));
            conn
        })
        .await
        .expect("a new connection is served")
    }

    /// At the cap, a connection whose request body is still arriving goes at once: its
    /// request fails. Before, it held its place until the body came (a byte a minute
    /// would do), and nobody else was served.
    #[tokio::test]
    async fn at_the_cap_a_body_still_arriving_is_cut() {
        let (addr, connections, stop, server) = server(1, routes());
        let head = b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\na";
        let mut slow = sent(addr, head).await;
        let other = served_within(addr, Duration::from_secs(5)).await;
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), slow.read_to_string(&mut answer))
            .await
            .expect("the slow one is answered")
            .expect("read");
        // (The REST API answers it 503; this bare route, axum's 400.)
        assert!(answer.contains("connection cap"), "{answer}");
        assert_eq!(connections.closed_at_cap(), 1);
        stop.cancel();
        drop(other);
        server.await.expect("join");
    }

    /// At the cap, a connection part way through a request's head goes at once.
    #[tokio::test]
    async fn at_the_cap_a_head_still_arriving_is_cut() {
        let (addr, connections, stop, server) = server(1, routes());
        let mut slow = sent(addr, b"GET / HTTP/1.1\r\nhost: x\r\nx-slow: 1").await;
        let other = served_within(addr, Duration::from_secs(5)).await;
        closed(&mut slow, "the slow one").await;
        assert_eq!(connections.closed_at_cap(), 1);
        stop.cancel();
        drop(other);
        server.await.expect("join");
    }

    /// At the cap, a connection whose client reads nothing of its answer goes once its
    /// writes have been blocked for [`STALLED_WRITES`]. Before, it held its place for ever.
    #[tokio::test]
    async fn at_the_cap_a_client_that_reads_nothing_is_dropped() {
        let (addr, _connections, stop, server) = server(1, routes());
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket.set_recv_buffer_size(4096).expect("rcvbuf");
        let mut deaf = socket.connect(addr).await.expect("connect");
        deaf.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let other = served_within(addr, STALLED_WRITES + Duration::from_secs(5)).await;
        stop.cancel();
        drop((deaf, other));
        server.await.expect("join");
    }

    /// At the cap, an HTTP/2 connection whose client keeps its streams' flow-control
    /// window shut (it blocks no socket write: the answer waits in the server) goes once
    /// its answer has waited [`STALLED_WRITES`].
    #[tokio::test]
    async fn at_the_cap_an_http2_client_that_takes_nothing_is_dropped() {
        let (addr, _connections, stop, server) = server(1, routes());
        let tcp = TcpStream::connect(addr).await.expect("connect");
        let (mut h2, connection) = h2::client::Builder::new()
            .initial_window_size(0)
            .handshake::<_, axum::body::Bytes>(tcp)
            .await
            .expect("handshake");
        let driver = tokio::spawn(connection);
        let request = axum::http::Request::get(format!("http://{addr}/big"))
            .body(())
            .expect("request");
        let (answer, _) = h2.send_request(request, true).expect("send");
        let head = answer.await.expect("the head of the answer");
        assert_eq!(head.status(), 200);
        let other = served_within(addr, STALLED_WRITES + Duration::from_secs(5)).await;
        stop.cancel();
        drop((head, other, h2));
        driver.abort();
        server.await.expect("join");
    }

    /// At the cap, the one asked to close may be busy for long (its request the oldest):
    /// if it has not closed [`ASK_AGAIN`] later, another is asked, here one idle since.
    /// Before, the new connection waited for the long call.
    #[tokio::test]
    async fn at_the_cap_an_idle_connection_goes_before_an_older_busy_one() {
        let (addr, connections, stop, server) = server(2, routes());
        let busy = sent(addr, b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n").await;
        let mut idle = served_within(addr, Duration::from_secs(5)).await;
        let third = served_within(addr, Duration::from_secs(5)).await;
        closed(&mut idle, "the idle one").await;
        assert_eq!(
            connections.closed_at_cap(),
            2,
            "the busy one, then the idle one"
        );
        stop.cancel();
        drop((busy, third));
        server.abort();
    }

    /// At the cap, the connection idle longest goes: here one that never sent a request,
    /// not the one that sent its request since.
    #[tokio::test]
    async fn at_the_cap_the_connection_idle_longest_is_closed() {
        let (addr, connections, stop, server) = server(2, routes());
        let mut idle = sent(addr, b"").await;
        let mut busy = TcpStream::connect(addr).await.expect("connect");
        assert!(get(&mut busy).await.ends_with("ok"));
        let mut third = TcpStream::connect(addr).await.expect("connect");
        assert!(get(&mut third).await.ends_with("ok"), "the third is served");

        closed(&mut idle, "the idle one").await;
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
