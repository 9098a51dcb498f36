//! Resources and prompts of upstream MCP servers, federated beside their tools.
//!
//! Each upstream's supervisor lists its resources, resource templates and prompts when it
//! connects and again on the upstream's `list_changed` notifications, and files them here
//! under the upstream; the MCP front door serves them to the callers who may see that
//! upstream and relays `resources/read` and `prompts/get` to it.
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
//! Not federated yet: `resources/subscribe` (upstream connections speak 2026-07-28, where
//! subscriptions are `subscriptions/listen`) and argument completion for prompts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{Prompt, Resource, ResourceTemplate};
use rmcp::service::Peer;
use rmcp::{RoleClient, ServiceError};
use toolgate_core::auth::scopes;
use toolgate_core::{AuthContext, Owner, ScopedToolset, Toolset};

/// Every connected upstream's resources and prompts. Shared by the upstreams'
/// supervisors (which fill it) and the MCP front door (which serves it).
#[derive(Default)]
pub struct Catalog {
    entries: Mutex<HashMap<(Owner, String), Arc<Entry>>>,
}

/// One connected upstream's listing.
pub struct Entry {
    pub upstream: String,
    owner: Owner,
    prefix: String,
    /// The gateway's names of the upstream's tools (for visibility).
    tools: Vec<String>,
    pub peer: Peer<RoleClient>,
    pub resources: Vec<Resource>,
    pub templates: Vec<ResourceTemplate>,
    pub prompts: Vec<Prompt>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("upstreams", &self.lock().len())
            .finish()
    }
}

impl Catalog {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Owner, String), Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lists what `peer` offers (only what its capabilities declare) and files it under
    /// the upstream, replacing the previous listing. Fails, leaving the previous listing,
    /// when a listing fails.
    pub(crate) async fn refresh(
        &self,
        upstream: &str,
        owner: Owner,
        prefix: &str,
        tools: &[String],
        peer: &Peer<RoleClient>,
    ) -> Result<(), ServiceError> {
        let capabilities = peer.peer_info().map(|info| info.capabilities.clone());
        let offers_resources = capabilities.as_ref().is_some_and(|c| c.resources.is_some());
        let offers_prompts = capabilities.as_ref().is_some_and(|c| c.prompts.is_some());
        let (resources, templates) = if offers_resources {
            (
                peer.list_all_resources().await?,
                peer.list_all_resource_templates().await?,
            )
        } else {
            (Vec::new(), Vec::new())
        };
        let prompts = if offers_prompts {
            peer.list_all_prompts().await?
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
            prefix: prefix.to_owned(),
            tools: tools.to_vec(),
            peer: peer.clone(),
            resources,
            templates,
            prompts,
        };
        self.lock()
            .insert((owner, upstream.to_owned()), Arc::new(entry));
        Ok(())
    }

    /// The upstream is gone (its connection ended, or it was removed).
    pub(crate) fn remove(&self, upstream: &str, owner: Owner) {
        self.lock().remove(&(owner, upstream.to_owned()));
    }

    /// The upstreams `auth` may see through `toolset`, by name.
    pub fn visible(
        &self,
        auth: &AuthContext,
        toolset: &Toolset,
        scoped: &ScopedToolset,
    ) -> Vec<Arc<Entry>> {
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
            .filter(|e| toolset.is_all() || e.tools.iter().any(|t| scoped.get(t).is_some()))
            .cloned()
            .collect();
        entries.sort_by(|a, b| a.upstream.cmp(&b.upstream));
        entries
    }
}

impl Entry {
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
        self.resources.iter().any(|r| r.uri == uri)
    }

    /// Whether one of this upstream's templates produces `uri`.
    pub fn templates_match(&self, uri: &str) -> bool {
        self.templates
            .iter()
            .any(|t| matches_template(&t.uri_template, uri))
    }
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
