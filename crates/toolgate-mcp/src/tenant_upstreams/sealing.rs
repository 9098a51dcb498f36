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

/// The name a principal's own credential is sealed under (with the tenant and URL).
fn sealed_as(upstream: &str, principal: PrincipalId) -> String {
    format!("{upstream}\0principal\0{principal}")
}

impl<S: UpstreamStore> Personals<S> {
    /// Stores `principal`'s own credential for upstream `id` (named `name`, at `url`),
    /// sealed; replaces any before.
    pub async fn put(
        &self,
        tenant: TenantId,
        (id, name, url): (Uuid, &str, &str),
        principal: PrincipalId,
        credentials: &Credentials,
    ) -> anyhow::Result<()> {
        let sealed = self
            .sealer
            .seal(tenant, &sealed_as(name, principal), url, credentials)?;
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
                .open(tenant, &sealed_as(name, principal), url, &sealed)
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

/// Seals and opens credentials: seals with the current key, opens with it or with any
/// previous key still configured (a key being rotated out, until [`reseal_all`] has
/// moved every value to the current one).
pub struct Sealer {
    /// The current key first.
    keys: Vec<LessSafeKey>,
    random: SystemRandom,
}

/// What sealing one stored value again came to.
#[derive(Debug, PartialEq)]
pub enum Resealed {
    /// It opens with the current key already.
    Current,
    /// It opened with a previous key: the same credentials, sealed with the current one.
    Sealed(Vec<u8>),
    /// No configured key opens it (or it is not bound to this tenant, name and URL).
    Unopened,
}

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Self {
        Self::rotating(key, &[])
    }

    /// Seals with `current`; opens with it or any of `previous`.
    pub fn rotating(current: &[u8; 32], previous: &[[u8; 32]]) -> Self {
        let key = |bytes: &[u8; 32]| {
            LessSafeKey::new(
                UnboundKey::new(&CHACHA20_POLY1305, bytes).expect("a 32-byte key fits ChaCha20"),
            )
        };
        Self {
            keys: std::iter::once(current).chain(previous).map(key).collect(),
            random: SystemRandom::new(),
        }
    }

    fn context(tenant: TenantId, name: &str, url: &str) -> Vec<u8> {
        format!("toolgate upstream credentials\0{tenant}\0{name}\0{url}").into_bytes()
    }

    /// `version || nonce || ciphertext || tag`, under the current key.
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
        self.keys[0]
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

    /// `None` when the value was sealed under none of the configured keys, or for
    /// another tenant, name or URL, or was altered.
    pub fn open(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        sealed: &[u8],
    ) -> Option<Credentials> {
        self.opened(tenant, name, url, sealed).map(|(c, _)| c)
    }

    /// The credentials and the position of the key that opened them (0: the current).
    fn opened(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        sealed: &[u8],
    ) -> Option<(Credentials, usize)> {
        let (&version, rest) = sealed.split_first()?;
        if version != SEALED_V1 || rest.len() < NONCE_LEN {
            return None;
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let context = Self::context(tenant, name, url);
        self.keys.iter().enumerate().find_map(|(at, key)| {
            let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
            let mut body = body.to_vec();
            let plain = key
                .open_in_place(nonce, Aad::from(&context), &mut body)
                .ok()?;
            Some((serde_json::from_slice(plain).ok()?, at))
        })
    }

    /// `sealed`, sealed again with the current key when a previous key opens it.
    pub fn reseal(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        sealed: &[u8],
    ) -> anyhow::Result<Resealed> {
        Ok(match self.opened(tenant, name, url, sealed) {
            None => Resealed::Unopened,
            Some((_, 0)) => Resealed::Current,
            Some((credentials, _)) => {
                Resealed::Sealed(self.seal(tenant, name, url, &credentials)?)
            }
        })
    }
}

/// What [`reseal_all`] did, by count; `unopened` names each value no key opened
/// (tenant, upstream and, for a principal's own, the principal), never its content.
#[derive(Debug, Default)]
pub struct Rotation {
    pub resealed: usize,
    pub current: usize,
    /// Changed by someone else between the read and the write: run it again.
    pub changed_meanwhile: usize,
    pub unopened: Vec<String>,
}

/// One stored sealed value, with what it is bound to.
struct Stored {
    tenant: TenantId,
    upstream: Uuid,
    /// For a principal's own credential.
    principal: Option<PrincipalId>,
    /// The name and URL it is sealed under; `None` when the upstream's stored
    /// configuration (or, for a principal's, the upstream) is gone or unreadable.
    bound: Option<(String, String)>,
    sealed: Vec<u8>,
    /// What it is, for the report: tenant, upstream and principal, never the content.
    what: String,
}

/// Seals every stored credential (tenant upstreams' and principals' own) that a previous
/// key opens again with the current key, each written only if it is still the value that
/// was read: a credential replaced meanwhile is left as its writer made it. Once it
/// reports nothing unopened and nothing changed meanwhile, the previous keys can go.
pub async fn reseal_all<S: UpstreamStore>(store: &S, sealer: &Sealer) -> anyhow::Result<Rotation> {
    let mut upstreams = HashMap::new();
    for (id, _) in store.upstream_revisions().await? {
        if let Some(record) = store.upstream_by_id(id).await? {
            let url = serde_json::from_value::<super::UpstreamSettings>(record.config.clone())
                .map(|s| s.url)
                .ok();
            upstreams.insert(id, (record, url));
        }
    }
    let mut stored: Vec<Stored> = upstreams
        .values()
        .filter_map(|(record, url)| {
            Some(Stored {
                tenant: record.tenant,
                upstream: record.id,
                principal: None,
                bound: url.clone().map(|url| (record.name.clone(), url)),
                sealed: record.credentials.clone()?,
                what: format!("tenant {} upstream {}", record.tenant, record.name),
            })
        })
        .collect();
    for (tenant, upstream, principal, sealed) in store.personal_credentials().await? {
        let record = upstreams.get(&upstream);
        let bound = match record {
            Some((record, Some(url))) => Some((sealed_as(&record.name, principal), url.clone())),
            _ => None,
        };
        let named = record.map_or_else(|| upstream.to_string(), |(r, _)| r.name.clone());
        stored.push(Stored {
            tenant,
            upstream,
            principal: Some(principal),
            bound,
            sealed,
            what: format!("tenant {tenant} upstream {named} principal {principal}"),
        });
    }
    let mut done = Rotation::default();
    for one in stored {
        let outcome = match &one.bound {
            Some((name, url)) => sealer.reseal(one.tenant, name, url, &one.sealed)?,
            None => Resealed::Unopened,
        };
        match outcome {
            Resealed::Current => done.current += 1,
            Resealed::Unopened => done.unopened.push(one.what),
            Resealed::Sealed(new) => {
                let written = store
                    .replace_sealed(one.tenant, one.upstream, one.principal, &one.sealed, &new)
                    .await?;
                if written {
                    done.resealed += 1;
                } else {
                    done.changed_meanwhile += 1;
                }
            }
        }
    }
    Ok(done)
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

    #[test]
    fn a_rotated_key_opens_what_it_sealed_and_reseal_moves_it_to_the_current_key() {
        let tenant = TenantId(Uuid::now_v7());
        let url = "https://mcp.example.com/mcp";
        let old = Sealer::new(&[7; 32]);
        let sealed = old.seal(tenant, "docs", url, &credentials()).expect("seal");
        // The key changed without a previous key: nothing opens (as before rotation).
        assert!(
            Sealer::new(&[9; 32])
                .open(tenant, "docs", url, &sealed)
                .is_none()
        );
        let rotating = Sealer::rotating(&[9; 32], &[[7; 32]]);
        let opened = rotating.open(tenant, "docs", url, &sealed).expect("opens");
        assert_eq!(opened.bearer.as_deref(), Some("s3cr3t"));
        let Resealed::Sealed(moved) = rotating
            .reseal(tenant, "docs", url, &sealed)
            .expect("reseal")
        else {
            panic!("sealed again");
        };
        // Under the new key alone, still bound to its tenant, name and URL.
        let new = Sealer::new(&[9; 32]);
        assert_eq!(
            new.open(tenant, "docs", url, &moved)
                .expect("opens")
                .headers["x-api-key"],
            "hunter2"
        );
        assert!(new.open(tenant, "wiki", url, &moved).is_none());
        assert!(old.open(tenant, "docs", url, &moved).is_none());
        assert_eq!(
            rotating
                .reseal(tenant, "docs", url, &moved)
                .expect("reseal"),
            Resealed::Current
        );
        assert_eq!(
            rotating
                .reseal(tenant, "wiki", url, &sealed)
                .expect("reseal"),
            Resealed::Unopened
        );
        // New values are sealed with the current key.
        let fresh = rotating
            .seal(tenant, "docs", url, &credentials())
            .expect("seal");
        assert!(new.open(tenant, "docs", url, &fresh).is_some());
        assert!(old.open(tenant, "docs", url, &fresh).is_none());
    }
}
