//! Resource subscriptions: the counts the catalog holds per (upstream, URI), and each
//! session's or listen stream's [`Subscriptions`], with the pacing of the updates they
//! pass on (see the module above for the rules).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};

use rmcp::service::Peer;
use rmcp::{RoleClient, RoleServer, ServiceError};
use tokio::time::Instant;
use toolgate_core::Owner;

use super::{Catalog, Count, Entry, Watched, lock};
use crate::pace::PerSecond;

/// The most resources one session (`resources/subscribe`) or one listen stream
/// (`subscriptions/listen`) may watch. Each is an upstream subscription held and a URI
/// looked up again whenever the tenant's listings change; a template (`db://{table}`)
/// matches URIs without end, so without a bound one session could make the gateway hold
/// as many upstream subscriptions as it asks for.
pub const MAX_RESOURCE_SUBSCRIPTIONS: usize = 1_000;

/// The refusal of a session's or a stream's subscription past
/// [`MAX_RESOURCE_SUBSCRIPTIONS`].
pub fn too_many_subscriptions(asked: usize) -> rmcp::ErrorData {
    rmcp::ErrorData::invalid_params(
        format!(
            "at most {MAX_RESOURCE_SUBSCRIPTIONS} resources may be watched at once (asked for {asked}); watch fewer, or unsubscribe from some first"
        ),
        Some(serde_json::json!({ "max_resource_subscriptions": MAX_RESOURCE_SUBSCRIPTIONS })),
    )
}

/// How long an upstream has to answer `resources/subscribe` or `resources/unsubscribe`.
const SUBSCRIBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Catalog {
    /// The count on `key`, made when there is none.
    fn count(&self, key: &Watched) -> Count {
        lock(&self.upstream_subscriptions)
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// Drops the count on `key` when it is zero and no one else is about to use it.
    fn forget_if_idle(&self, key: &Watched, count: &Count) {
        let mut counts = lock(&self.upstream_subscriptions);
        // The map and the caller hold it; taking another handle needs the map's lock.
        if Arc::strong_count(count) == 2 && count.try_lock().is_ok_and(|n| *n == 0) {
            counts.remove(key);
        }
    }

    /// Takes one count on `uri` of `entry`'s upstream, subscribing upstream for the first.
    pub async fn hold(&self, entry: &Entry, uri: &str) -> Result<(), ServiceError> {
        let key = (entry.owner, entry.upstream.clone(), uri.to_owned());
        let count = self.count(&key);
        let mut n = count.lock().await;
        let subscribed = if *n == 0 {
            subscribe_upstream(&entry.peer, uri).await
        } else {
            Ok(())
        };
        if subscribed.is_ok() {
            *n += 1;
        }
        drop(n);
        self.forget_if_idle(&key, &count);
        subscribed
    }

    /// Gives back one count on `watched`; the last one unsubscribes upstream. In the
    /// background: a session ending cannot wait for it (and without a runtime, the
    /// gateway is stopping and its upstream connections with it).
    pub fn release(self: &Arc<Self>, watched: &Watched) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (catalog, watched) = (self.clone(), watched.clone());
        runtime.spawn(async move {
            let count = catalog.count(&watched);
            let mut n = count.lock().await;
            *n = n.saturating_sub(1);
            let entry = catalog.lock().get(&(watched.0, watched.1.clone())).cloned();
            if let (0, Some(entry)) = (*n, entry)
                && let Err(err) = unsubscribe_upstream(&entry.peer, &watched.2).await
            {
                tracing::debug!(upstream = %entry.upstream, uri = %watched.2, error = %err, "unsubscribing upstream failed");
            }
            drop(n);
            catalog.forget_if_idle(&watched, &count);
        });
    }

    /// An upstream says `uri` changed: its holders' inboxes hear it, no one else.
    pub(crate) fn updated(&self, owner: Owner, upstream: &str, uri: String) {
        let watched = (owner, upstream.to_owned(), uri);
        if let Some(inboxes) = lock(&self.holders).get(&watched) {
            for inbox in inboxes.iter().filter_map(Weak::upgrade) {
                inbox.put(&watched.2);
            }
        }
    }

    /// `inbox` hears the updates to `watched` from now on.
    fn listen(&self, watched: &Watched, inbox: &Arc<Inbox>) {
        let mut holders = lock(&self.holders);
        let inboxes = holders.entry(watched.clone()).or_default();
        if !inboxes
            .iter()
            .any(|i| std::ptr::eq(i.as_ptr(), Arc::as_ptr(inbox)))
        {
            inboxes.push(Arc::downgrade(inbox));
        }
    }

    /// `inbox` no longer hears the updates to `watched`.
    fn unlisten(&self, watched: &Watched, inbox: &Inbox) {
        let mut holders = lock(&self.holders);
        if let Some(inboxes) = holders.get_mut(watched) {
            inboxes.retain(|i| i.strong_count() > 0 && !std::ptr::eq(i.as_ptr(), inbox));
            if inboxes.is_empty() {
                holders.remove(watched);
            }
        }
    }
}

