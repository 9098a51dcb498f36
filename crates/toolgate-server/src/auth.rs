//! Who is calling, made once per request.
//!
//! `Authorization: Bearer <token>`, where the token is an API key (`tg_…`, looked up by
//! its hash) or a JWT (see [`crate::jwt`]). Missing or bad credentials are 401 with
//! `WWW-Authenticate`; those attempts have no tenant, so they go to the rate-limited
//! security-event log (source address, route, reason — never the token). Handlers take a
//! [`Caller`]; nothing below this module parses tokens.
//!
//! Verified API keys are cached for [`KEY_CACHE_TTL`] so a request does not cost a store
//! round trip. Revocation through this instance empties the cache at once. On Postgres a
//! revocation anywhere else (another instance, the CLI) is announced by `NOTIFY` and
//! empties every listening instance's cache as it commits. On SQLite every revocation,
//! by any process, replaces a signal file beside the database, and a cached key is
//! trusted only after a `stat` of that file shows no change since it was cached: the CLI's
//! `keys revoke` takes effect the moment it returns. Besides, every instance polls the
//! store's revocation marker each [`REVOCATION_POLL`].
//!
//! A secret the store refused (unknown, revoked, expired) is remembered too, since none
//! can become good: a client retrying a dead key at full speed cost a store query per
//! request (a Postgres instance answered 4,500 such requests a second, against 64,000
//! without a credential).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{FromRef, FromRequestParts, MatchedPath};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use chrono::Utc;
use toolgate_core::auth::scopes;
use toolgate_core::{
    AuthContext, ErrorKind, Principal, Registry, ScopedToolset, ToolError, Toolset,
};
use toolgate_store::{Store, keys};
use uuid::Uuid;

use crate::error::ApiError;
use crate::jwt::JwtVerifier;

/// Scopes each role grants when a principal is created without explicit scopes.
pub fn role_scopes(role: &str) -> &'static [&'static str] {
    match role {
        "admin" => scopes::ALL,
        "operator" => &[
            scopes::TOOLS_INVOKE,
            scopes::TOOLS_HIGH_RISK,
            scopes::AUDIT_READ,
            scopes::AGENTS_RUN,
            scopes::AGENTS_MANAGE,
            scopes::APPROVALS_DECIDE,
        ],
        "member" => &[scopes::TOOLS_INVOKE, scopes::AGENTS_RUN],
        _ => &[],
    }
}

pub use toolgate_core::auth::scopes::TENANTS_MANAGE;

/// How long a verified API key is trusted without asking the store again.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(30);
/// How often the store is asked whether any key was revoked (by any instance or the CLI);
/// a change empties the cache, so a revocation elsewhere takes effect within this time.
/// A revocation through this instance's REST API takes effect at once.
pub const REVOCATION_POLL: Duration = Duration::from_secs(1);
/// Most keys cached; beyond it the cache is emptied and refilled. Also the most refused
/// secrets remembered.
const KEY_CACHE_MAX: usize = 10_000;

/// How often a key's `last_used_at` is written, at most.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Most security events written per second; the rest are counted and dropped.
const SECURITY_EVENTS_PER_SEC: u32 = 20;

/// Turns a request into a [`Caller`].
pub struct Authenticator {
    store: Store,
    jwt: Option<JwtVerifier>,
    /// Verified keys by secret hash: the caller, the key id, when cached.
    keys: Mutex<HashMap<String, CachedKey>>,
    /// Bumped on every clear, so a lookup that raced a revocation does not cache.
    generation: std::sync::atomic::AtomicU64,
    /// Hashes of secrets the store refused: unknown, revoked or expired. None can become
    /// good (secrets are generated, never chosen; revocation and expiry are final), so a
    /// client that keeps sending one is refused without a store round trip.
    refused: Mutex<HashSet<String>>,
    touched: Mutex<HashMap<Uuid, Instant>>,
    security_window: Mutex<(Instant, u32)>,
    /// Where requests come from, and the unknown keys each source had looked up.
    sources: crate::sources::Sources,
    /// SQLite: the revocation signal file, and the version of it last seen.
    signal: Option<(std::path::PathBuf, Mutex<Option<FileVersion>>)>,
}

