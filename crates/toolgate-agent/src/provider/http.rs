//! The HTTP side shared by every provider: credentials as headers, one attempt's timeout,
//! retries with backoff and `Retry-After`, cancellation, and error classification.

use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::stream::{Delta, DeltaSink, Fold, Framer, Framing, stream_error};
use super::{ProviderConfig, ProviderError, ProviderErrorKind, ProviderKind, RetryPolicy};

/// Largest response body read from a provider.
const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

#[derive(Clone, Debug)]
pub struct HttpClient {
    client: reqwest::Client,
    base_url: String,
    retry: RetryPolicy,
}

impl HttpClient {
    pub fn new(config: &ProviderConfig) -> Result<Self, String> {
        let mut headers = HeaderMap::new();
        let mut secret = |name: &str, value: &str| -> Result<(), String> {
            let name = HeaderName::try_from(name).map_err(|e| format!("header {name:?}: {e}"))?;
            let mut value = HeaderValue::try_from(value)
                .map_err(|_| format!("header {name}: the value is not a valid header value"))?;
            // Kept out of reqwest's own debug output.
            value.set_sensitive(true);
            headers.insert(name, value);
            Ok(())
        };
        if let Some(key) = &config.api_key {
            match config.kind {
                ProviderKind::Openai | ProviderKind::Ollama => {
                    secret("authorization", &format!("Bearer {key}"))?
                }
                ProviderKind::Anthropic => secret("x-api-key", key)?,
                ProviderKind::Gemini => secret("x-goog-api-key", key)?,
            }
        }
        if config.kind == ProviderKind::Anthropic {
            secret("anthropic-version", "2023-06-01")?;
        }
        for (name, value) in &config.headers {
            secret(name, value)?;
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(config.timeout)
            .connect_timeout(config.timeout.min(Duration::from_secs(10)))
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Self {
            client,
            base_url: config.base_url.trim_end_matches('/').to_owned(),
            retry: config.retry,
        })
    }

