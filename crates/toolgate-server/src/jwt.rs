//! JWT bearer tokens.
//!
//! Keys come either from a shared secret (HS256 only) or from a JWKS URL (RS256, ES256,
//! EdDSA only) — never both, so a token cannot pick an HMAC algorithm and be checked with
//! a public key as its secret (HS/RS confusion), and `alg: none` is never accepted.
//! `exp` is required, `nbf` honoured, both with a small leeway; `iss` and `aud` must match
//! the configuration. The JWKS is fetched on first use and again when a token names an
//! unknown `kid`, at most once per `jwks_refresh_secs` (30 by default).
//!
//! A token with a `crit` header is refused: it names extensions this gateway does not
//! understand (RFC 7515 §4.1.11).
//!
//! The JWKS is fetched outside the key lock, under a short deadline
//! ([`JWKS_FETCH_TIMEOUT`]): a slow or hanging JWKS endpoint delays only the token whose
//! `kid` is unknown, never logins with keys already known.
//!
//! Claims map to the caller: the tenant claim holds the tenant's *name* (and, with
//! `tenants` set, only those tenants may be named by this issuer); the subject becomes a
//! stable principal id (UUIDv5 of tenant id and subject); roles and scopes come from their
//! claims (an array, or a space-separated string as in OAuth `scope`). Operator-level
//! scopes (`tenants:manage`) never come from a token unless the operator says so
//! (`operator_scopes = true`): an IdP's tenant admin must not become the gateway's
//! operator by writing a claim.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio::sync::Mutex;
use toolgate_core::{
    AuthContext, ErrorKind, Principal, PrincipalId, PrincipalKind, TenantId, ToolError,
};
use toolgate_store::Store;

use toolgate_core::settings::Secret;

/// Longest a JWKS fetch may take.
pub const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(3);

/// `[auth.jwt]` in the configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtConfig {
    /// Required `iss`.
    pub issuer: String,
    /// Required `aud`: this gateway's audience. Tokens minted for others are refused.
    pub audience: String,
    /// Shared secret for HS256 tokens.
    pub hs256_secret: Option<Secret>,
    /// Secrets being rotated out: tokens they signed are accepted until they expire
    /// (docs/OPERATIONS.md, "Rotating keys").
    #[serde(default)]
    pub hs256_previous_secrets: Vec<Secret>,
    /// JWKS endpoint for RS256, ES256 and EdDSA tokens.
    pub jwks_url: Option<String>,
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// Least time between two JWKS fetches, in seconds.
    #[serde(default = "default_jwks_refresh")]
    pub jwks_refresh_secs: u64,
    #[serde(default = "default_tenant_claim")]
    pub tenant_claim: String,
    #[serde(default = "default_subject_claim")]
    pub subject_claim: String,
    #[serde(default = "default_roles_claim")]
    pub roles_claim: String,
    #[serde(default = "default_scopes_claim")]
    pub scopes_claim: String,
    /// The tenants this issuer's tokens may name; empty: any tenant.
    #[serde(default)]
    pub tenants: Vec<String>,
    /// Whether operator-level scopes (`tenants:manage`) in a token's scope claim are
    /// honoured. Off by default: they are dropped.
    #[serde(default)]
    pub operator_scopes: bool,
}

fn default_leeway() -> u64 {
    30
}
fn default_jwks_refresh() -> u64 {
    30
}
fn default_tenant_claim() -> String {
    "tenant".into()
}
fn default_subject_claim() -> String {
    "sub".into()
}
fn default_roles_claim() -> String {
    "roles".into()
}
fn default_scopes_claim() -> String {
    "scope".into()
}