/// Which file a path names and when it was last written: changes whenever the file is
/// replaced (a new inode) or written.
type FileVersion = (u64, u64, std::time::SystemTime);

fn file_version(path: &std::path::Path) -> Option<FileVersion> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.dev(), meta.ino(), meta.modified().ok()?))
}

/// A caller's API key stands while it is neither revoked nor expired (a JWT caller's
/// standing is its token's, checked per request only).
#[async_trait::async_trait]
impl toolgate_core::auth::Standing for Authenticator {
    async fn lapsed(&self, auth: &AuthContext) -> Option<String> {
        let key = auth.key?;
        match self.store.get_api_key(auth.tenant, key).await {
            Ok(Some(found)) if found.revoked_at.is_some() => {
                Some(format!("the API key it was made with ({key}) was revoked"))
            }
            Ok(Some(found)) if found.expires_at.is_some_and(|t| t <= Utc::now()) => {
                Some(format!("the API key it was made with ({key}) has expired"))
            }
            Ok(Some(_)) => None,
            Ok(None) => Some(format!("the API key it was made with ({key}) is gone")),
            Err(err) => {
                tracing::debug!(error = %err, "cannot tell whether a key still stands");
                None
            }
        }
    }
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

impl Authenticator {
    /// Reads requests' sources through these proxies, and bounds their unknown keys.
    pub fn with_sources(mut self, sources: crate::sources::Sources) -> Self {
        self.sources = sources;
        self
    }

    pub fn new(store: Store, jwt: Option<JwtVerifier>) -> Self {
        Self {
            jwt,
            keys: Mutex::new(HashMap::new()),
            generation: std::sync::atomic::AtomicU64::new(0),
            refused: Mutex::new(HashSet::new()),
            touched: Mutex::new(HashMap::new()),
            security_window: Mutex::new((Instant::now(), 0)),
            sources: crate::sources::Sources::default(),
            signal: store
                .revocation_signal()
                .map(|path| (path.clone(), Mutex::new(file_version(&path)))),
            store,
        }
    }

    /// Empties the key cache if a key was revoked since the signal file was last seen
    /// (SQLite; see [`Store::revocation_signal`]).
    fn check_revocation_signal(&self) {
        let Some((path, seen)) = &self.signal else {
            return;
        };
        let now = file_version(path);
        let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen != now {
            *seen = now;
            drop(seen);
            self.clear_keys();
        }
    }

    pub(crate) async fn authenticate(&self, parts: &Parts) -> Result<Caller, ToolError> {
        let token = bearer(parts)?;
        let (auth, subject_token) = if keys::looks_like_key(token) {
            (self.api_key(token, parts).await?, None)
        } else if let Some(jwt) = &self.jwt {
            (
                Arc::new(jwt.verify(token).await?),
                Some(toolgate_core::SubjectToken::new(token)),
            )
        } else {
            return Err(unauthenticated("invalid credentials"));
        };
        // The request's body counts against its tenant's share from here (the body is read
        // after this).
        if let Some(charge) = parts.extensions.get::<crate::http_server::BodyCharge>() {
            charge.bill(auth.tenant);
        }
        let request_id = match parts.extensions.get::<crate::request_id::RequestId>() {
            Some(id) => id.0.clone(),
            // Only outside a request (`still_valid`): the observe layer gives each one.
            None => Uuid::now_v7().to_string().into(),
        };
        Ok(Caller {
            auth,
            toolset: Toolset::all(),
            subject_token,
            request_id,
        })
    }

    /// Whether the credential in `authorization` still authenticates: false once it was
    /// revoked or expired, true while the store merely cannot answer (a long stream is not
    /// cut for that).
    pub async fn still_valid(&self, authorization: Option<&axum::http::HeaderValue>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        let (mut parts, ()) = axum::http::Request::new(()).into_parts();
        parts.headers.insert(AUTHORIZATION, value.clone());
        match self.authenticate(&parts).await {
            Ok(_) => true,
            Err(err) => err.kind != ErrorKind::Unauthenticated,
        }
    }

