//! Where a request comes from, and how many unknown API keys that source may have looked
//! up.
//!
//! A request's source is its client's address: the connection's peer, or, when the peer
//! is one of `http.trusted_proxies`, the address the proxies put in `X-Forwarded-For`
//! (read from the right, past every trusted hop). IPv6 sources count by their /64, the
//! block one host is usually given.
//!
//! An API key not in the cache is looked up in the store; one that is not found costs a
//! store round trip for nothing. Past `http.unknown_keys_per_minute` such keys in a
//! minute, a source's further uncached keys are refused (429, `Retry-After`) without
//! one, so that a flood of guessed keys cannot take the connections that key lookups,
//! sweeps and `/readyz` share. Keys already cached, and JWTs, are never refused here.
//! Behind a proxy that is not listed, every client has the proxy's address and shares
//! its count.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use ipnet::IpNet;

/// The window unknown keys are counted over.
const WINDOW: Duration = Duration::from_secs(60);
/// Sources counted at once; past it the expired are dropped, and if none are, all.
const MAX_SOURCES: usize = 100_000;

/// A network named by `text`: `10.0.0.0/8`, or one address.
pub fn network(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}

pub struct Sources {
    trusted: Vec<IpNet>,
    per_minute: u32,
    /// Each source's window: when it began, and the unknown keys counted in it.
    seen: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl Default for Sources {
    /// No trusted proxy, and no bound.
    fn default() -> Self {
        Self::new(Vec::new(), 0)
    }
}

impl Sources {
    /// `per_minute` 0: no bound.
    pub fn new(trusted: Vec<IpNet>, per_minute: u32) -> Self {
        Self {
            trusted,
            per_minute,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The address `parts` came from (see the module's documentation); `None` outside a
    /// connection.
    pub fn client(&self, parts: &Parts) -> Option<IpAddr> {
        let peer = parts.extensions.get::<ConnectInfo<SocketAddr>>()?.0.ip();
        let forwarded: Vec<&str> = parts
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        Some(through(peer.to_canonical(), &forwarded, &self.trusted))
    }

    /// Whether `source` may have one more unknown key looked up; else how long until it
    /// may.
    pub fn admit(&self, source: IpAddr) -> Result<(), Duration> {
        self.admit_at(source, Instant::now())
    }

    /// Counts an unknown key from `source`; true when that used up its minute.
    pub fn unknown_key(&self, source: IpAddr) -> bool {
        self.count_at(source, Instant::now())
    }

    fn admit_at(&self, source: IpAddr, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        match seen.get(&key(source)) {
            Some(&(began, n)) if n >= self.per_minute && now < began + WINDOW => {
                Err(began + WINDOW - now)
            }
            _ => Ok(()),
        }
    }

    fn count_at(&self, source: IpAddr, now: Instant) -> bool {
        if self.per_minute == 0 {
            return false;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.len() >= MAX_SOURCES && !seen.contains_key(&key(source)) {
            seen.retain(|_, (began, _)| now < *began + WINDOW);
            if seen.len() >= MAX_SOURCES {
                seen.clear();
            }
        }
        let window = seen.entry(key(source)).or_insert((now, 0));
        if now >= window.0 + WINDOW {
            *window = (now, 0);
        }
        window.1 += 1;
        window.1 == self.per_minute
    }
}

/// The client's address: `peer`, or while the address in hand is a trusted proxy's, the
/// next `X-Forwarded-For` entry from the right. An entry that is not an address ends the
/// walk at the proxy that sent it.
fn through(peer: IpAddr, forwarded: &[&str], trusted: &[IpNet]) -> IpAddr {
    let mut client = peer;
    for hop in forwarded.iter().rev() {
        if !trusted.iter().any(|net| net.contains(&client)) {
            break;
        }
        match hop.parse::<IpAddr>() {
            Ok(address) => client = address.to_canonical(),
            Err(_) => break,
        }
    }
    client
}

/// What a source is counted as: an IPv4 address, or an IPv6 address's /64.
fn key(source: IpAddr) -> IpAddr {
    match source {
        IpAddr::V4(_) => source,
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & !u128::from(u64::MAX))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn the_client_is_read_through_trusted_proxies_only() {
        let trusted = vec![
            network("10.0.0.0/8").expect("net"),
            network("192.0.2.1").expect("ip"),
        ];
        // A direct client: its forwarded header is its own say, not believed.
        assert_eq!(
            through(ip("203.0.113.9"), &["1.2.3.4"], &trusted),
            ip("203.0.113.9")
        );
        // Through two trusted hops, to the first address no trusted proxy has.
        assert_eq!(
            through(
                ip("10.0.0.5"),
                &["1.2.3.4", "203.0.113.9", "192.0.2.1"],
                &trusted
            ),
            ip("203.0.113.9")
        );
        // Nothing forwarded, or garbage: the proxy itself.
        assert_eq!(through(ip("10.0.0.5"), &[], &trusted), ip("10.0.0.5"));
        assert_eq!(
            through(ip("10.0.0.5"), &["unknown"], &trusted),
            ip("10.0.0.5")
        );
        // No trusted proxy: the peer, whatever it forwards.
        assert_eq!(through(ip("10.0.0.5"), &["1.2.3.4"], &[]), ip("10.0.0.5"));
    }

    #[test]
    fn ipv6_sources_count_by_their_64() {
        assert_eq!(
            key(ip("2001:db8:1:2:aaaa::1")),
            key(ip("2001:db8:1:2:bbbb::2"))
        );
        assert_ne!(key(ip("2001:db8:1:2::1")), key(ip("2001:db8:1:3::1")));
        assert_eq!(key(ip("192.0.2.7")), ip("192.0.2.7"));
    }

    #[test]
    fn a_source_past_its_unknown_keys_waits_for_its_minute_to_end() {
        let sources = Sources::new(Vec::new(), 3);
        let (a, b) = (ip("192.0.2.7"), ip("192.0.2.8"));
        let t0 = Instant::now();
        let counted: Vec<bool> = (0..3).map(|_| sources.count_at(a, t0)).collect();
        assert_eq!(
            counted,
            [false, false, true],
            "the third used the minute up"
        );
        let later = t0 + Duration::from_secs(20);
        assert_eq!(sources.admit_at(a, later), Err(Duration::from_secs(40)));
        assert_eq!(sources.admit_at(b, later), Ok(()), "another source is not");
        assert_eq!(sources.admit_at(a, t0 + WINDOW), Ok(()), "a new minute");
        assert!(!sources.count_at(a, t0 + WINDOW), "counted from one again");
        let off = Sources::default();
        assert!(!off.count_at(a, t0) && off.admit_at(a, t0).is_ok());
    }
}