impl JwtConfig {
    /// Problems with this section, by key.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        match (&self.hs256_secret, &self.jwks_url) {
            (Some(_), Some(_)) => problems.push((
                "auth.jwt".into(),
                "set hs256_secret or jwks_url, not both (mixing HMAC and public keys invites algorithm confusion)".into(),
            )),
            (None, None) => problems.push(("auth.jwt".into(), "set hs256_secret or jwks_url".into())),
            (Some(secret), None) if secret.expose().len() < 32 => {
                problems.push(("auth.jwt.hs256_secret".into(), "must be at least 32 bytes".into()));
            }
            _ => {}
        }
        if !self.hs256_previous_secrets.is_empty() && self.hs256_secret.is_none() {
            problems.push((
                "auth.jwt.hs256_previous_secrets".into(),
                "only with hs256_secret".into(),
            ));
        }
        for (i, secret) in self.hs256_previous_secrets.iter().enumerate() {
            if secret.expose().len() < 32 {
                problems.push((
                    format!("auth.jwt.hs256_previous_secrets[{i}]"),
                    "must be at least 32 bytes".into(),
                ));
            }
        }
        if self.audience.is_empty() {
            problems.push(("auth.jwt.audience".into(), "must not be empty".into()));
        }
        if let Some(url) = &self.jwks_url
            && let Err(problem) = toolgate_core::settings::http_url(url)
        {
            problems.push(("auth.jwt.jwks_url".into(), problem));
        }
        problems
    }
}

enum Keys {
    /// The current secret first, then those being rotated out; shared with each
    /// verification, not copied.
    Hs256(Arc<[DecodingKey]>),
    Jwks {
        url: String,
        set: Option<JwkSet>,
        fetched: Option<Instant>,
    },
}

/// Verifies JWTs and maps their claims to an [`AuthContext`].
pub struct JwtVerifier {
    config: JwtConfig,
    keys: Mutex<Keys>,
    store: Store,
    http: reqwest::Client,
    tenants: Mutex<HashMap<String, TenantId>>,
}

fn invalid(reason: impl std::fmt::Display) -> ToolError {
    ToolError::new(
        ErrorKind::Unauthenticated,
        format!("invalid token: {reason}"),
    )
}