/// Where a holder's resource updates go: a session (`resources/subscribe`, before
/// 2026-07-28) or one `subscriptions/listen` stream (2026-07-28).
#[derive(Clone)]
pub enum Listener {
    Session(Peer<RoleServer>),
    Stream(rmcp::service::SubscriptionSink),
}

impl Listener {
    /// Tells of an update to `uri`; `false` once the listener is gone.
    async fn updated(&self, uri: String) -> bool {
        let update = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
        match self {
            Listener::Session(peer) => peer.notify_resource_updated(update).await.is_ok(),
            Listener::Stream(sink) => sink.notify_resource_updated(update.uri).await.is_ok(),
        }
    }
}

/// One session's (or one listen stream's) resource subscriptions. Its counts are given
/// back when it ends (when the last handle on this drops).
pub struct Subscriptions {
    catalog: Arc<Catalog>,
    /// URI → the upstream's URI it holds.
    uris: Mutex<HashMap<String, Watched>>,
    /// Updates to what it holds, from its first hold on.
    inbox: Arc<Inbox>,
    /// The task passing them on, once [`Subscriptions::forward`] started it.
    forwarding: Mutex<Option<tokio::task::AbortHandle>>,
}

/// The URIs one holder was told changed since its forwarder last looked, each once
/// however many updates came.
#[derive(Default)]
pub(super) struct Inbox {
    changed: Mutex<BTreeSet<String>>,
    woken: tokio::sync::Notify,
}

impl Inbox {
    fn put(&self, uri: &str) {
        if lock(&self.changed).insert(uri.to_owned()) {
            self.woken.notify_one();
        }
    }

    fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *lock(&self.changed))
    }
}

impl Subscriptions {
    pub fn new(catalog: Arc<Catalog>) -> Arc<Self> {
        Arc::new(Self {
            catalog,
            uris: Mutex::default(),
            inbox: Arc::default(),
            forwarding: Mutex::default(),
        })
    }

    /// Subscribes to `uri` of `entry`'s upstream; its updates go to `listener`.
    pub async fn subscribe(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        uri: &str,
        listener: Listener,
    ) -> Result<(), ServiceError> {
        self.hold(entry, uri).await?;
        self.forward(listener);
        Ok(())
    }

    /// Subscribes to `uri` of `entry`'s upstream; its updates wait for
    /// [`Subscriptions::forward`]. Finished in a task of its own whatever becomes of the
    /// caller: dropped midway (its client gone), it left the upstream subscribed with no
    /// count to unsubscribe it, or a count no holder gave back. A hold finished after its
    /// caller went is given back with the rest when this ends.
    pub(crate) async fn hold(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        uri: &str,
    ) -> Result<(), ServiceError> {
        let (this, entry, uri) = (self.clone(), entry.clone(), uri.to_owned());
        tokio::spawn(async move { this.hold_now(&entry, &uri).await })
            .await
            .unwrap_or_else(|join| {
                Err(ServiceError::Cancelled {
                    reason: Some(join.to_string()),
                })
            })
    }

