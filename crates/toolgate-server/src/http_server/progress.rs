//! How a connection's requests and answers progress: a request body that must keep
//! coming, an answer whose body notes when it waits to be taken, a socket that notes when
//! its writes block.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::bodies::BodyCharge;
use super::connections::Open;

/// A request body that must keep coming: a pause longer than `timeout` between two
/// chunks ends it with an error, and so does its connection being asked to close while
/// it waits for the next. The timer is armed only while the body is pending
/// (tower-http's `RequestBodyTimeout` arms one on every poll, data ready or not: two
/// timer registrations per request on the hot path).
/// Each chunk's bytes are taken from the server's [`BodyBytes`](super::BodyBytes) as it
/// arrives; refused, the body ends with that error.
pub(super) struct Patient<B> {
    body: B,
    timeout: Duration,
    close: CancellationToken,
    charge: BodyCharge,
    /// While pending: the error it ends with if no data comes first.
    waiting: Option<Pin<Box<dyn Future<Output = axum::BoxError> + Send>>>,
}

impl<B> Patient<B> {
    pub(super) fn new(
        body: B,
        timeout: Duration,
        close: &CancellationToken,
        charge: BodyCharge,
    ) -> Self {
        Self {
            body,
            timeout,
            close: close.clone(),
            charge,
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
            if let Some(Ok(frame)) = &frame
                && let Some(data) = frame.data_ref()
                && let Err(refused) = this.charge.take(hyper::body::Buf::remaining(data))
            {
                return Poll::Ready(Some(Err(refused.into())));
            }
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
    toolgate_core::error::cause::<BodyCut>(err).is_some()
}

/// A request of a connection being handled or answered: from the call until its answer's
/// body is done with (sent, or dropped with the connection). Its body's bytes are held
/// that long.
pub(super) struct Busy {
    open: Arc<Open>,
    _body: BodyCharge,
}

impl Busy {
    pub(super) fn new(open: &Arc<Open>, charge: BodyCharge) -> Self {
        open.began_request();
        open.busy.fetch_add(1, Ordering::Relaxed);
        Self {
            open: open.clone(),
            _body: charge,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.open.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An answer that may end between two of its frames when its connection is asked to
/// close: a long-lived stream (SSE), whose client reconnects. Put in a response's
/// extensions by what makes it. Without it, a stream held its connection's place at the
/// cap for as long as it was followed, and enough streams locked everyone else out.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Interruptible;

/// An answer's body, its request [`Busy`] until it is done with. It *waits* from when it
/// is made, and from each frame it gives, until the connection asks it for more: an
/// HTTP/2 client that keeps its flow-control window shut blocks no socket write, but
/// leaves its answers waiting (hyper asks a body for data only once it may send it).
pub(super) struct Answering<B> {
    body: B,
    busy: Busy,
    waiting: bool,
    /// For an [`Interruptible`] answer: its connection asked to close.
    asked: Option<Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>>,
}

impl<B> Answering<B> {
    /// `interruptible`: the body ends (cleanly, between two frames) once its connection
    /// is asked to close.
    pub(super) fn new(body: B, busy: Busy, interruptible: bool) -> Self {
        let asked = interruptible.then(|| Box::pin(busy.open.close.clone().cancelled_owned()));
        let mut answer = Self {
            body,
            busy,
            waiting: false,
            asked,
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
                .store(open.now_ms(), Ordering::Relaxed);
        }
    }

    fn taken(&mut self) {
        if std::mem::take(&mut self.waiting) {
            let open = &self.busy.open;
            if open.answers_waiting.fetch_sub(1, Ordering::Relaxed) > 1 {
                open.answers_taken_ms
                    .store(open.now_ms(), Ordering::Relaxed);
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
        if let Some(asked) = &mut self.asked
            && asked.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(None);
        }
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
pub(super) struct Watched {
    pub(super) tcp: tokio::net::TcpStream,
    pub(super) open: Arc<Open>,
}

impl Watched {
    /// Notes whether a write was blocked, on the blocked path or after one only.
    fn note<T>(&self, poll: Poll<T>) -> Poll<T> {
        let blocked = &self.open.blocked_ms;
        match poll {
            Poll::Pending => {
                if blocked.load(Ordering::Relaxed) == 0 {
                    blocked.store(self.open.now_ms() + 1, Ordering::Relaxed);
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
