//! Connecting to an upstream: a child process over stdio (its output capped until it
//! has initialized, its stderr logged) or Streamable HTTP (traced, no redirects), and
//! the MCP handshake.

use super::*;

pub(super) async fn connect(
    config: &UpstreamConfig,
    routes: Arc<Routes>,
    list_changed: tokio::sync::mpsc::Sender<()>,
    catalog: Arc<Catalog>,
) -> Result<
    (
        RunningService<RoleClient, Handler>,
        Option<tokio::process::Child>,
    ),
    String,
> {
    // Sampling is deprecated by SEP-2577 (2026-07-28); upstreams before it still use it.
    #[allow(deprecated)]
    let handler = Handler {
        // Sampling and elicitation are relayed to the calling client, when it can answer.
        info: ClientConfig::new(
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .build(),
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        ),
        routes: routes.clone(),
        list_changed,
        catalog,
        owner: config.owner,
        upstream: config.name.clone(),
    };
    match &config.transport {
        UpstreamTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).env_clear().envs(env);
            if !env.contains_key("PATH")
                && let Some(path) = std::env::var_os("PATH")
            {
                cmd.env("PATH", path);
            }
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true);
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("cannot start {command:?}: {e}"))?;
            if let Some(stderr) = child.stderr.take() {
                log_stderr(config.name.clone(), stderr);
            }
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                return Err("the child's stdio was not piped".into());
            };
            let budget = Arc::new(std::sync::atomic::AtomicU64::new(
                MAX_BYTES_BEFORE_INITIALIZE,
            ));
            let stdout = Capped {
                inner: stdout,
                left: budget.clone(),
            };
            let transport = Relaying::new(
                AsyncRwTransport::new_client(stdout, stdin),
                routes,
                &config.name,
            );
            let service = tokio::time::timeout(INITIALIZE_TIMEOUT, handler.serve(transport))
                .await
                .map_err(|_| format!("no answer to initialize within {INITIALIZE_TIMEOUT:?}"))?
                .map_err(|e| format!("initialize failed: {e}"))?;
            // Initialized: from now on the upstream may write as much as its results need.
            budget.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
            Ok((service, Some(child)))
        }
        UpstreamTransport::Http {
            url,
            headers,
            bearer,
            client,
        } => {
            let mut http = StreamableHttpClientTransportConfig::with_uri(url.as_str());
            if let Some(token) = bearer {
                http = http.auth_header(token.clone());
            }
            for (name, value) in headers {
                let name = http::HeaderName::try_from(name.as_str())
                    .map_err(|e| format!("header {name:?}: {e}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|e| format!("header {name}: {e}"))?;
                http.custom_headers.insert(name, value);
            }
            let service = tokio::time::timeout(
                INITIALIZE_TIMEOUT,
                handler.serve(Relaying::new(
                    StreamableHttpClientTransport::with_client(
                        Traced(client.clone().unwrap_or_else(operator_client)),
                        http,
                    ),
                    routes,
                    &config.name,
                )),
            )
            .await
            .map_err(|_| format!("no answer to initialize within {INITIALIZE_TIMEOUT:?}"))?
            .map_err(|e| initialize_failure(&e))?;
            Ok((service, None))
        }
    }
}

/// Why `initialize` failed over HTTP, down to the socket: rmcp's error ends its `source()`
/// chain at the HTTP client's error (its `Client(E)` is not marked as a source), so
/// "error sending request" would reach the operator without "connection refused".
pub(super) fn initialize_failure(err: &rmcp::service::ClientInitializeError) -> String {
    use std::error::Error as _;
    let mut text = format!("initialize failed: {}", toolgate_core::error::chain(err));
    if let rmcp::service::ClientInitializeError::TransportError { error, .. } = err
        && let Some(rmcp::transport::streamable_http_client::StreamableHttpError::Client(http)) =
            error.error.downcast_ref::<rmcp::transport::streamable_http_client::StreamableHttpError<reqwest::Error>>()
        && let Some(cause) = http.source()
    {
        text.push_str(" (");
        text.push_str(&toolgate_core::error::chain(cause));
        text.push(')');
    }
    text
}

/// An HTTP client for upstream MCP servers that sends a tool call's W3C trace context
/// (its `_meta.traceparent`, set by [`UpstreamTool`]) as the `traceparent` header too, so
/// HTTP-level tracing on the upstream's side joins the caller's trace.
#[derive(Clone)]
pub(super) struct Traced(reqwest::Client);

