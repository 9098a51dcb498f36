//! `web_fetch`: a web page (or text document) by URL, with the page's main text pulled
//! out, guarded against server-side request forgery.
//!
//! - HTTPS only; plain HTTP only when the operator allows it (`allow_http`, for tests
//!   on loopback and for intranets).
//! - Every address a host name resolves to is checked before connecting; one that is
//!   loopback, private, link-local, unique-local, CGNAT, multicast, reserved,
//!   unspecified, or an IPv6 form embedding such an IPv4 address (mapped, NAT64, 6to4)
//!   refuses the whole fetch. Cloud metadata endpoints fall in these ranges. Literal
//!   addresses in URLs are checked the same way after URL normalisation, which turns
//!   `2130706433` and `0x7f.1` into `127.0.0.1`.
//! - The connection goes to the vetted addresses and no others (the client is pinned to
//!   them), so a second DNS answer cannot swap in a private address.
//! - Redirects are followed by hand, at most 5, each one checked again.
//! - A byte cap and the call's deadline bound the download; the charset comes from the
//!   `Content-Type` header or the page's `<meta charset>`; HTML is reduced to its main
//!   content as Markdown (readability, via `dom_smoothie`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::Url;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_core::{CallContext, Effects, ErrorKind, Risk, Tool, ToolError, ToolOutput, ToolSpec};

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
}

#[derive(Deserialize)]
struct Args {
    url: String,
    #[serde(default)]
    raw: bool,
}

impl WebFetch {
    pub fn new(options: FetchOptions) -> Self {
        let spec = ToolSpec::new(
            "web_fetch",
            "Fetch a web page by URL and return its main content as Markdown (navigation and \
             boilerplate removed), or the raw text with `raw`. Public HTTPS addresses only.",
            json!({
                "type": "object",
                "properties": {
                    "url": {"type": "string", "minLength": 1, "maxLength": 8192, "description": "An https:// URL"},
                    "raw": {"type": "boolean", "default": false, "description": "Return the body as text, without extracting the main content"}
                },
                "required": ["url"],
                "additionalProperties": false
            }),
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
        .with_output_schema(json!({
            "type": "object",
            "properties": {
                "url": {"type": "string", "description": "The final URL, after redirects"},
                "status": {"type": "integer"},
                "content_type": {"type": ["string", "null"]},
                "title": {"type": ["string", "null"]},
                "bytes": {"type": "integer"},
                "truncated": {"type": "boolean", "description": "The body was longer than the byte cap"}
            },
            "required": ["url", "status", "content_type", "title", "bytes", "truncated"]
        }));
        Self { spec, options }
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
    /// One request to `url`, after checking where it would connect, pinned there.
    async fn fetch_once(&self, url: &Url) -> Result<reqwest::Response, ToolError> {
        match url.scheme() {
            "https" => {}
            "http" if self.options.allow_http => {}
            "http" => {
                return Err(ToolError::invalid_arguments(format!(
                    "{url} is plain HTTP; only https:// URLs are fetched"
                )));
            }
            other => {
                return Err(ToolError::invalid_arguments(format!(
                    "{other}: URLs are not fetched; only https://"
                )));
            }
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(ToolError::invalid_arguments(
                "URLs with credentials are not fetched",
            ));
        }
        let port = url.port_or_known_default().unwrap_or(443);
        let mut client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(&self.options.user_agent)
            .connect_timeout(Duration::from_secs(10));
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.vet(url, IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.vet(url, IpAddr::V6(ip))?,
            Some(url::Host::Domain(name)) => {
                // Not `tokio::net::lookup_host`: see [`crate::resolver`].
                let addrs: Vec<SocketAddr> = crate::resolver::Resolver::system()
                    .lookup(name, port, crate::resolver::DEADLINE)
                    .await
                    .map_err(|e| {
                        ToolError::new(ErrorKind::Upstream, format!("cannot resolve {name}: {e}"))
                    })?;
                if addrs.is_empty() {
                    return Err(ToolError::new(
                        ErrorKind::Upstream,
                        format!("{name} has no addresses"),
                    ));
                }
                for addr in &addrs {
                    self.vet(url, addr.ip())?;
                }
                // Connect to exactly the addresses vetted: no second lookup.
                client = client.resolve_to_addrs(name, &addrs);
            }
            None => return Err(ToolError::invalid_arguments("the URL has no host")),
        }
        let client = client.build().map_err(ToolError::internal)?;
        client.get(url.clone()).send().await.map_err(|e| {
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

    fn vet(&self, url: &Url, ip: IpAddr) -> Result<(), ToolError> {
        if is_reachable(ip, &self.options.allowed_networks) {
            return Ok(());
        }
        Err(ToolError::invalid_arguments(format!(
            "{} leads to {ip}, which is not a public address; web_fetch reaches only the public internet",
            url.host_str().unwrap_or("the URL")
        )))
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
        Ok(ToolOutput::text(shown).with_structured(json!({
            "url": url.as_str(),
            "status": status.as_u16(),
            "content_type": content_type,
            "title": title,
            "bytes": body.len(),
            "truncated": truncated,
        })))
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

/// Whether `ip` may be connected to: public, or in one of the `allowed` networks.
pub fn is_reachable(ip: IpAddr, allowed: &[ipnet::IpNet]) -> bool {
    is_public(ip) || allowed.iter().any(|n| n.contains(&ip))
}

/// Whether `ip` is a globally reachable unicast address.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 198 && (18..20).contains(&b)) // benchmarking
        || a >= 240) // reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let segments = ip.segments();
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address.
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(embedded(segments[6], segments[7]));
    }
    if segments[0] == 0x2002 {
        return is_public_v4(embedded(segments[1], segments[2]));
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00 // unique local
        || (segments[0] & 0xffc0) == 0xfe80 // link-local
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation
        || (segments[0] == 0x2001 && segments[1] == 0) // Teredo
        || segments[..6] == [0, 0, 0, 0, 0, 0]) // IPv4-compatible (deprecated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::127.0.0.1",
        ] {
            let ip: IpAddr = private.parse().expect(private);
            assert!(!is_public(ip), "{private} passed");
        }
        for public in [
            "93.184.216.34",
            "1.1.1.1",
            "2606:4700:4700::1111",
            "64:ff9b::808:808",
        ] {
            let ip: IpAddr = public.parse().expect(public);
            assert!(is_public(ip), "{public} refused");
        }
    }

    #[test]
    fn url_normalisation_exposes_disguised_loopback() {
        for disguised in [
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://[::ffff:7f00:1]/",
        ] {
            let url = Url::parse(disguised).expect(disguised);
            let ip = match url.host() {
                Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip),
                Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip),
                other => panic!("{disguised}: {other:?}"),
            };
            assert!(!is_public(ip), "{disguised} → {ip}");
        }
    }

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
