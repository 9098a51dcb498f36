//! Vendor `_meta` keys passed on only to the clients they are meant for.

use super::*;

/// Which clients see which vendor-specific `_meta` entries of tools and results.
///
/// Tools declare vendor metadata once, keyed `vendor/name` (`openai/outputTemplate`); a
/// rule names a key prefix and the clients, by `clientInfo.name` glob (case-insensitive),
/// that asked for it. An entry reaches a client only when a rule for its prefix matches
/// that client: deny by default, so a client never receives another vendor's keys and a
/// client that did not identify itself receives none.
#[derive(Clone, Debug, Default)]
pub struct VendorMeta {
    rules: Vec<(String, globset::GlobSet)>,
}

impl VendorMeta {
    /// Rules as `(key prefix, client name globs)`.
    pub fn new<P, G>(rules: impl IntoIterator<Item = (P, G)>) -> Result<Self, globset::Error>
    where
        P: Into<String>,
        G: IntoIterator,
        G::Item: AsRef<str>,
    {
        let mut built = Vec::new();
        for (prefix, globs) in rules {
            let mut set = globset::GlobSetBuilder::new();
            for glob in globs {
                set.add(
                    globset::GlobBuilder::new(glob.as_ref())
                        .case_insensitive(true)
                        .build()?,
                );
            }
            built.push((prefix.into(), set.build()?));
        }
        Ok(Self { rules: built })
    }

    /// The vendor prefixes `client` may see, matched once for a whole listing or call.
    pub fn for_client(&self, client: Option<&ClientInfo>) -> VendorPrefixes<'_> {
        VendorPrefixes(client.map_or_else(Vec::new, |client| {
            self.rules
                .iter()
                .filter(|(_, clients)| clients.is_match(&client.name))
                .map(|(prefix, _)| prefix.as_str())
                .collect()
        }))
    }

    /// `meta` as `client` may see it, for one result: no matching at all when empty.
    pub fn filter_for(
        &self,
        client: Option<&ClientInfo>,
        meta: &serde_json::Map<String, Value>,
    ) -> Option<rmcp::model::MetaObject> {
        if meta.is_empty() {
            return None;
        }
        self.for_client(client).filter(meta)
    }
}

/// The vendor `_meta` prefixes one client may see (none for an unidentified client).
pub struct VendorPrefixes<'a>(Vec<&'a str>);

impl VendorPrefixes<'_> {
    /// The entries of `meta` under these prefixes; `None` when there are none.
    pub fn filter(&self, meta: &serde_json::Map<String, Value>) -> Option<rmcp::model::MetaObject> {
        if self.0.is_empty() || meta.is_empty() {
            return None;
        }
        let seen: serde_json::Map<String, Value> = meta
            .iter()
            .filter(|(key, _)| self.0.iter().any(|p| key.starts_with(p)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        (!seen.is_empty()).then_some(rmcp::model::MetaObject(seen))
    }
}
