//! What every crate's configuration section is made of: a [`Secret`] value, the checks
//! sections share, and [`Problems`], how a section reports what is wrong with it.
//!
//! Each crate owns its section (`toolgate_tools::config::ToolsConfig`,
//! `toolgate_mcp::config::UpstreamEntry`, …) and its `problems()`, which start-up and the
//! REST API both use; the server only layers the sources and names each problem by its
//! full key.

use std::fmt;

use serde::Deserialize;

/// What is wrong with a section: each problem by its key within the section (`a.b`,
/// `list[2].c`) and what to do about it.
pub type Problems = Vec<(String, String)>;

/// `problems` of the section at `key`, named by their full keys.
pub fn within(key: &str, problems: Problems) -> Problems {
    problems
        .into_iter()
        .map(|(field, problem)| {
            let full = if field.is_empty() {
                key.to_owned()
            } else {
                format!("{key}.{field}")
            };
            (full, problem)
        })
        .collect()
}

/// A value that must never be printed: its `Debug` shows `***`.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// `Ok` when `url` is an absolute `http(s)` URL with a host; else what is wrong with it
/// (not repeating `url`, which may hold a password: the problem names its setting).
pub fn http_url(url: &str) -> Result<(), String> {
    match url::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "https" | "http") && parsed.host().is_some() => {
            Ok(())
        }
        Ok(parsed) => Err(format!(
            "is not an http(s) URL with a host (its scheme: {:?})",
            parsed.scheme()
        )),
        Err(err) => Err(format!("is not a URL: {err}")),
    }
}

/// CIDR networks (or single addresses) from configuration.
pub fn networks(networks: &[String]) -> Result<Vec<ipnet::IpNet>, String> {
    networks
        .iter()
        .map(|n| {
            n.parse::<ipnet::IpNet>()
                .or_else(|_| n.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("{n:?} is not a CIDR network"))
        })
        .collect()
}

/// A 32-byte key from 64 hex digits.
pub fn hex_key(hex_digits: &str) -> Option<[u8; 32]> {
    hex::decode(hex_digits.trim()).ok()?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_name_what_is_wrong() {
        assert!(http_url("https://idp.example/").is_ok());
        assert!(http_url("ftp://idp.example/").is_err());
        assert!(http_url("idp.example").is_err());
        // What is wrong is said without the value, which may hold a password.
        for bad in [
            "ftp://user:s3cret@idp.example/",
            "https://user:s3cret@[::1/",
        ] {
            let problem = http_url(bad).expect_err(bad);
            assert!(!problem.contains("s3cret"), "{problem}");
        }
        assert_eq!(
            networks(&["10.0.0.0/8".into(), "127.0.0.1".into()]).map(|n| n.len()),
            Ok(2)
        );
        assert!(networks(&["ten".into()]).is_err());
        assert!(hex_key(&"ab".repeat(32)).is_some());
        assert!(hex_key("abc").is_none());
        assert_eq!(
            within(
                "tools",
                vec![("a".into(), "x".into()), (String::new(), "y".into())]
            ),
            vec![("tools.a".into(), "x".into()), ("tools".into(), "y".into())]
        );
        assert_eq!(format!("{:?}", Secret::new("hunter2")), "Secret(***)");
    }
}
