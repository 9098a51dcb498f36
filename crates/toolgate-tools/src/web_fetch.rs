//! `web_fetch`: a web page (or text document) by URL, with the page's main text pulled
//! out, guarded against server-side request forgery.
//!
//! - Where it may connect is [`crate::egress`]'s to say, as for tenants' upstreams:
//!   public HTTPS addresses (plain HTTP and other networks only as the operator allows),
//!   every address a name resolves to vetted, the connection pinned to them.
//! - Redirects are followed by hand, at most 5, each one checked again; the client
//!   (one per tool, so connections are reused) follows none itself.
//! - A byte cap and the call's deadline bound the download; the charset comes from the
//!   `Content-Type` header or the page's `<meta charset>`; HTML is reduced to its main
//!   content as Markdown (readability, via `dom_smoothie`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::Url;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate_core::{CallContext, Effects, ErrorKind, Risk, Tool, ToolError, ToolOutput, ToolSpec};

use crate::egress::{self, Egress};
use crate::parse_args;

/// Redirects followed before giving up.
pub const MAX_REDIRECTS: usize = 5;

/// How `web_fetch` may reach the web; from the operator's config.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Allow `http://` URLs (otherwise HTTPS only).
    pub allow_http: bool,
    /// Networks reachable even though they are not public (e.g. an intranet, or
    /// `127.0.0.1/32` in tests). Empty by default.
    pub allowed_networks: Vec<ipnet::IpNet>,
    /// Largest body read, in bytes; the rest is cut.
    pub max_bytes: usize,
    pub user_agent: String,
}

impl Default for FetchOptions {
    fn default() -> Self {
        Self {
            allow_http: false,
            allowed_networks: Vec::new(),
            max_bytes: 5 * 1024 * 1024,
            user_agent: format!("toolgate/{} (web_fetch)", env!("CARGO_PKG_VERSION")),
        }
    }
}

pub struct WebFetch {
    spec: ToolSpec,
    options: FetchOptions,
    egress: Arc<Egress>,
    client: reqwest::Client,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// An https:// URL
    #[schemars(length(min = 1, max = 8192))]
    url: String,
    /// Return the body as text, without extracting the main content
    #[serde(default)]
    raw: bool,
}

/// What `web_fetch` fetched.
#[derive(Serialize, JsonSchema)]
struct Fetched {
    /// The final URL, after redirects
    url: String,
    status: u16,
    content_type: Option<String>,
    title: Option<String>,
    bytes: usize,
    /// The body was longer than the byte cap
    truncated: bool,
}

impl WebFetch {
    pub fn new(options: FetchOptions) -> Result<Self, ToolError> {
        let spec = ToolSpec::new(
            "web_fetch",
            "Fetch a web page by URL and return its main content as Markdown (navigation and \
             boilerplate removed), or the raw text with `raw`. Public HTTPS addresses only.",
            crate::input_schema::<Args>(),
        )
        .with_title("Fetch web page")
        .with_category("web")
        .with_risk(
            Risk::High,
            Effects {
                writes: false,
                destructive: false,
                idempotent: true,
                open_world: true,
            },
        )
        .with_timeouts(Duration::from_secs(30), Duration::from_secs(120))
        .with_output_schema(crate::output_schema::<Fetched>());
        let egress = Arc::new(Egress {
            allow_http: options.allow_http,
            allowed_networks: options.allowed_networks.clone(),
            extra_roots: Vec::new(),
        });
        let client = egress
            .client()
            .user_agent(&options.user_agent)
            .build()
            .map_err(ToolError::internal)?;
        Ok(Self {
            spec,
            options,
            egress,
            client,
        })
    }
}

#[async_trait]
impl Tool for WebFetch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(args)?;
        let mut url = Url::parse(args.url.trim())
            .map_err(|e| ToolError::invalid_arguments(format!("not a valid URL: {e}")))?;
        for _ in 0..=MAX_REDIRECTS {
            let response = self.fetch_once(&url).await?;
            if response.status().is_redirection()
                && let Some(location) = response.headers().get(reqwest::header::LOCATION)
            {
                let location = location.to_str().map_err(|_| {
                    ToolError::new(ErrorKind::Upstream, "a redirect's Location is not text")
                })?;
                url = url.join(location).map_err(|e| {
                    ToolError::new(
                        ErrorKind::Upstream,
                        format!("a redirect points to an invalid URL: {e}"),
                    )
                })?;
                continue;
            }
            return self.read(url, response, args.raw).await;
        }
        Err(ToolError::new(
            ErrorKind::Upstream,
            format!("more than {MAX_REDIRECTS} redirects"),
        ))
    }
}

