//! The one egress guard: where a connection a tenant can aim may go (`web_fetch`, and
//! tenants' upstream MCP servers and HTTP APIs), against server-side request forgery.
//!
//! - HTTPS only; plain HTTP only when the operator allows it (`allow_http`, for tests on
//!   loopback and for intranets). No credentials in the URL.
//! - An address is reachable when it is public, or in one of the operator's
//!   `allowed_networks`. Loopback, private, link-local, unique-local, CGNAT, multicast,
//!   reserved, unspecified, and IPv6 forms embedding such an IPv4 address (mapped, NAT64,
//!   6to4) are not; cloud metadata endpoints fall in these ranges. Literal addresses are
//!   checked after URL normalisation, which turns `2130706433` and `0x7f.1` into
//!   `127.0.0.1`.
//! - A host name is resolved at every connection by the client's resolver
//!   ([`Egress::client`]), on [`crate::resolver`]'s own threads under its deadline; one
//!   address that is not reachable refuses the name, and the connection goes to exactly
//!   the addresses vetted (no second lookup, so no rebinding window).
//! - The client follows no redirect and uses no proxy: a caller that follows redirects
//!   checks each hop again ([`Egress::check`]).
//!
//! A refusal is a [`Refused`], found in a failed request's error chain by [`refusal`]:
//! the caller's to fix (400), not a fault on the way.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use url::Url;

use crate::resolver::{DEADLINE, Resolver};

/// Headers the gateway sets itself on every request it sends (credentials, framing,
/// content negotiation, trace context): a tenant's static header or an API's parameter
/// may not replace them. Each kind of connection adds its own (see [`sets_header`]).
const SET_BY_GATEWAY: &[&str] = &[
    "authorization",
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "te",
    "upgrade",
    "traceparent",
    "tracestate",
];

/// Whether the gateway sets header `name` itself: one of [`SET_BY_GATEWAY`] or of the
/// connection's own `also` (lower case), whatever the case of `name`.
pub fn sets_header(name: &str, also: &[&str]) -> bool {
    let lower = name.to_ascii_lowercase();
    SET_BY_GATEWAY.contains(&lower.as_str()) || also.contains(&lower.as_str())
}

/// Where connections may go.
#[derive(Clone, Debug, Default)]
pub struct Egress {
    /// Allow `http://` URLs (otherwise HTTPS only).
    pub allow_http: bool,
    /// Networks reachable even though they are not public (an intranet, or
    /// `127.0.0.1/32` in tests). Empty by default.
    pub allowed_networks: Vec<ipnet::IpNet>,
    /// Certificate authorities trusted besides the system's (a private CA, a test CA).
    pub extra_roots: Vec<reqwest::Certificate>,
}

/// Why a destination may not be reached.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Egress {
    /// Why `url` may not be reached, if it may not: its scheme, credentials and literal
    /// address. A host name is vetted when the client connects.
    pub fn check(&self, url: &Url) -> Result<(), Refused> {
        // First: the refusals below name the URL, and it must not carry a secret there.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused("credentials in the URL are not allowed".into()));
        }
        match url.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => {
                return Err(Refused(format!(
                    "{url} is plain HTTP; only https:// URLs are allowed"
                )));
            }
            other => {
                return Err(Refused(format!(
                    "{other}: URLs are not allowed; only https://"
                )));
            }
        }
        let host = url.host_str().unwrap_or("the URL");
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.vet(host, IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.vet(host, IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err(Refused("the URL has no host".into())),
        }
    }

    /// [`check`](Self::check), and a host name resolved and vetted now as well, for an
    /// early answer (registering an upstream). A name that does not resolve now passes:
    /// it may later, and its connections will be vetted then.
    pub async fn check_now(&self, url: &str) -> Result<Url, Refused> {
        // Not repeated: what does not parse may still hold a password.
        let parsed = Url::parse(url).map_err(|e| Refused(format!("not a URL: {e}")))?;
        self.check(&parsed)?;
        if let Some(url::Host::Domain(name)) = parsed.host() {
            let port = parsed.port_or_known_default().unwrap_or(443);
            if let Ok(addrs) = Resolver::system().lookup(name, port, DEADLINE).await {
                for addr in addrs {
                    self.vet(name, addr.ip())?;
                }
            }
        }
        Ok(parsed)
    }

    /// Whether `host`, at `ip`, may be reached.
    pub fn vet(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        if is_reachable(ip, &self.allowed_networks) {
            return Ok(());
        }
        Err(Refused(format!(
            "{host} leads to {ip}, which is not a public address"
        )))
    }

    /// A client connecting only where this guard allows: host names through the vetting
    /// resolver, no redirects, no proxy. Callers add their own settings (user agent,
    /// timeouts) before building it.
    pub fn client(self: &Arc<Self>) -> reqwest::ClientBuilder {
        let mut builder = reqwest::Client::builder();
        if !self.extra_roots.is_empty() {
            builder = builder.tls_certs_merge(self.extra_roots.iter().cloned());
        }
        builder
            .dns_resolver(VettedResolver(self.clone()))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
    }
}

