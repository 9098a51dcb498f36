//! Each caller's own credential for an upstream, for upstreams that call with it: one a
//! principal stored ([`PersonalCredentials`] over the store), or a token its identity
//! provider issued in exchange for the caller's own ([`super::exchange`]).

use super::*;

/// A principal's own credential for an upstream: sent instead of the upstream's bearer
/// token, its headers over the upstream's.
#[derive(Clone, Default, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
pub struct PersonalCredential {
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub bearer: Option<String>,
}

impl std::fmt::Debug for PersonalCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersonalCredential")
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("bearer", &self.bearer.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Where an upstream's calls get each caller's own credential.
#[async_trait::async_trait]
pub trait PersonalCredentials: Send + Sync {
    /// The credential `ctx`'s caller calls this upstream with; an error saying why when
    /// it has none (nothing stored, no token to exchange, the exchange refused).
    async fn credential(&self, ctx: &CallContext) -> Result<PersonalCredential, String>;
}

/// An upstream's source of principals' own credentials, if calls use them.
#[derive(Clone, Default)]
pub struct Personal(pub Option<Arc<dyn PersonalCredentials>>);

impl std::fmt::Debug for Personal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Personal(per principal)"
        } else {
            "Personal(none)"
        })
    }
}