impl WebFetch {
    /// One request to `url`, after checking where it would connect; host names are
    /// vetted by the client's resolver as it connects.
    async fn fetch_once(&self, url: &Url) -> Result<reqwest::Response, ToolError> {
        self.egress
            .check(url)
            .map_err(|refused| refused_here(&refused))?;
        self.client.get(url.clone()).send().await.map_err(|e| {
            if let Some(refused) = egress::refusal(&e) {
                return refused_here(refused);
            }
            ToolError::new(
                if e.is_timeout() {
                    ErrorKind::Timeout
                } else {
                    ErrorKind::Upstream
                },
                format!("fetching {url} failed: {}", toolgate_core::error::chain(&e)),
            )
        })
    }

    async fn read(
        &self,
        url: Url,
        mut response: reqwest::Response,
        raw: bool,
    ) -> Result<ToolOutput, ToolError> {
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| {
            ToolError::new(
                ErrorKind::Upstream,
                format!("reading {url} failed: {}", toolgate_core::error::chain(&e)),
            )
        })? {
            let room = self.options.max_bytes.saturating_sub(body.len());
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let mut err = ToolError::new(ErrorKind::Upstream, format!("{url} answered {status}"))
                .with_details(json!({"status": status.as_u16()}));
            err.recoverable = status.is_server_error() || status.as_u16() == 429;
            return Err(err);
        }
        let mime = content_type
            .as_deref()
            .and_then(|t| t.split(';').next())
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        let textual = mime.is_empty()
            || mime.starts_with("text/")
            || mime.ends_with("+xml")
            || mime.ends_with("+json")
            || matches!(
                mime.as_str(),
                "application/json" | "application/xml" | "application/javascript"
            );
        if !textual {
            return Err(ToolError::invalid_arguments(format!(
                "{url} is {mime}, not text; web_fetch returns text documents only"
            )));
        }
        let text = decode(&body, content_type.as_deref());
        let html = mime == "text/html" || mime == "application/xhtml+xml";
        let (title, text) = if html && !raw {
            main_content(&text, url.as_str())
        } else {
            (None, text)
        };
        let mut shown = text;
        if truncated {
            shown.push_str(&format!(
                "\n\n[body cut at {} bytes]",
                self.options.max_bytes
            ));
        }
        let fetched = Fetched {
            url: url.to_string(),
            status: status.as_u16(),
            content_type,
            title,
            bytes: body.len(),
            truncated,
        };
        Ok(ToolOutput::text(shown).with_structured(crate::structured(&fetched)))
    }
}

/// The page's title and main content as Markdown; the whole page's text when no main
/// content stands out.
fn main_content(html: &str, url: &str) -> (Option<String>, String) {
    let config = dom_smoothie::Config {
        text_mode: dom_smoothie::TextMode::Markdown,
        ..Default::default()
    };
    let parsed =
        dom_smoothie::Readability::new(html, Some(url), Some(config)).and_then(|mut r| r.parse());
    match parsed {
        Ok(article) => {
            let title = Some(article.title).filter(|t| !t.is_empty());
            let body = article.text_content.to_string();
            let text = match &title {
                Some(t) => format!("# {t}\n\n{}", body.trim()),
                None => body.trim().to_owned(),
            };
            (title, text)
        }
        Err(_) => (None, html.to_owned()),
    }
}

/// Bytes to text by the header's charset, else the page's `<meta charset>`, else UTF-8.
fn decode(body: &[u8], content_type: Option<&str>) -> String {
    let from_header = content_type.and_then(|t| {
        t.split(';')
            .filter_map(|p| p.trim().strip_prefix("charset="))
            .next()
            .map(|c| c.trim_matches('"').to_owned())
    });
    let label = from_header.or_else(|| meta_charset(body));
    let encoding = label
        .and_then(|l| encoding_rs::Encoding::for_label(l.as_bytes()))
        .unwrap_or(encoding_rs::UTF_8);
    let (text, _, _) = encoding.decode(body);
    text.into_owned()
}

/// A destination the egress guard refused: the caller's to fix.
fn refused_here(refused: &egress::Refused) -> ToolError {
    ToolError::invalid_arguments(format!(
        "{refused}; web_fetch reaches only the public internet"
    ))
}

/// `<meta charset="…">` or `<meta http-equiv content="…; charset=…">` in the first KiB.
fn meta_charset(body: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&body[..body.len().min(1024)]).to_ascii_lowercase();
    let at = head.find("charset=")? + "charset=".len();
    let value: String = head[at..]
        .trim_start_matches(['"', '\''])
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))
        .collect();
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charsets_come_from_the_header_then_the_page() {
        let latin1 = b"caf\xe9";
        assert_eq!(
            decode(latin1, Some("text/plain; charset=ISO-8859-1")),
            "café"
        );
        let page = b"<html><head><meta charset=\"windows-1252\"></head>caf\xe9</html>";
        assert!(decode(page, Some("text/html")).contains("café"));
        assert_eq!(decode("ok ✓".as_bytes(), None), "ok ✓");
    }
}