    async fn api_key(&self, secret: &str, parts: &Parts) -> Result<Arc<AuthContext>, ToolError> {
        let hash = keys::hash(secret);
        self.check_revocation_signal();
        let cached = {
            let cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
            cache.get(&hash).cloned()
        };
        if let Some(entry) = cached
            && entry.cached_at.elapsed() < KEY_CACHE_TTL
            && entry.expires_at.is_none_or(|t| t > Utc::now())
        {
            self.touch(entry.key_id);
            return Ok(entry.auth);
        }
        if self.was_refused(&hash) {
            return Err(unauthenticated("invalid credentials"));
        }
        let source = self.sources.client(parts);
        if let Some(source) = source
            && let Err(wait) = self.sources.admit(source)
        {
            return Err(ToolError::new(
                ErrorKind::RateLimited,
                "too many unknown API keys came from your address within a minute; keys not recently used are refused until it ends",
            )
            .with_retry_after(wait, true));
        }
        let generation = self.generation.load(std::sync::atomic::Ordering::SeqCst);
        // A store out of reach for now is a 503 to retry, not a 500.
        let found = self
            .store
            .find_key(secret)
            .await
            .map_err(crate::error::store_failure)?;
        let now = Utc::now();
        let Some(found) = found
            .filter(|f| f.key.revoked_at.is_none() && f.key.expires_at.is_none_or(|t| t > now))
        else {
            self.refuse(hash);
            if let Some(source) = source
                && self.sources.unknown_key(source)
            {
                tracing::warn!(%source, "a source sent its limit of unknown API keys within a minute (http.unknown_keys_per_minute); its keys not recently used are refused until the minute ends");
            }
            return Err(unauthenticated("invalid credentials"));
        };
        self.touch(found.key.id);
        // A key never grants more than its principal holds.
        let scopes = found
            .key
            .scopes
            .iter()
            .filter(|s| found.principal.scopes.contains(s))
            .cloned()
            .collect();
        let auth = Arc::new(AuthContext {
            tenant: found.principal.tenant,
            tenant_name: found.tenant_name,
            principal: Principal {
                id: found.principal.id,
                kind: found.principal.kind,
                name: found.principal.name,
            },
            roles: found.principal.roles,
            scopes,
            key: Some(found.key.id),
        });
        let mut cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if self.generation.load(std::sync::atomic::Ordering::SeqCst) != generation {
            // The cache was emptied while we asked the store: what we read may be stale.
            return Ok(auth);
        }
        if cache.len() >= KEY_CACHE_MAX {
            cache.clear();
        }
        let entry = CachedKey {
            auth: auth.clone(),
            key_id: found.key.id,
            expires_at: found.key.expires_at,
            cached_at: Instant::now(),
        };
        cache.insert(hash, entry);
        Ok(auth)
    }

    fn was_refused(&self, hash: &str) -> bool {
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        refused.contains(hash)
    }

    /// Remembers a secret the store refused, forgetting them all when there are too many.
    fn refuse(&self, hash: String) {
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if refused.len() >= KEY_CACHE_MAX {
            refused.clear();
        }
        refused.insert(hash);
    }

    /// Empties the key cache. Lookups that started before this do not refill it.
    fn clear_keys(&self) {
        let mut cache = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        cache.clear();
    }

    /// Forgets a key at once (it was just revoked through this instance). Empties the
    /// whole cache: revocations are rare, and a lookup racing this one must not refill it.
    pub fn forget_key(&self, _key_id: Uuid) {
        self.clear_keys();
    }

