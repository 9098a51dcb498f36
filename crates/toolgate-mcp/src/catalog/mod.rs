//! Resources and prompts of upstream MCP servers, federated beside their tools.
//!
//! Each upstream's supervisor lists its resources, resource templates and prompts when it
//! connects and again on the upstream's `list_changed` notifications, and files them here
//! under the upstream; the MCP front door serves them to the callers who may see that
//! upstream, relays `resources/read` and `prompts/get` to it, and tells a tenant's
//! sessions when what the tenant sees has changed ([`Catalog::changes`]).
//!
//! Who sees an upstream's resources and prompts: callers holding `tools:invoke`, of the
//! tenant that owns the upstream (every tenant for the operator's upstreams), whose toolset
//! admits at least one of the upstream's tools or is unrestricted. Deny by default: an
//! upstream a caller cannot see is, to that caller, not there.
//!
//! Names: a prompt is named `<prefix><prompt>` with its upstream's tool prefix, so two
//! upstreams' prompts never collide; resource URIs pass unchanged (contents and other
//! resources refer to them), and a read goes to the visible upstream that listed the URI,
//! else to one whose template matches it.
//!
//! Subscriptions: a session's `resources/subscribe` (or a 2026-07-28 `subscriptions/listen`
//! stream's URI) of an upstream that offers subscriptions holds one count on (upstream,
//! URI); the first count subscribes upstream, the last one released (`resources/unsubscribe`,
//! the session's or the stream's end) unsubscribes, and a new connection to the upstream
//! subscribes again to whatever is still held. The upstream's
//! `notifications/resources/updated` reach the holders of that URI and wake no one else,
//! at most [`UPDATES_PER_SEC`] a holder a second (the rest coalesced, one per URI, into
//! the next second). Upstream connections
//! use the legacy lifecycle, so subscribing upstream is always `resources/subscribe`.
//!
//! Argument completion (`completion/complete`) for a prompt goes to the upstream that
//! offers it, under the upstream's own name; for a resource template (or a URI), to the
//! upstream that lists it. An upstream that offers no completion completes nothing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use rmcp::model::{Prompt, Resource, ResourceTemplate};
use rmcp::service::Peer;
use rmcp::{RoleClient, ServiceError};
use toolgate_core::auth::scopes;
use toolgate_core::{AuthContext, ChangeLog, Owner, ScopedToolset};

use crate::upstream::pages;

mod subscriptions;

use subscriptions::{Inbox, subscribe_upstream};
pub use subscriptions::{
    Listener, MAX_RESOURCE_SUBSCRIPTIONS, Subscriptions, too_many_subscriptions,
};

/// Every connected upstream's resources and prompts. Shared by the upstreams'
/// supervisors (which fill it) and the MCP front door (which serves it).
#[derive(Default)]
pub struct Catalog {
    entries: Mutex<HashMap<(Owner, String), Arc<Entry>>>,
    /// Sessions' subscriptions held per upstream and URI. A count goes from 0 to 1
    /// (subscribing upstream) and back (unsubscribing) under its own lock, so a
    /// subscription and the end of the previous one reach the upstream in order.
    upstream_subscriptions: Mutex<HashMap<Watched, Count>>,
    /// Who holds each URI: its `notifications/resources/updated` go to these inboxes,
    /// and wake no other session's forwarder.
    holders: Mutex<HashMap<Watched, Vec<Weak<Inbox>>>>,
    /// Changes to the upstreams' resources and prompts, per owner.
    log: ChangeLog,
}

/// A URI of one upstream: `(owner, upstream, uri)`.
pub type Watched = (Owner, String, String);

type Count = Arc<tokio::sync::Mutex<usize>>;

/// One connected upstream's listing.
pub struct Entry {
    pub upstream: String,
    pub owner: Owner,
    prefix: String,
    /// How long a relayed read or prompt may take: the upstream's default call deadline.
    pub timeout: std::time::Duration,
    /// The gateway's names of the upstream's tools (for visibility).
    tools: Vec<String>,
    pub peer: Peer<RoleClient>,
    pub resources: Vec<Resource>,
    /// The URIs of `resources`, looked up for every read, subscription and listen
    /// stream's waiting URI.
    uris: std::collections::HashSet<String>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
    /// Whether the upstream offers `resources/subscribe`.
    pub subscribable: bool,
    /// Whether the upstream offers `completion/complete`.
    pub completes: bool,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("upstreams", &self.lock().len())
            .finish()
    }
}