impl Traced {
    pub(super) fn with_trace(
        message: &rmcp::model::ClientJsonRpcMessage,
        mut headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> HashMap<http::HeaderName, http::HeaderValue> {
        use rmcp::model::RequestParamsMeta;
        if let rmcp::model::JsonRpcMessage::Request(request) = message
            && let ClientRequest::CallToolRequest(call) = &request.request
            && let Some(value) = call
                .params
                .traceparent()
                .and_then(|t| http::HeaderValue::from_str(t).ok())
        {
            headers.insert(http::HeaderName::from_static("traceparent"), value);
        }
        headers
    }
}

impl rmcp::transport::streamable_http_client::StreamableHttpClient for Traced {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<
        rmcp::transport::streamable_http_client::StreamableHttpPostResponse,
        rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>,
    > {
        let headers = Self::with_trace(&message, custom_headers);
        self.0
            .post_message(uri, message, session_id, auth_header, headers)
            .await
    }

    async fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: rmcp::model::ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<
        rmcp::transport::streamable_http_client::StreamableHttpPostResponse,
        rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>,
    > {
        let headers = Self::with_trace(&message, custom_headers);
        self.0
            .post_message_with_max_sse_event_size(
                uri,
                message,
                session_id,
                auth_header,
                headers,
                max_sse_event_size,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<(), rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>> {
        self.0
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<http::HeaderName, http::HeaderValue>,
    ) -> Result<
        futures::stream::BoxStream<'static, Result<sse_stream::Sse, sse_stream::Error>>,
        rmcp::transport::streamable_http_client::StreamableHttpError<Self::Error>,
    > {
        self.0
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }
}

/// A child's stdout that fails once more than its budget has been read (see
/// [`MAX_BYTES_BEFORE_INITIALIZE`]); a budget of `u64::MAX` is unlimited.
pub(super) struct Capped<R> {
    inner: R,
    left: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Capped<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::sync::atomic::Ordering;
        let left = self.left.load(Ordering::Relaxed);
        if left == 0 {
            return std::task::Poll::Ready(Err(std::io::Error::other(
                "the upstream wrote more than 1 MiB that is not MCP before answering initialize",
            )));
        }
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if left != u64::MAX && matches!(polled, std::task::Poll::Ready(Ok(()))) {
            let read = (buf.filled().len() - before) as u64;
            self.left
                .store(left.saturating_sub(read), Ordering::Relaxed);
        }
        polled
    }
}

/// A child's stderr is logged a line at a time, a line longer than this in pieces of it,
/// so a child that never writes a newline cannot grow the gateway's memory.
const STDERR_PIECE_BYTES: usize = 4096;
/// At most this many of a child's stderr lines are logged a second; the rest are counted,
/// and the count logged once the second is over.
const STDERR_LINES_PER_SEC: u32 = 100;
/// At most this much of a child's stderr is read a second: beyond it the child waits on
/// its full pipe until the next second, so a flood costs the gateway neither its cores
/// nor its log's disk.
const STDERR_BYTES_PER_SEC: usize = 1 << 20;

pub(super) fn log_stderr(upstream: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut stderr = tokio::io::BufReader::new(stderr);
        let mut piece = Vec::new();
        let mut second = StderrSecond::new(tokio::time::Instant::now());
        loop {
            if let Some(dropped) = second.roll(tokio::time::Instant::now()) {
                report_dropped(&upstream, dropped);
            }
            if second.bytes >= STDERR_BYTES_PER_SEC {
                tokio::time::sleep_until(second.started + Duration::from_secs(1)).await;
                continue;
            }
            let read = match next_piece(&mut stderr, STDERR_PIECE_BYTES, &mut piece).await {
                Ok(0) | Err(_) => break,
                Ok(read) => read,
            };
            if second.admit(read) && !piece.is_empty() {
                let line = String::from_utf8_lossy(&piece);
                tracing::info!(upstream = %upstream, line = line.trim_end_matches('\r'), "upstream stderr");
            }
        }
        if second.dropped > 0 {
            report_dropped(&upstream, second.dropped);
        }
    });
}

fn report_dropped(upstream: &str, dropped: u64) {
    tracing::warn!(
        upstream,
        dropped,
        "upstream stderr: lines over {STDERR_LINES_PER_SEC} a second were not logged"
    );
}

/// The stderr lines and bytes one child has sent in the current second.
struct StderrSecond {
    started: tokio::time::Instant,
    lines: u32,
    bytes: usize,
    dropped: u64,
}

impl StderrSecond {
    fn new(now: tokio::time::Instant) -> Self {
        Self {
            started: now,
            lines: 0,
            bytes: 0,
            dropped: 0,
        }
    }