    /// Empties the key cache whenever the store's revocation marker moves (a key was
    /// revoked by another instance or the CLI). Runs until the authenticator is dropped.
    pub fn watch_revocations(self: &Arc<Self>) {
        // On Postgres a revocation anywhere is announced at once (NOTIFY); the poll below
        // stays as the fallback, and is all there is on SQLite.
        let listening = Arc::downgrade(self);
        tokio::spawn(async move {
            let Some(store) = listening.upgrade().map(|this| this.store.clone()) else {
                return;
            };
            let mut revoked = match store.watch_revocations().await {
                Ok(Some(revoked)) => revoked,
                Ok(None) => return,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot listen for key revocations; polling only");
                    return;
                }
            };
            while revoked.recv().await.is_some() {
                let Some(this) = listening.upgrade() else {
                    return;
                };
                this.clear_keys();
            }
        });
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut last = None;
            loop {
                let Some(this) = weak.upgrade() else { return };
                match this.store.revocation_marker().await {
                    Ok(marker) => {
                        if last.as_ref() != Some(&marker) {
                            this.clear_keys();
                        }
                        last = Some(marker);
                    }
                    Err(err) => {
                        // Cannot tell what was revoked: trust nothing cached.
                        this.clear_keys();
                        last = None;
                        tracing::warn!(error = %err, "could not check for revoked keys");
                    }
                }
                drop(this);
                tokio::time::sleep(REVOCATION_POLL).await;
            }
        });
    }

    /// Notes the key's use, at most once a minute per key, off the request path.
    fn touch(&self, key: Uuid) {
        let now = Instant::now();
        {
            let mut touched = self.touched.lock().unwrap_or_else(|p| p.into_inner());
            if touched
                .get(&key)
                .is_some_and(|t| now.duration_since(*t) < TOUCH_EVERY)
            {
                return;
            }
            touched.insert(key, now);
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(err) = store.touch_key(key, Utc::now()).await {
                tracing::warn!(error = %err, "could not record an API key's last use");
            }
        });
    }

    /// Records a failed authentication, rate-limited.
    pub(crate) fn security_event(&self, parts: &Parts, reason: &str) {
        {
            let mut window = self
                .security_window
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if now.duration_since(window.0) >= Duration::from_secs(1) {
                *window = (now, 0);
            }
            window.1 += 1;
            if window.1 > SECURITY_EVENTS_PER_SEC {
                return;
            }
        }
        let source = self.sources.client(parts).map(|ip| ip.to_string());
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| parts.uri.path().chars().take(200).collect());
        let reason = reason.to_owned();
        tracing::warn!(
            source = source.as_deref().unwrap_or(""),
            route,
            reason,
            "authentication failed"
        );
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(err) = store
                .record_security_event(source.as_deref(), &route, &reason)
                .await
            {
                tracing::warn!(error = %err, "could not record a security event");
            }
        });
    }
}

#[derive(Clone)]
struct CachedKey {
    auth: Arc<AuthContext>,
    key_id: Uuid,
    expires_at: Option<chrono::DateTime<Utc>>,
    cached_at: Instant,
}

fn unauthenticated(message: &str) -> ToolError {
    ToolError::new(ErrorKind::Unauthenticated, message)
        .with_suggestion("send Authorization: Bearer <API key or JWT>")
}

pub use crate::error::MISSING_TOKEN;

