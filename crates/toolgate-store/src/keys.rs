//! API key secrets: `tg_` followed by 64 hex characters (256 random bits). Stored only as
//! a SHA-256 hash; a key this long needs no slow hash to resist guessing.

/// Every key starts with this.
pub const PREFIX: &str = "tg_";
/// Characters of the key kept (in clear) for listings.
pub const SHOWN: usize = 10;

/// A new random key.
pub fn generate() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("{PREFIX}{}", hex::encode(bytes)))
}

/// The stored hash of a key.
pub fn hash(secret: &str) -> String {
    toolgate_core::sha256_hex(secret.as_bytes())
}

/// Whether `s` has the shape of one of our keys (so other bearer tokens are tried as JWTs).
pub fn looks_like_key(s: &str) -> bool {
    s.len() == PREFIX.len() + 64
        && s.starts_with(PREFIX)
        && s[PREFIX.len()..].bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_random_and_recognisable() {
        let a = generate().expect("random");
        let b = generate().expect("random");
        assert_ne!(a, b);
        assert!(looks_like_key(&a), "{a}");
        assert!(!looks_like_key("eyJhbGciOi.x.y"));
        assert_eq!(hash(&a).len(), 64);
    }
}
