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
            let transport = Relaying {
                inner: AsyncRwTransport::new_client(stdout, stdin),
                routes,
            };
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
                handler.serve(Relaying {
                    inner: StreamableHttpClientTransport::with_client(
                        Traced(client.clone().unwrap_or_else(operator_client)),
                        http,
                    ),
                    routes,
                }),
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

/// The most of one stderr line that is logged; the rest of a longer line is read and
/// dropped, so a child that never writes a newline cannot grow the gateway's memory.
const MAX_STDERR_LINE_BYTES: usize = 8 * 1024;

pub(super) fn log_stderr(upstream: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut stderr = tokio::io::BufReader::new(stderr);
        let mut line = Vec::new();
        while let Ok(true) = next_line_capped(&mut stderr, MAX_STDERR_LINE_BYTES, &mut line).await {
            let line = String::from_utf8_lossy(&line);
            let line: String = line.trim_end_matches('\r').chars().take(2000).collect();
            tracing::info!(upstream = %upstream, line, "upstream stderr");
        }
    });
}

/// Reads the next line of `reader` into `line` (cleared first, without its newline),
/// keeping at most `max` bytes of it; `false` at the end of the input.
async fn next_line_capped<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    max: usize,
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    use tokio::io::AsyncBufReadExt;
    line.clear();
    let mut read_any = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read_any);
        }
        read_any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let text = &buf[..newline.unwrap_or(buf.len())];
        let room = max.saturating_sub(line.len());
        line.extend_from_slice(&text[..text.len().min(room)]);
        let used = newline.map_or(buf.len(), |at| at + 1);
        reader.consume(used);
        if newline.is_some() {
            return Ok(true);
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
    use super::next_line_capped;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_line_without_end_is_kept_to_its_cap_and_the_next_line_is_whole() {
        // 32 MiB without a newline, then two short lines, the last without a newline.
        let endless = tokio::io::repeat(b'x').take(32 << 20);
        let rest: &[u8] = b"\nsecond\r\nthird";
        let mut reader = tokio::io::BufReader::new(endless.chain(rest));
        let mut line = Vec::new();

        assert!(
            next_line_capped(&mut reader, 100, &mut line)
                .await
                .expect("an in-memory read")
        );
        assert_eq!(line, vec![b'x'; 100]);
        assert!(line.capacity() <= 1024, "held {} bytes", line.capacity());
        assert!(
            next_line_capped(&mut reader, 100, &mut line)
                .await
                .expect("an in-memory read")
        );
        assert_eq!(line, b"second\r");
        assert!(
            next_line_capped(&mut reader, 100, &mut line)
                .await
                .expect("an in-memory read")
        );
        assert_eq!(line, b"third");
        assert!(
            !next_line_capped(&mut reader, 100, &mut line)
                .await
                .expect("an in-memory read")
        );
    }
}
