//! Where tenants' upstreams may connect: `https://` (`http://` only when configured), a
//! literal address only when public or in `allowed_networks`, a host name resolved at
//! every connection by `VettedResolver`, which refuses the name when any address is
//! not and hands the client exactly the addresses it vetted (no second lookup, so no
//! rebinding window). Redirects are not followed; proxies are not used.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

/// Where tenants' upstreams may connect.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    pub allow_http: bool,
    pub allowed_networks: Vec<ipnet::IpNet>,
    /// Trusted besides the system's roots (`tenant_upstreams.ca_file`).
    pub extra_roots: Vec<reqwest::Certificate>,
}

impl Reach {
    /// Why `url` may not be an upstream's address, if it may not. A host name is checked
    /// at each connection (`VettedResolver`); `resolve` checks it now too.
    pub async fn check(&self, url: &str, resolve: bool) -> Result<url::Url, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => return Err("plain http:// is not allowed; use https://".into()),
            other => return Err(format!("{other}: URLs are not allowed; use https://")),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("credentials in the URL are not allowed; use `headers` or `bearer`".into());
        }
        match parsed.host() {
            Some(url::Host::Ipv4(ip)) => self.vet(&parsed, IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.vet(&parsed, IpAddr::V6(ip))?,
            Some(url::Host::Domain(name)) if resolve => {
                let port = parsed.port_or_known_default().unwrap_or(443);
                // A name that does not resolve now may later: its connections will tell.
                if let Ok(addrs) = toolgate_tools::resolver::Resolver::system()
                    .lookup(name, port, toolgate_tools::resolver::DEADLINE)
                    .await
                {
                    for addr in addrs {
                        self.vet(&parsed, addr.ip())?;
                    }
                }
            }
            Some(url::Host::Domain(_)) => {}
            None => return Err("the URL has no host".into()),
        }
        Ok(parsed)
    }

    fn vet(&self, url: &url::Url, ip: IpAddr) -> Result<(), String> {
        if toolgate_tools::web_fetch::is_reachable(ip, &self.allowed_networks) {
            return Ok(());
        }
        Err(format!(
            "{} leads to {ip}, which is not a public address",
            url.host_str().unwrap_or("the URL")
        ))
    }

    /// The HTTP client every tenant upstream connects with.
    pub fn client(self: &Arc<Self>) -> anyhow::Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder();
        if !self.extra_roots.is_empty() {
            builder = builder.tls_certs_merge(self.extra_roots.iter().cloned());
        }
        builder
            .dns_resolver(VettedResolver(self.clone()))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the tenant upstreams' HTTP client")
    }
}

/// Resolves host names for tenant upstreams, refusing any that resolves to an address
/// that is not public (nor in `allowed_networks`).
struct VettedResolver(Arc<Reach>);

impl reqwest::dns::Resolve for VettedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reach = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Off the shared blocking pool, under a deadline (see `toolgate_tools::resolver`).
            let addrs: Vec<SocketAddr> = toolgate_tools::resolver::Resolver::system()
                .lookup(&host, 0, toolgate_tools::resolver::DEADLINE)
                .await?;
            if addrs.is_empty() {
                return Err(format!("{host} has no addresses").into());
            }
            if let Some(bad) = addrs
                .iter()
                .find(|a| !toolgate_tools::web_fetch::is_reachable(a.ip(), &reach.allowed_networks))
            {
                return Err(format!(
                    "{host} leads to {}, which is not a public address",
                    bad.ip()
                )
                .into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn upstream_urls_reach_only_public_addresses_over_https() {
        let reach = Reach::default();
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
                reach.check(url, true).await.is_err(),
                "{url} must be refused"
            );
        }
        assert!(reach.check("https://93.184.215.14/mcp", true).await.is_ok());
        let tests = Reach {
            allow_http: true,
            allowed_networks: vec!["127.0.0.0/8".parse().expect("net")],
            ..Reach::default()
        };
        assert!(tests.check("http://127.0.0.1:9/mcp", true).await.is_ok());
        assert!(tests.check("http://10.0.0.8/mcp", true).await.is_err());
    }

    #[tokio::test]
    async fn the_client_refuses_names_that_resolve_to_private_addresses() {
        let reach = Arc::new(Reach::default());
        let client = reach.client().expect("client");
        let err = client
            .get("http://localhost:9/mcp")
            .send()
            .await
            .expect_err("refused");
        let chain = toolgate_core::error::chain(&err);
        assert!(chain.contains("not a public address"), "{chain}");
    }
}