    /// Starts a new second once this one is over; the lines it did not log, if any.
    fn roll(&mut self, now: tokio::time::Instant) -> Option<u64> {
        if now.duration_since(self.started) < Duration::from_secs(1) {
            return None;
        }
        let dropped = self.dropped;
        *self = Self::new(now);
        (dropped > 0).then_some(dropped)
    }

    /// Counts a piece of `read` bytes; whether it may be logged.
    fn admit(&mut self, read: usize) -> bool {
        self.bytes += read;
        if self.lines < STDERR_LINES_PER_SEC {
            self.lines += 1;
            true
        } else {
            self.dropped += 1;
            false
        }
    }
}

/// Reads the next line of `reader` into `piece` (cleared first, without its newline), or
/// its next `max` bytes when the line is longer; the bytes consumed, 0 at the end.
async fn next_piece<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
    piece: &mut Vec<u8>,
) -> std::io::Result<usize> {
    use tokio::io::AsyncBufReadExt;
    piece.clear();
    let mut read = 0;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read);
        }
        let room = &buf[..buf.len().min(max - piece.len())];
        if let Some(at) = room.iter().position(|&b| b == b'\n') {
            piece.extend_from_slice(&room[..at]);
            reader.consume(at + 1);
            return Ok(read + at + 1);
        }
        let taken = room.len();
        piece.extend_from_slice(room);
        reader.consume(taken);
        read += taken;
        if piece.len() == max {
            return Ok(read);
        }
    }
}

/// The HTTP client of an operator's upstream (tenant upstreams bring their own, which
/// follows no redirect at all). A redirect is followed only within the upstream's own
/// origin (scheme, host and port), at most five times: the upstream's configured headers
/// and token go along with every request, and must never reach another server.
pub(super) fn operator_client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let policy = reqwest::redirect::Policy::custom(|attempt| {
                let same_origin = attempt
                    .previous()
                    .first()
                    .is_some_and(|first| first.origin() == attempt.url().origin());
                if !same_origin {
                    let to = attempt.url().origin().ascii_serialization();
                    attempt.error(format!(
                        "refused a redirect to another origin ({to}): the upstream's credentials would follow it"
                    ))
                } else if attempt.previous().len() > 5 {
                    attempt.error("more than five redirects")
                } else {
                    attempt.follow()
                }
            });
            reqwest::Client::builder()
                .redirect(policy)
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                // Not `unwrap_or_default`: the default client follows any redirect. A
                // builder fails only where the TLS backend cannot start, and then
                // `Client::default()` panics the same way.
                .expect("an HTTP client with a redirect policy builds")
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::{STDERR_LINES_PER_SEC, StderrSecond, next_piece};
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_line_longer_than_a_piece_comes_in_pieces_and_the_next_line_whole() {
        // 250 bytes without a newline, then two short lines, the last without a newline.
        let long = tokio::io::repeat(b'x').take(250);
        let rest: &[u8] = b"\nsecond\r\nthird";
        let mut reader = tokio::io::BufReader::new(long.chain(rest));
        let mut piece = Vec::new();
        let mut next = async |piece: &mut Vec<u8>| {
            next_piece(&mut reader, 100, piece)
                .await
                .expect("an in-memory read")
        };

        assert_eq!(next(&mut piece).await, 100);
        assert_eq!(piece, vec![b'x'; 100]);
        assert_eq!(next(&mut piece).await, 100);
        assert_eq!(next(&mut piece).await, 51, "the rest and its newline");
        assert_eq!(piece, vec![b'x'; 50]);
        assert_eq!(next(&mut piece).await, 8);
        assert_eq!(piece, b"second\r");
        assert_eq!(next(&mut piece).await, 5);
        assert_eq!(piece, b"third");
        assert_eq!(next(&mut piece).await, 0);
    }

    #[test]
    fn a_second_logs_its_first_lines_and_counts_the_rest() {
        let start = tokio::time::Instant::now();
        let mut second = StderrSecond::new(start);
        let logged = (0..STDERR_LINES_PER_SEC + 7)
            .filter(|_| second.admit(10))
            .count();
        assert_eq!(logged, STDERR_LINES_PER_SEC as usize);
        assert_eq!(second.bytes, 10 * (STDERR_LINES_PER_SEC as usize + 7));
        assert_eq!(second.roll(start + Duration::from_millis(999)), None);
        assert_eq!(second.roll(start + Duration::from_secs(1)), Some(7));
        assert_eq!((second.lines, second.bytes, second.dropped), (0, 0, 0));
        assert!(second.admit(10));
        assert_eq!(second.roll(start + Duration::from_secs(2)), None);
    }
}