fn bearer(parts: &Parts) -> Result<&str, ToolError> {
    let mut headers = parts.headers.get_all(AUTHORIZATION).iter();
    let header = headers
        .next()
        .ok_or_else(|| unauthenticated(MISSING_TOKEN))?;
    if headers.next().is_some() {
        // Which one would count is for a proxy and the gateway to disagree on.
        return Err(ToolError::invalid_arguments(
            "the request has more than one Authorization header; send exactly one",
        ));
    }
    let value = header
        .to_str()
        .map_err(|_| unauthenticated("malformed Authorization header"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| unauthenticated("malformed Authorization header"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(unauthenticated("the Authorization scheme must be Bearer"));
    }
    Ok(token.trim())
}

/// A failed authentication as the REST and `/mcp` edges answer it: a malformed request
/// (two `Authorization` headers) is a 400 `malformed_request`, the rest as its kind says.
pub(crate) fn rejection(err: ToolError) -> ApiError {
    if err.kind == ErrorKind::InvalidArguments {
        ApiError::Malformed(err.message)
    } else {
        err.into()
    }
}

/// A request's authentication, done once before its handler (by `rest::reads`): the
/// handler's [`Caller`] extractor takes it instead of authenticating again.
#[derive(Clone)]
pub(crate) struct Authenticated(pub Result<Caller, ToolError>);

/// The authenticated caller of one request and the toolset it may use.
#[derive(Clone, Debug)]
pub struct Caller {
    pub auth: Arc<AuthContext>,
    pub toolset: Toolset,
    /// The JWT the caller signed in with (none for an API key), for upstreams that
    /// exchange it.
    pub subject_token: Option<toolgate_core::SubjectToken>,
    /// The request's id (`crate::request_id`), for its audit rows.
    pub request_id: Arc<str>,
}

impl Caller {
    /// The caller's toolset over `registry`: the capability the executor takes.
    pub fn tools(&self, registry: &Arc<Registry>) -> ScopedToolset {
        self.toolset.scope(registry.clone(), &self.auth)
    }

    /// 403 unless the caller holds `scope`.
    pub fn require(&self, scope: &str) -> Result<(), ApiError> {
        if self.auth.has_scope(scope) {
            Ok(())
        } else {
            Err(ToolError::forbidden(format!(
                "this needs the scope {scope:?}, which your credentials lack"
            ))
            .with_details(serde_json::json!({"required_scope": scope}))
            .into())
        }
    }
}

impl<S> FromRequestParts<S> for Caller
where
    Arc<Authenticator>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let authenticator = Arc::<Authenticator>::from_ref(state);
        // Authenticated already when its reads were counted (`rest::reads`).
        let done = match parts.extensions.get::<Authenticated>() {
            Some(Authenticated(done)) => done.clone(),
            None => authenticator.authenticate(parts).await,
        };
        match done {
            Ok(caller) => Ok(caller),
            Err(err) => {
                if err.kind == ErrorKind::Unauthenticated {
                    authenticator.security_event(parts, &err.message);
                }
                Err(rejection(err))
            }
        }
    }
}

#[cfg(test)]
#[path = "../../../tests/harness/pgdb.rs"]
mod pgdb;

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer_of(secret: &str) -> Parts {
        let (mut parts, ()) = axum::http::Request::new(()).into_parts();
        let value = format!("Bearer {secret}").parse().expect("header");
        parts.headers.insert(AUTHORIZATION, value);
        parts
    }

    /// A secret the store refused is refused again without asking it: here the store
    /// has become unreachable, and only a secret never seen meets that (an error other
    /// than 401).
    #[tokio::test]
    async fn a_refused_secret_is_refused_without_the_store() {
        let db = pgdb::PgDb::create().await;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(Some(&db.url), dir.path()).await.expect("open");
        store.migrate().await.expect("migrate");
        let authenticator = Authenticator::new(store, None);
        let dead = keys::generate().expect("secret");
        let refused = authenticator.authenticate(&bearer_of(&dead)).await;
        assert_eq!(
            refused.err().map(|e| e.kind),
            Some(ErrorKind::Unauthenticated)
        );

        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&pgdb::pg_admin_url())
            .await
            .expect("admin");
        for statement in [
            format!("alter database {} allow_connections false", db.name),
            format!(
                "select pg_terminate_backend(pid) from pg_stat_activity where datname = '{}'",
                db.name
            ),
        ] {
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&mut admin)
                .await
                .expect("cut the store off");
        }

        let again = authenticator.authenticate(&bearer_of(&dead)).await;
        assert_eq!(
            again.err().map(|e| e.kind),
            Some(ErrorKind::Unauthenticated)
        );
        let unseen = keys::generate().expect("secret");
        let unseen = authenticator.authenticate(&bearer_of(&unseen)).await;
        // 503 to try again, not 500: the store does not take connections for now.
        assert_eq!(
            unseen.err().map(|e| e.kind),
            Some(ErrorKind::Unavailable),
            "the store is out of reach"
        );
        db.drop_db().await;
    }
}
