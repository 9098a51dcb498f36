//! Tenant upstreams' credentials, sealed at rest with ChaCha20-Poly1305 under the
//! deployment's key and bound to the tenant, the upstream's name and URL (the associated
//! data): a sealed value copied to another row, tenant or URL does not open. Principals'
//! own credentials are sealed the same way, bound to the principal too.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use toolgate_core::stores::UpstreamStore;
use toolgate_core::{PrincipalId, TenantId};
use uuid::Uuid;

/// Sealed values start with this version byte.
const SEALED_V1: u8 = 1;

/// How long a principal's own credential, once read, is used before it is read again
/// (a change made on this instance applies at once; on another, within this).
const PERSONAL_CACHE: Duration = Duration::from_secs(5);

/// Principals' own credentials for tenant upstreams that call with them: sealed like the
/// upstream's, bound to the tenant, the upstream's name and URL and the principal (a
/// credential never follows its upstream to another server, nor serves another
/// principal), read through a short cache.
pub struct Personals<S> {
    pub(super) store: S,
    pub(super) sealer: Arc<Sealer>,
    pub(super) cache:
        std::sync::Mutex<HashMap<PersonalKey, (Option<Credentials>, std::time::Instant)>>,
}

/// An upstream and a principal.
type PersonalKey = (Uuid, PrincipalId);

impl<S: UpstreamStore> Personals<S> {
    /// The name a principal's credential is sealed under (with the tenant and URL).
    fn sealed_as(upstream: &str, principal: PrincipalId) -> String {
        format!("{upstream}\0principal\0{principal}")
    }

    /// Stores `principal`'s own credential for upstream `id` (named `name`, at `url`),
    /// sealed; replaces any before.
    pub async fn put(
        &self,
        tenant: TenantId,
        (id, name, url): (Uuid, &str, &str),
        principal: PrincipalId,
        credentials: &Credentials,
    ) -> anyhow::Result<()> {
        let sealed =
            self.sealer
                .seal(tenant, &Self::sealed_as(name, principal), url, credentials)?;
        self.store
            .put_personal_credential(tenant, id, principal, &sealed)
            .await?;
        self.forget(id, principal);
        Ok(())
    }

    /// Forgets `principal`'s own credential for upstream `id`; whether there was one.
    pub async fn delete(
        &self,
        tenant: TenantId,
        id: Uuid,
        principal: PrincipalId,
    ) -> Result<bool, S::Error> {
        let removed = self
            .store
            .delete_personal_credential(tenant, id, principal)
            .await?;
        self.forget(id, principal);
        Ok(removed)
    }

    /// Drops what this instance remembers of a principal's credential (changed here).
    fn forget(&self, upstream: Uuid, principal: PrincipalId) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(upstream, principal));
    }

    /// `principal`'s own credential for upstream `upstream` (named `name`, at `url`),
    /// through the cache; `None` when none is stored, or one sealed for another URL.
    pub async fn load(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        name: &str,
        url: &str,
        principal: PrincipalId,
    ) -> Result<Option<Credentials>, String> {
        let key = (upstream, principal);
        if let Some((credential, at)) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < PERSONAL_CACHE
        {
            return Ok(credential.clone());
        }
        let sealed = self
            .store
            .personal_credential(tenant, upstream, principal)
            .await
            .map_err(|e| format!("could not read your credential: {e}"))?;
        // One sealed for another URL (the upstream moved) does not open: as if none.
        let credential = sealed.and_then(|sealed| {
            self.sealer
                .open(tenant, &Self::sealed_as(name, principal), url, &sealed)
        });
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (credential.clone(), std::time::Instant::now()));
        Ok(credential)
    }
}

/// One upstream's view of [`Personals`].
pub(super) struct PersonalFor<S> {
    pub(super) personals: Arc<Personals<S>>,
    pub(super) upstream: Uuid,
    pub(super) name: String,
    pub(super) url: String,
}