/// The [`Refused`] in `err`'s chain of causes, if a refusal is why it failed.
pub fn refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    toolgate_core::error::cause(err)
}

/// Resolves host names, refusing any that resolves to an address that is not reachable,
/// and hands the client exactly the addresses it vetted.
struct VettedResolver(Arc<Egress>);

impl reqwest::dns::Resolve for VettedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let egress = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Off the shared blocking pool, under a deadline (see `crate::resolver`).
            let addrs: Vec<SocketAddr> = Resolver::system().lookup(&host, 0, DEADLINE).await?;
            if addrs.is_empty() {
                return Err(format!("{host} has no addresses").into());
            }
            for addr in &addrs {
                egress.vet(&host, addr.ip())?;
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
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

    #[tokio::test]
    async fn urls_reach_only_public_addresses_over_https() {
        let egress = Egress::default();
        for url in [
            "http://mcp.example.com/mcp",
            "ftp://mcp.example.com/",
            "https://user:pw@mcp.example.com/mcp",
            "https://127.0.0.1/mcp",
            "https://2130706433/mcp",
            "https://0x7f.1/mcp",
            "https://[::1]/mcp",
            "https://[::ffff:127.0.0.1]/mcp",
            "https://169.254.169.254/latest/meta-data",
            "https://10.0.0.8/mcp",
            "https://0.0.0.0/mcp",
            "https://[fd00::1]/mcp",
            "https://localhost/mcp",
            "not a url",
        ] {
            assert!(
                egress.check_now(url).await.is_err(),
                "{url} must be refused"
            );
        }
        assert!(egress.check_now("https://93.184.215.14/mcp").await.is_ok());
        // Whatever else is wrong with it, a refusal never repeats a URL's password.
        for url in [
            "http://user:s3cret@mcp.example.com/",
            "ftp://user:s3cret@x/",
            "https://user:s3cret@[::1/",
        ] {
            let refused = egress.check_now(url).await.expect_err(url);
            assert!(!refused.to_string().contains("s3cret"), "{refused}");
        }
        let tests = Egress {
            allow_http: true,
            allowed_networks: vec!["127.0.0.0/8".parse().expect("net")],
            ..Egress::default()
        };
        assert!(tests.check_now("http://127.0.0.1:9/mcp").await.is_ok());
        assert!(tests.check_now("http://10.0.0.8/mcp").await.is_err());
    }

    #[tokio::test]
    async fn the_client_refuses_names_that_resolve_to_private_addresses() {
        let egress = Arc::new(Egress {
            allow_http: true,
            ..Egress::default()
        });
        let client = egress.client().build().expect("client");
        let err = client
            .get("http://localhost:9/mcp")
            .send()
            .await
            .expect_err("refused");
        // Found as a refusal through reqwest's and hyper's layers, so callers tell it
        // from a fault on the way.
        let refused = refusal(&err).expect("a refusal in the chain");
        assert!(refused.0.contains("not a public address"), "{refused}");
    }
}
