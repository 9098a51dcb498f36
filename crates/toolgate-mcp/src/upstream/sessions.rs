//! The sessions an HTTP upstream's calls run in: per tenant or per principal (with the
//! principal's own credential), opened on first use, let go of when unused.

use super::*;

/// Sessions kept per tenant or principal, for at most this long unused…
pub(super) const POOL_IDLE: Duration = Duration::from_secs(600);
/// …and at most this many per upstream (the least recently used goes first).
pub(super) const POOL_MAX: usize = 256;

/// Which session a call runs in: tenant, principal (per-principal sessions), and the
/// fingerprint of the principal's own credential (a new one opens a new session).
pub(super) type PoolKey = (
    toolgate_core::TenantId,
    Option<toolgate_core::PrincipalId>,
    u64,
);

/// One pooled session: its connection and the routes of its calls.
pub(super) struct Pooled {
    pub(super) service: RunningService<RoleClient, Handler>,
    pub(super) routes: Arc<Routes>,
}

pub(super) type PoolCell = Arc<tokio::sync::OnceCell<Arc<Pooled>>>;

/// The per-tenant (or per-principal) sessions of one HTTP upstream, opened on a key's
/// first call, let go of when idle or when the pool is full, and replaced when closed.
pub(super) struct SessionPool {
    pub(super) config: UpstreamConfig,
    pub(super) catalog: Arc<Catalog>,
    pub(super) sessions: Mutex<HashMap<PoolKey, (PoolCell, Instant)>>,
    /// Tells the supervisor that the upstream said, in one of these sessions, that its
    /// lists changed: a server may say so only in the session where the change was
    /// made (the Python SDK's `ctx.session.send_tool_list_changed()` does), and the
    /// supervisor lists in its own.
    pub(super) list_changed: tokio::sync::mpsc::Sender<()>,
}

impl SessionPool {
    pub(super) fn new(
        config: &UpstreamConfig,
        catalog: Arc<Catalog>,
        list_changed: tokio::sync::mpsc::Sender<()>,
    ) -> Option<Arc<Self>> {
        let pooled = matches!(config.transport, UpstreamTransport::Http { .. })
            && (config.sessions != SessionScope::Shared || config.personal.0.is_some());
        pooled.then(|| {
            Arc::new(Self {
                config: config.clone(),
                catalog,
                sessions: Mutex::default(),
                list_changed,
            })
        })
    }

    /// The session `ctx`'s caller calls in: opened now if it has none (one opening per
    /// key at a time), or again if it was closed.
    pub(super) async fn session(
        &self,
        ctx: &CallContext,
    ) -> Result<(Peer<RoleClient>, Arc<Routes>), String> {
        // With personal credentials, each principal calls with its own, in its own
        // session; without one, it cannot call.
        let personal = match &self.config.personal.0 {
            None => None,
            Some(source) => Some(source.credential(ctx).await?),
        };
        let key = (
            ctx.auth.tenant,
            (self.config.sessions == SessionScope::PerPrincipal || personal.is_some())
                .then_some(ctx.auth.principal.id),
            personal.as_ref().map_or(0, |c| {
                use std::hash::{Hash, Hasher};
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                c.hash(&mut hasher);
                hasher.finish()
            }),
        );
        let config = match personal {
            None => std::borrow::Cow::Borrowed(&self.config),
            Some(credential) => {
                let mut config = self.config.clone();
                if let UpstreamTransport::Http {
                    headers, bearer, ..
                } = &mut config.transport
                {
                    headers.extend(credential.headers);
                    *bearer = credential.bearer;
                }
                std::borrow::Cow::Owned(config)
            }
        };
        for _ in 0..2 {
            let cell = {
                let mut sessions = lock(&self.sessions);
                if !sessions.contains_key(&key) {
                    make_room(&mut sessions);
                }
                let entry = sessions
                    .entry(key)
                    .or_insert_with(|| (PoolCell::default(), Instant::now()));
                entry.1 = Instant::now();
                entry.0.clone()
            };
            let opened = cell
                .get_or_try_init(|| async {
                    let routes = Routes::new(self.config.relay_unattributed);
                    // Tool lists come from the supervisor's session; these only call,
                    // and pass on what they hear of changes.
                    let (service, _no_child) = connect(
                        &config,
                        routes.clone(),
                        self.list_changed.clone(),
                        self.catalog.clone(),
                    )
                    .await?;
                    tracing::debug!(upstream = %self.config.name, tenant = %key.0, "opened an upstream session");
                    Ok::<_, String>(Arc::new(Pooled { service, routes }))
                })
                .await;
            match opened {
                Ok(pooled) if !pooled.service.peer().is_transport_closed() => {
                    return Ok((pooled.service.peer().clone(), pooled.routes.clone()));
                }
                // Closed (the upstream restarted, or dropped the session): open another.
                Ok(_) => self.forget(&key, &cell),
                Err(err) => {
                    self.forget(&key, &cell);
                    return Err(err);
                }
            }
        }
        Err("the upstream closed the new session at once".into())
    }

    pub(super) fn forget(&self, key: &PoolKey, cell: &PoolCell) {
        let mut sessions = lock(&self.sessions);
        if sessions.get(key).is_some_and(|(c, _)| Arc::ptr_eq(c, cell)) {
            sessions.remove(key);
        }
    }
}

/// Lets go of sessions idle for [`POOL_IDLE`], and of the least recently used one while
/// the pool is full.
pub(super) fn make_room(sessions: &mut HashMap<PoolKey, (PoolCell, Instant)>) {
    sessions.retain(|_, (_, used)| used.elapsed() < POOL_IDLE);
    while sessions.len() >= POOL_MAX {
        let Some(oldest) = sessions
            .iter()
            .min_by_key(|(_, (_, used))| *used)
            .map(|(key, _)| *key)
        else {
            break;
        };
        sessions.remove(&oldest);
    }
}