    /// `base_url` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// POSTs `body` to `url` and returns the JSON reply, retrying retryable failures.
    pub async fn post_json(
        &self,
        url: &str,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<Value, ProviderError> {
        self.retrying(cancel, || self.attempt(url, body), || {})
            .await
    }

    /// POSTs `body` to `url` and reads the reply as a stream framed as `framing`, handing
    /// text and reasoning to `sink` as they come; returns the reply folded whole. Retries
    /// as [`Self::post_json`], telling `sink` to forget what an attempt sent before it.
    pub async fn post_stream<F: Fold>(
        &self,
        url: &str,
        body: &Value,
        framing: Framing,
        cancel: &CancellationToken,
        sink: DeltaSink<'_>,
    ) -> Result<Value, ProviderError> {
        let sent = std::sync::atomic::AtomicBool::new(false);
        let counted = |delta: Delta| {
            sent.store(true, std::sync::atomic::Ordering::Relaxed);
            sink(delta);
        };
        self.retrying(
            cancel,
            || self.attempt_stream::<F>(url, body, framing, &counted),
            || {
                if sent.swap(false, std::sync::atomic::Ordering::Relaxed) {
                    sink(Delta::Restart);
                }
            },
        )
        .await
    }

    /// Makes `attempt` until it succeeds, fails for good or the retries are spent,
    /// waiting as the retry policy says (`Retry-After` first); `before_retry` runs before
    /// each wait. Returns early with `Cancelled` when `cancel` fires.
    async fn retrying<Fut>(
        &self,
        cancel: &CancellationToken,
        attempt: impl Fn() -> Fut,
        before_retry: impl Fn(),
    ) -> Result<Value, ProviderError>
    where
        Fut: std::future::Future<Output = Result<Value, ProviderError>>,
    {
        let mut tries = 0;
        loop {
            let result = tokio::select! {
                result = attempt() => result,
                () = cancel.cancelled() => return Err(cancelled()),
            };
            match result {
                Ok(value) => return Ok(value),
                Err(err) if err.is_retryable() && tries < self.retry.max_retries => {
                    tries += 1;
                    before_retry();
                    let delay = self.retry.delay(tries, &err);
                    tracing::warn!(
                        error = %err,
                        attempt = tries,
                        delay_ms = delay.as_millis() as u64,
                        "provider call failed; retrying"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = cancel.cancelled() => return Err(cancelled()),
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    async fn attempt_stream<F: Fold>(
        &self,
        url: &str,
        body: &Value,
        framing: Framing,
        sink: DeltaSink<'_>,
    ) -> Result<Value, ProviderError> {
        let mut response = self.send(url, body).await?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let mut fold = F::default();
        let mut framer = Framer::new(framing);
        let mut read = 0usize;
        let take = |messages: Vec<String>, fold: &mut F| -> Result<(), ProviderError> {
            for message in messages {
                if message.trim() == "[DONE]" {
                    continue;
                }
                let value: Value = serde_json::from_str(&message).map_err(|e| {
                    ProviderError::new(
                        ProviderErrorKind::Decode,
                        format!("a message of the provider's stream is not JSON: {e}"),
                    )
                })?;
                if let Some(err) = stream_error(&value) {
                    return Err(err);
                }
                fold.push(value, sink)?;
            }
            Ok(())
        };
        while let Some(chunk) = response.chunk().await.map_err(transport)? {
            read += chunk.len();
            if read > MAX_BODY_BYTES {
                return Err(ProviderError::new(
                    ProviderErrorKind::Decode,
                    format!("the provider's reply exceeds {MAX_BODY_BYTES} bytes"),
                ));
            }
            take(framer.push(&chunk), &mut fold)?;
        }
        take(framer.finish(), &mut fold)?;
        fold.finish()
    }

    async fn attempt(&self, url: &str, body: &Value) -> Result<Value, ProviderError> {
        let response = self.send(url, body).await?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let bytes = read_limited(response).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            ProviderError::new(
                ProviderErrorKind::Decode,
                format!("the provider's reply is not JSON: {e}"),
            )
        })
    }

    async fn send(&self, url: &str, body: &Value) -> Result<reqwest::Response, ProviderError> {
        self.client
            .post(url)
            .json(body)
            .send()
            .await
            .map_err(transport)
    }
}

/// A reply that is not a success, as the provider's error: its kind, message, status and
/// `Retry-After`.
async fn refusal(response: reqwest::Response) -> ProviderError {
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let bytes = match read_limited(response).await {
        Ok(bytes) => bytes,
        Err(err) => return err,
    };
    let mut err = ProviderError::new(classify(status, &bytes), error_message(status, &bytes));
    err.status = Some(status.as_u16());
    err.retry_after = retry_after;
    err
}

fn cancelled() -> ProviderError {
    ProviderError::new(ProviderErrorKind::Cancelled, "the run was cancelled")
}

async fn read_limited(mut response: reqwest::Response) -> Result<Vec<u8>, ProviderError> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport)? {
        if body.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(ProviderError::new(
                ProviderErrorKind::Decode,
                format!("the provider's reply exceeds {MAX_BODY_BYTES} bytes"),
            ));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn transport(err: reqwest::Error) -> ProviderError {
    // The URL is operator configuration, not a secret, but keep messages short.
    let err = err.without_url();
    if err.is_timeout() {
        ProviderError::new(
            ProviderErrorKind::Timeout,
            "the provider did not answer in time",
        )
    } else {
        ProviderError::new(ProviderErrorKind::Transport, err.to_string())
    }
}

fn classify(status: StatusCode, body: &[u8]) -> ProviderErrorKind {
    match status.as_u16() {
        402 => ProviderErrorKind::QuotaExceeded,
        429 if spend_limit(body) => ProviderErrorKind::QuotaExceeded,
        429 => ProviderErrorKind::RateLimited,
        // 529: Anthropic's `overloaded_error`.
        503 | 529 => ProviderErrorKind::Overloaded,
        401 | 403 => ProviderErrorKind::Auth,
        408 => ProviderErrorKind::Timeout,
        400..=499 => ProviderErrorKind::BadRequest,
        _ => ProviderErrorKind::Server,
    }
}

/// Whether a 429's body says the spend limit is reached rather than the rate: OpenAI's
/// `insufficient_quota` (as `error.type` or `error.code`).
fn spend_limit(body: &[u8]) -> bool {
    let Ok(parsed) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let error = &parsed["error"];
    ["type", "code"]
        .iter()
        .any(|field| error[field].as_str() == Some("insufficient_quota"))
}

/// The provider's own words: `error.message` (OpenAI, Anthropic, Gemini), `error` as a
/// string (Ollama), else the start of the body.
fn error_message(status: StatusCode, body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.pointer("/error/message")
            .or_else(|| v.get("error").filter(|e| e.is_string()))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    message.unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body);
        let text: String = text.chars().take(300).collect();
        if text.trim().is_empty() {
            status.to_string()
        } else {
            text
        }
    })
}

/// `retry-after-ms` (OpenAI), or `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        return (ms.is_finite() && ms >= 0.0).then(|| Duration::from_secs_f64(ms / 1000.0));
    }
    let value = text("retry-after")?.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_str(v).expect("test header"));
        }
        map
    }

    #[test]
    fn retry_after_in_seconds_milliseconds_and_dates() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after-ms", "250"), ("retry-after", "9")])),
            Some(Duration::from_millis(250))
        );
        let past = retry_after(&headers(&[(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        )]));
        assert_eq!(past, Some(Duration::ZERO));
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-1")])), None);
    }

    #[test]
    fn error_bodies_of_each_provider_give_their_message() {
        let s = StatusCode::TOO_MANY_REQUESTS;
        assert_eq!(
            error_message(
                s,
                br#"{"error":{"message":"slow down","type":"rate_limit"}}"#
            ),
            "slow down"
        );
        assert_eq!(
            error_message(
                s,
                br#"{"type":"error","error":{"type":"rate_limit_error","message":"later"}}"#
            ),
            "later"
        );
        assert_eq!(
            error_message(s, br#"{"error":"model not found"}"#),
            "model not found"
        );
        assert_eq!(error_message(s, b""), "429 Too Many Requests");
        assert_eq!(
            classify(StatusCode::from_u16(529).expect("valid"), b""),
            ProviderErrorKind::Overloaded
        );
    }

    #[test]
    fn spend_limits_are_final_and_rate_limits_are_not() {
        let too_many = StatusCode::TOO_MANY_REQUESTS;
        let quota = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        let rate = br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
        assert_eq!(classify(too_many, quota), ProviderErrorKind::QuotaExceeded);
        assert_eq!(classify(too_many, rate), ProviderErrorKind::RateLimited);
        assert_eq!(
            classify(StatusCode::PAYMENT_REQUIRED, b"{}"),
            ProviderErrorKind::QuotaExceeded
        );
        assert!(!ProviderError::new(ProviderErrorKind::QuotaExceeded, "x").is_retryable());
        assert!(ProviderError::new(ProviderErrorKind::RateLimited, "x").is_retryable());
    }
}