    async fn hold_now(&self, entry: &Entry, uri: &str) -> Result<(), ServiceError> {
        let watched = (entry.owner, entry.upstream.clone(), uri.to_owned());
        if lock(&self.uris).get(uri) == Some(&watched) {
            return Ok(());
        }
        // Heard from before the upstream is asked, so that no update falls between.
        self.catalog.listen(&watched, &self.inbox);
        if let Err(err) = self.catalog.hold(entry, uri).await {
            self.catalog.unlisten(&watched, &self.inbox);
            return Err(err);
        }
        if let Some(before) = lock(&self.uris).insert(uri.to_owned(), watched) {
            self.catalog.unlisten(&before, &self.inbox);
            self.catalog.release(&before);
        }
        Ok(())
    }

    /// Whether this holds a subscription to `uri`.
    pub(crate) fn holds(&self, uri: &str) -> bool {
        lock(&self.uris).contains_key(uri)
    }

    /// How many URIs this holds subscriptions to.
    pub(crate) fn len(&self) -> usize {
        lock(&self.uris).len()
    }

    /// Ends this session's subscription to `uri`, if it has one.
    pub fn unsubscribe(&self, uri: &str) {
        let watched_uri = lock(&self.uris).remove(uri);
        if let Some(watched) = watched_uri {
            self.catalog.unlisten(&watched, &self.inbox);
            self.catalog.release(&watched);
        }
    }

    /// Starts, once, the task that passes the updates held here to `listener`, from the
    /// first hold on.
    pub(crate) fn forward(self: &Arc<Self>, listener: Listener) {
        let mut forwarding = lock(&self.forwarding);
        if forwarding.is_some() {
            return;
        }
        let subscriptions = Arc::downgrade(self);
        let inbox = self.inbox.clone();
        let task = tokio::spawn(async move {
            let mut paced = Paced::default();
            loop {
                let due = paced.due(Instant::now());
                tokio::select! {
                    () = inbox.woken.notified() => {}
                    () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {}
                }
                let Some(subscriptions) = subscriptions.upgrade() else {
                    break;
                };
                let now = Instant::now();
                let mut uris = paced.release(now);
                uris.extend(
                    inbox
                        .take()
                        .into_iter()
                        .filter_map(|uri| paced.admit(uri, now)),
                );
                uris.retain(|uri| lock(&subscriptions.uris).contains_key(uri));
                drop(subscriptions);
                if !tell(&listener, uris).await {
                    break;
                }
            }
        });
        *forwarding = Some(task.abort_handle());
    }
}

/// Tells `listener` of updates to `uris`; `false` once it is gone.
async fn tell(listener: &Listener, uris: Vec<String>) -> bool {
    for uri in uris {
        if !listener.updated(uri).await {
            return false;
        }
    }
    true
}

/// At most this many resource updates go to one session (or listen stream) a second.
/// Those over it wait for the next second, one per URI however many came: an update only
/// says "read it again". An upstream updating a held resource without pause would
/// otherwise reach the client as fast as the upstream is read (2,000 a second), each
/// one a row of the session's stream on a shared store.
const UPDATES_PER_SEC: u32 = 20;

/// What one listener has been told this second, and the URIs waiting for the next.
struct Paced {
    pace: PerSecond,
    waiting: BTreeSet<String>,
}

impl Default for Paced {
    fn default() -> Self {
        Self {
            pace: PerSecond::new(UPDATES_PER_SEC),
            waiting: BTreeSet::new(),
        }
    }
}

impl Paced {
    /// `uri`, if an update to it may go out now; otherwise it waits (once).
    fn admit(&mut self, uri: String, now: Instant) -> Option<String> {
        if self.pace.admit(now) {
            self.waiting.remove(&uri);
            Some(uri)
        } else {
            self.waiting.insert(uri);
            None
        }
    }