#[async_trait::async_trait]
impl<S: UpstreamStore> crate::upstream::PersonalCredentials for PersonalFor<S> {
    async fn credential(
        &self,
        ctx: &toolgate_core::CallContext,
    ) -> Result<crate::upstream::PersonalCredential, String> {
        let (tenant, principal) = (ctx.auth.tenant, ctx.auth.principal.id);
        self.personals
            .load(tenant, self.upstream, &self.name, &self.url, principal)
            .await?
            .map(|c| crate::upstream::PersonalCredential {
                headers: c.headers,
                bearer: c.bearer,
            })
            .ok_or_else(|| {
                format!(
                    "{} calls with each principal's own credential, and you stored none (PUT /v1/upstreams/{}/credentials)",
                    self.name, self.name
                )
            })
    }
}

/// The secret part of a tenant upstream.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Credentials {
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub bearer: Option<String>,
}

impl Credentials {
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.bearer.is_none()
    }
}

/// Seals and opens credentials.
pub struct Sealer {
    key: LessSafeKey,
    random: SystemRandom,
}

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Self {
        let key = UnboundKey::new(&CHACHA20_POLY1305, key).expect("a 32-byte key fits ChaCha20");
        Self {
            key: LessSafeKey::new(key),
            random: SystemRandom::new(),
        }
    }

    fn context(tenant: TenantId, name: &str, url: &str) -> Vec<u8> {
        format!("toolgate upstream credentials\0{tenant}\0{name}\0{url}").into_bytes()
    }

    /// `version || nonce || ciphertext || tag`.
    pub fn seal(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        credentials: &Credentials,
    ) -> anyhow::Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
        let mut body = serde_json::to_vec(credentials)?;
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::context(tenant, name, url)),
                &mut body,
            )
            .map_err(|_| anyhow::anyhow!("sealing failed"))?;
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + body.len());
        sealed.push(SEALED_V1);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// `None` when the value was sealed under another key, or for another tenant, name
    /// or URL, or was altered.
    pub fn open(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        sealed: &[u8],
    ) -> Option<Credentials> {
        let (&version, rest) = sealed.split_first()?;
        if version != SEALED_V1 || rest.len() < NONCE_LEN {
            return None;
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(
                nonce,
                Aad::from(Self::context(tenant, name, url)),
                &mut body,
            )
            .ok()?;
        serde_json::from_slice(plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            headers: [("x-api-key".to_owned(), "hunter2".to_owned())].into(),
            bearer: Some("s3cr3t".into()),
        }
    }

    #[test]
    fn sealed_credentials_open_only_for_their_tenant_name_url_and_key() {
        let sealer = Sealer::new(&[7; 32]);
        let (tenant, other) = (TenantId(Uuid::now_v7()), TenantId(Uuid::now_v7()));
        let url = "https://mcp.example.com/mcp";
        let sealed = sealer
            .seal(tenant, "docs", url, &credentials())
            .expect("seal");
        assert!(!String::from_utf8_lossy(&sealed).contains("hunter2"));
        let opened = sealer.open(tenant, "docs", url, &sealed).expect("opens");
        assert_eq!(opened.headers["x-api-key"], "hunter2");
        assert_eq!(opened.bearer.as_deref(), Some("s3cr3t"));
        assert!(sealer.open(other, "docs", url, &sealed).is_none());
        assert!(sealer.open(tenant, "wiki", url, &sealed).is_none());
        assert!(
            sealer
                .open(tenant, "docs", "https://evil.example/mcp", &sealed)
                .is_none()
        );
        assert!(
            Sealer::new(&[8; 32])
                .open(tenant, "docs", url, &sealed)
                .is_none()
        );
        let mut altered = sealed.clone();
        *altered.last_mut().expect("bytes") ^= 1;
        assert!(sealer.open(tenant, "docs", url, &altered).is_none());
        // Two seals of the same credentials differ (a fresh nonce each).
        assert_ne!(
            sealed,
            sealer
                .seal(tenant, "docs", url, &credentials())
                .expect("seal")
        );
    }
}