impl JwtVerifier {
    pub fn new(config: JwtConfig, store: Store) -> Self {
        let keys = match (&config.hs256_secret, &config.jwks_url) {
            (Some(secret), _) => Keys::Hs256(
                std::iter::once(secret)
                    .chain(&config.hs256_previous_secrets)
                    .map(|s| DecodingKey::from_secret(s.expose().as_bytes()))
                    .collect::<Vec<_>>()
                    .into(),
            ),
            (None, url) => Keys::Jwks {
                url: url.clone().unwrap_or_default(),
                set: None,
                fetched: None,
            },
        };
        Self {
            config,
            keys: Mutex::new(keys),
            store,
            http: reqwest::Client::builder()
                .timeout(JWKS_FETCH_TIMEOUT)
                .connect_timeout(JWKS_FETCH_TIMEOUT)
                .build()
                .unwrap_or_default(),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    pub async fn verify(&self, token: &str) -> Result<AuthContext, ToolError> {
        let header = header(token)?;
        let (keys, alg) = self.key_for(&header).await?;
        let mut validation = Validation::new(alg);
        validation.algorithms = vec![alg];
        validation.leeway = self.config.leeway_secs;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        // Each key in turn while the signature is what fails (a rotated HS256 secret).
        let mut failed = None;
        for key in keys.iter() {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
                Ok(data) => return self.context(&data.claims).await,
                Err(e) if *e.kind() == jsonwebtoken::errors::ErrorKind::InvalidSignature => {
                    failed = Some(e);
                }
                Err(e) => return Err(invalid(e.kind_name())),
            }
        }
        Err(invalid(
            failed.map_or_else(|| "no key".into(), |e| e.kind_name()),
        ))
    }

    /// The key and algorithm to check `header`'s token with, refusing algorithms this
    /// configuration does not use.
    async fn key_for(
        &self,
        header: &jsonwebtoken::Header,
    ) -> Result<(Arc<[DecodingKey]>, Algorithm), ToolError> {
        let url = {
            let mut keys = self.keys.lock().await;
            match &mut *keys {
                Keys::Hs256(keys) => {
                    return match header.alg {
                        Algorithm::HS256 => Ok((keys.clone(), Algorithm::HS256)),
                        other => Err(invalid(format!("algorithm {other:?} is not accepted"))),
                    };
                }
                Keys::Jwks { url, set, fetched } => {
                    if !matches!(
                        header.alg,
                        Algorithm::RS256 | Algorithm::ES256 | Algorithm::EdDSA
                    ) {
                        return Err(invalid(format!(
                            "algorithm {:?} is not accepted",
                            header.alg
                        )));
                    }
                    let kid = header.kid.as_deref().ok_or_else(|| invalid("no kid"))?;
                    if let Some(jwk) = set.as_ref().and_then(|s| s.find(kid)) {
                        let key = DecodingKey::from_jwk(jwk).map_err(|e| invalid(e.kind_name()))?;
                        return Ok((Arc::new([key]), header.alg));
                    }
                    let refresh = Duration::from_secs(self.config.jwks_refresh_secs);
                    if fetched.is_some_and(|t| t.elapsed() < refresh) {
                        return Err(invalid("unknown kid"));
                    }
                    // Marked before the fetch, so concurrent unknown kids fetch once.
                    *fetched = Some(Instant::now());
                    url.clone()
                }
            }
        };
        // The lock is not held across the fetch: tokens with known kids go on meanwhile.
        let fresh = match self.fetch_jwks(&url).await {
            Ok(fresh) => fresh,
            Err(err) => {
                tracing::warn!(error = %err, "could not fetch the JWKS");
                return Err(invalid("unknown kid"));
            }
        };
        let kid = header.kid.as_deref().unwrap_or_default();
        let key = fresh
            .find(kid)
            .map(DecodingKey::from_jwk)
            .transpose()
            .map_err(|e| invalid(e.kind_name()))?;
        if let Keys::Jwks { set, .. } = &mut *self.keys.lock().await {
            *set = Some(fresh);
        }
        key.map(|key| (Arc::new([key]) as Arc<[DecodingKey]>, header.alg))
            .ok_or_else(|| invalid("unknown kid"))
    }

    async fn fetch_jwks(&self, url: &str) -> Result<JwkSet, reqwest::Error> {
        self.http
            .get(url)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await
    }

    async fn context(&self, claims: &Map<String, Value>) -> Result<AuthContext, ToolError> {
        let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_owned);
        let tenant_name = text(&self.config.tenant_claim)
            .ok_or_else(|| invalid(format!("no {:?} claim", self.config.tenant_claim)))?;
        let subject = text(&self.config.subject_claim)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| invalid(format!("no {:?} claim", self.config.subject_claim)))?;
        if !self.config.tenants.is_empty() && !self.config.tenants.contains(&tenant_name) {
            return Err(invalid("this issuer may not name that tenant"));
        }
        let tenant = self.tenant(&tenant_name).await?;
        let mut scopes = strings(claims.get(&self.config.scopes_claim));
        if !self.config.operator_scopes {
            scopes.retain(|s| s != toolgate_core::auth::scopes::TENANTS_MANAGE);
        }
        Ok(AuthContext {
            tenant,
            tenant_name,
            principal: Principal {
                id: PrincipalId(uuid::Uuid::new_v5(&tenant.0, subject.as_bytes())),
                kind: PrincipalKind::User,
                name: subject,
            },
            roles: strings(claims.get(&self.config.roles_claim)),
            scopes,
            key: None,
        })
    }

    async fn tenant(&self, name: &str) -> Result<TenantId, ToolError> {
        if let Some(id) = self.tenants.lock().await.get(name) {
            return Ok(*id);
        }
        let tenant = self
            .store
            .find_tenant(name)
            .await
            .map_err(crate::error::store_failure)?;
        let tenant = tenant.ok_or_else(|| invalid("unknown tenant"))?;
        self.tenants.lock().await.insert(name.to_owned(), tenant.id);
        Ok(tenant.id)
    }
}

/// A token's header, refused when it names critical extensions (`crit`), none of which
/// this gateway understands (RFC 7515 §4.1.11). Nothing is verified yet.
pub fn header(token: &str) -> Result<jsonwebtoken::Header, ToolError> {
    let header = jsonwebtoken::decode_header(token).map_err(|e| invalid(e.kind_name()))?;
    if header.crit.is_some() {
        return Err(invalid(
            "it names critical header extensions (crit), which this gateway does not understand",
        ));
    }
    Ok(header)
}

/// An array of strings, or one space-separated string (a roles or scopes claim).
pub fn strings(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

trait KindName {
    fn kind_name(&self) -> String;
}

impl KindName for jsonwebtoken::errors::Error {
    /// The error's kind without any token content.
    fn kind_name(&self) -> String {
        format!("{:?}", self.kind())
            .split('(')
            .next()
            .unwrap_or("malformed")
            .to_owned()
    }
}