    /// When the waiting URIs may go out.
    fn due(&mut self, now: Instant) -> Option<Instant> {
        if self.waiting.is_empty() {
            return None;
        }
        Some(self.pace.spent_until(now).unwrap_or(now))
    }

    /// The waiting URIs this second's budget lets out.
    fn release(&mut self, now: Instant) -> Vec<String> {
        let mut out = Vec::new();
        while !self.waiting.is_empty() && self.pace.admit(now) {
            out.extend(self.waiting.pop_first());
        }
        out
    }
}

impl Drop for Subscriptions {
    fn drop(&mut self) {
        if let Some(task) = &*lock(&self.forwarding) {
            task.abort();
        }
        for watched in lock(&self.uris).values() {
            self.catalog.unlisten(watched, &self.inbox);
            self.catalog.release(watched);
        }
    }
}

// `resources/subscribe` is legacy-only, as are the upstream connections (legacy initialize).
#[allow(deprecated)]
pub(super) async fn subscribe_upstream(
    peer: &Peer<RoleClient>,
    uri: &str,
) -> Result<(), ServiceError> {
    in_time(peer.subscribe(rmcp::model::SubscribeRequestParams::new(uri))).await
}

#[allow(deprecated)]
async fn unsubscribe_upstream(peer: &Peer<RoleClient>, uri: &str) -> Result<(), ServiceError> {
    in_time(peer.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(uri))).await
}