/// The upstream a listing is filed under, as the catalog needs to know it.
pub(crate) struct Source<'a> {
    pub name: &'a str,
    pub owner: Owner,
    /// Put before the names of its tools (and of its prompts).
    pub prefix: String,
    /// A relayed request's deadline.
    pub timeout: std::time::Duration,
}

impl Catalog {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Owner, String), Arc<Entry>>> {
        lock(&self.entries)
    }

    /// Lists what `peer` offers (only what its capabilities declare) and files it under
    /// the upstream, replacing the previous listing. A list the upstream fails to give is
    /// filed empty (the others are still served) and its error returned.
    pub(crate) async fn refresh(
        &self,
        source: &Source<'_>,
        tools: &[String],
        peer: &Peer<RoleClient>,
    ) -> Result<(), ServiceError> {
        let (upstream, owner) = (source.name, source.owner);
        let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
        let offers_resources = capabilities.as_ref().is_some_and(|c| c.resources.is_some());
        let offers_prompts = capabilities.as_ref().is_some_and(|c| c.prompts.is_some());
        let subscribable = capabilities
            .as_ref()
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.subscribe)
            == Some(true);
        let completes = capabilities
            .as_ref()
            .is_some_and(|c| c.completions.is_some());
        let mut failed = None;
        let (resources, templates) = if offers_resources {
            (
                or_empty(
                    pages::all("resources", |params| async move {
                        let page = peer.list_resources(Some(params)).await?;
                        Ok((page.resources, page.next_cursor))
                    })
                    .await,
                    &mut failed,
                ),
                or_empty(
                    pages::all("resource templates", |params| async move {
                        let page = peer.list_resource_templates(Some(params)).await?;
                        Ok((page.resource_templates, page.next_cursor))
                    })
                    .await,
                    &mut failed,
                ),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let prompts = if offers_prompts {
            or_empty(
                pages::all("prompts", |params| async move {
                    let page = peer.list_prompts(Some(params)).await?;
                    Ok((page.prompts, page.next_cursor))
                })
                .await,
                &mut failed,
            )
        } else {
            Vec::new()
        };
        if !resources.is_empty() || !templates.is_empty() || !prompts.is_empty() {
            tracing::info!(
                upstream,
                resources = resources.len(),
                templates = templates.len(),
                prompts = prompts.len(),
                "upstream resources and prompts listed"
            );
        }
        let entry = Entry {
            upstream: upstream.to_owned(),
            owner,
            prefix: source.prefix.clone(),
            timeout: source.timeout,
            tools: tools.to_vec(),
            peer: peer.clone(),
            uris: resources.iter().map(|r| r.uri.clone()).collect(),
            resources,
            templates,
            prompts,
            subscribable,
            completes,
        };
        let entry = Arc::new(entry);
        let before = self
            .lock()
            .insert((owner, upstream.to_owned()), entry.clone());
        if before.as_ref().is_some_and(|b| !b.lists_same(&entry))
            || before.is_none() && !entry.lists_nothing()
        {
            self.log.changed(owner);
        }
        let first = before.is_none();
        // A new connection: the upstream knows none of the subscriptions sessions hold.
        if first && subscribable {
            let subscribed: Vec<(Watched, Count)> = lock(&self.upstream_subscriptions)
                .iter()
                .filter(|((o, u, _), _)| *o == owner && u == upstream)
                .map(|(key, count)| (key.clone(), count.clone()))
                .collect();
            for ((_, _, uri), count) in subscribed {
                let n = count.lock().await;
                if *n > 0
                    && let Err(err) = subscribe_upstream(peer, &uri).await
                {
                    tracing::warn!(upstream, uri, error = %err, "could not subscribe again to a resource sessions watch");
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// The upstream is gone (its connection ended, or it was removed).
    pub(crate) fn remove(&self, owner: Owner, name: &str) {
        let removed = self.lock().remove(&(owner, name.to_owned()));
        if removed.is_some_and(|e| !e.lists_nothing()) {
            self.log.changed(owner);
        }
    }

    /// Changes to the upstreams' resources and prompts, and which a tenant would notice.
    pub fn changes(&self) -> &ChangeLog {
        &self.log
    }

    /// The upstreams `auth` may see through its toolset `scoped`, by name.
    pub fn visible(&self, auth: &AuthContext, scoped: &ScopedToolset) -> Vec<Arc<Entry>> {
        if !auth.has_scope(scopes::TOOLS_INVOKE) {
            return Vec::new();
        }
        let mut entries: Vec<Arc<Entry>> = self
            .lock()
            .values()
            .filter(|e| match e.owner {
                Owner::Everyone => true,
                Owner::Tenant(t) => t == auth.tenant,
            })
            .filter(|e| scoped.admits_all() || e.tools.iter().any(|t| scoped.get(t).is_some()))
            .cloned()
            .collect();
        entries.sort_by(|a, b| a.upstream.cmp(&b.upstream));
        entries
    }
}

impl Entry {
    fn lists_same(&self, other: &Entry) -> bool {
        self.resources == other.resources
            && self.templates == other.templates
            && self.prompts == other.prompts
    }

    fn lists_nothing(&self) -> bool {
        self.resources.is_empty() && self.templates.is_empty() && self.prompts.is_empty()
    }

    /// This upstream's prompts under the gateway's names.
    pub fn named_prompts(&self) -> impl Iterator<Item = Prompt> + '_ {
        self.prompts.iter().map(|p| {
            let mut p = p.clone();
            p.name = format!("{}{}", self.prefix, p.name);
            p
        })
    }

    /// The upstream's own name of the gateway's prompt `name`, if it is one of these.
    pub fn remote_prompt(&self, name: &str) -> Option<String> {
        let remote = name.strip_prefix(&self.prefix)?;
        self.prompts
            .iter()
            .any(|p| p.name == remote)
            .then(|| remote.to_owned())
    }

    /// Whether this upstream listed `uri`.
    pub fn lists(&self, uri: &str) -> bool {
        self.uris.contains(uri)
    }

    /// Whether this upstream lists the resource template `template` (as written).
    pub fn has_template(&self, template: &str) -> bool {
        self.templates.iter().any(|t| t.uri_template == template)
    }

    /// Whether one of this upstream's templates produces `uri`.
    pub fn templates_match(&self, uri: &str) -> bool {
        self.templates
            .iter()
            .any(|t| matches_template(&t.uri_template, uri))
    }
}

/// The upstream among `upstreams` that serves `uri`: the first that listed it, else the
/// first whose template matches it.
pub fn serving(upstreams: &[Arc<Entry>], uri: &str) -> Option<Arc<Entry>> {
    let listed = upstreams.iter().find(|u| u.lists(uri));
    listed
        .or_else(|| upstreams.iter().find(|u| u.templates_match(uri)))
        .cloned()
}

/// The list, or none when the upstream failed to give it (the first failure kept).
fn or_empty<T>(listed: Result<Vec<T>, ServiceError>, failed: &mut Option<ServiceError>) -> Vec<T> {
    listed.unwrap_or_else(|err| {
        failed.get_or_insert(err);
        Vec::new()
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether RFC 6570 `template` can expand to `uri`: each `{var}` stands for one or more
/// characters other than `/` (`{+var}` and `{#var}`, reserved expansion, for any).
pub fn matches_template(template: &str, uri: &str) -> bool {
    let Some(open) = template.find('{') else {
        return template == uri;
    };
    let Some(close) = template[open..].find('}').map(|c| open + c) else {
        return template == uri;
    };
    let (literal, var, rest) = (
        &template[..open],
        &template[open + 1..close],
        &template[close + 1..],
    );
    let Some(tail) = uri.strip_prefix(literal) else {
        return false;
    };
    let reserved = var.starts_with('+') || var.starts_with('#');
    (1..=tail.len())
        .filter(|&n| tail.is_char_boundary(n))
        .take_while(|&n| reserved || !tail[..n].contains('/'))
        .any(|n| matches_template(rest, &tail[n..]))
}

#[cfg(test)]
mod tests {
    use super::matches_template;

    #[test]
    fn templates_match_what_they_expand_to_and_nothing_else() {
        assert!(matches_template(
            "test://template/{id}/data",
            "test://template/123/data"
        ));
        assert!(!matches_template(
            "test://template/{id}/data",
            "test://template/1/2/data"
        ));
        assert!(!matches_template(
            "test://template/{id}/data",
            "test://template//data"
        ));
        assert!(!matches_template(
            "test://template/{id}/data",
            "test://other/1/data"
        ));
        assert!(matches_template("file:///{+path}", "file:///a/b/c.txt"));
        assert!(matches_template(
            "db://{schema}/{table}",
            "db://public/users"
        ));
        assert!(!matches_template("db://{schema}/{table}", "db://public/"));
        assert!(matches_template("plain://x", "plain://x"));
        assert!(!matches_template("plain://x", "plain://y"));
    }
}