/// The upstream's answer, or a timeout after [`SUBSCRIBE_TIMEOUT`].
async fn in_time(
    request: impl std::future::Future<Output = Result<(), ServiceError>>,
) -> Result<(), ServiceError> {
    tokio::time::timeout(SUBSCRIBE_TIMEOUT, request)
        .await
        .map_err(|_| ServiceError::Timeout {
            timeout: SUBSCRIBE_TIMEOUT,
        })?
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{Inbox, Paced, UPDATES_PER_SEC};
    use crate::catalog::{Catalog, lock};
    use tokio::time::Instant;
    use toolgate_core::registry::Owner;

    #[test]
    fn a_listener_hears_its_budget_of_updates_a_second_and_the_rest_once_a_uri_after() {
        let mut paced = Paced::default();
        let now = Instant::now();
        for n in 0..UPDATES_PER_SEC {
            let uri = format!("file:///{n}");
            assert_eq!(paced.admit(uri.clone(), now), Some(uri));
        }
        assert_eq!(paced.due(now), None, "nothing waits");
        for _ in 0..500 {
            assert_eq!(paced.admit("file:///hot".into(), now), None);
        }
        assert_eq!(paced.admit("file:///cold".into(), now), None);
        let due = paced.due(now).expect("two wait");
        assert!(due > now);
        assert!(paced.release(now).is_empty(), "not before the next second");
        assert_eq!(
            paced.release(due),
            ["file:///cold", "file:///hot"],
            "one each"
        );
        assert_eq!(paced.due(due), None);
    }

    #[test]
    fn an_update_reaches_the_inboxes_of_its_holders_once_a_uri_and_no_one_else() {
        let catalog = Catalog::new();
        let watched = |uri: &str| (Owner::Everyone, "flood".to_owned(), uri.to_owned());
        let (holder, other) = (Arc::new(Inbox::default()), Arc::new(Inbox::default()));
        catalog.listen(&watched("file:///held"), &holder);
        catalog.listen(&watched("file:///other"), &other);
        for n in 0..1000 {
            catalog.updated(Owner::Everyone, "flood", format!("file:///unsolicited/{n}"));
            catalog.updated(Owner::Everyone, "flood", "file:///held".to_owned());
        }
        catalog.updated(Owner::Everyone, "elsewhere", "file:///held".to_owned());
        assert_eq!(
            holder.take().into_iter().collect::<Vec<_>>(),
            ["file:///held"]
        );
        assert!(holder.take().is_empty());
        assert!(other.take().is_empty(), "woken by another holder's update");
        catalog.unlisten(&watched("file:///held"), &holder);
        catalog.updated(Owner::Everyone, "flood", "file:///held".to_owned());
        assert!(holder.take().is_empty(), "heard after it let go");
        assert!(!lock(&catalog.holders).contains_key(&watched("file:///held")));
    }

    /// An upstream whose `resources/subscribe` takes 200 ms, telling what it was asked.
    #[derive(Clone, Default)]
    struct SlowUpstream(Arc<std::sync::Mutex<Vec<String>>>);

    #[allow(deprecated)] // resources/subscribe: legacy-only, as the upstream connections are
    impl rmcp::ServerHandler for SlowUpstream {
        fn get_info(&self) -> rmcp::model::ServerConfig {
            rmcp::model::ServerConfig::new(
                rmcp::model::ServerCapabilities::builder()
                    .enable_resources()
                    .enable_resources_subscribe()
                    .build(),
            )
        }

        async fn subscribe(
            &self,
            request: rmcp::model::SubscribeRequestParams,
            _: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<(), rmcp::ErrorData> {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            lock(&self.0).push(format!("subscribe {}", request.uri));
            Ok(())
        }

        async fn unsubscribe(
            &self,
            request: rmcp::model::UnsubscribeRequestParams,
            _: rmcp::service::RequestContext<rmcp::RoleServer>,
        ) -> Result<(), rmcp::ErrorData> {
            lock(&self.0).push(format!("unsubscribe {}", request.uri));
            Ok(())
        }
    }

    /// Waits up to 5 s for `done`.
    async fn until(done: impl Fn() -> bool) -> bool {
        for _ in 0..500 {
            if done() {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        done()
    }

    /// A subscription whose caller is dropped while the upstream answers (a client gone
    /// midway) still ends held, and is given back upstream when its holder ends. (Before:
    /// it was abandoned wherever it stood: the upstream could stay subscribed with no count
    /// to unsubscribe it, or the count be taken with no holder to give it back.)
    #[tokio::test]
    async fn a_hold_dropped_midway_is_finished_and_given_back_upstream() {
        use rmcp::ServiceExt;
        let upstream = SlowUpstream::default();
        let (server_io, client_io) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(upstream.clone().serve(server_io));
        let client = ().serve(client_io).await.expect("client");
        let _server = server.await.expect("join").expect("server");
        let entry = Arc::new(crate::catalog::Entry {
            upstream: "slow".into(),
            owner: Owner::Everyone,
            prefix: String::new(),
            timeout: std::time::Duration::from_secs(5),
            tools: Vec::new(),
            peer: client.peer().clone(),
            resources: Vec::new(),
            uris: Default::default(),
            templates: Vec::new(),
            prompts: Vec::new(),
            subscribable: true,
            completes: false,
        });
        let catalog = Catalog::new();
        catalog
            .lock()
            .insert((Owner::Everyone, "slow".into()), entry.clone());
        let subscriptions = super::Subscriptions::new(catalog);
        let uri = "file:///watched";
        let hold = subscriptions.hold(&entry, uri);
        let gave_up = tokio::time::timeout(std::time::Duration::from_millis(50), hold).await;
        assert!(
            gave_up.is_err(),
            "the caller gave up before the upstream answered"
        );
        assert!(
            until(|| subscriptions.holds(uri)).await,
            "the hold was finished"
        );
        assert_eq!(*lock(&upstream.0), [format!("subscribe {uri}")]);
        drop(subscriptions);
        assert!(
            until(|| lock(&upstream.0).len() == 2).await,
            "given back: {:?}",
            lock(&upstream.0)
        );
        assert_eq!(lock(&upstream.0)[1], format!("unsubscribe {uri}"));
        client.cancel().await.expect("close");
    }
}
