//! `list_changed` notifications: each session hears when what its tenant sees changes.

use super::*;

/// Tells one session's client whenever the tools, or the upstreams' resources and
/// prompts, its tenant sees change (any change when the tenant is unknown), until the
/// session ends.
pub(crate) fn watch_lists(
    registry: Arc<Registry>,
    catalog: Arc<catalog::Catalog>,
    tenant: Option<TenantId>,
    peer: Peer<RoleServer>,
) {
    let mut tools = ListWatch::new(registry.changes(), move || {
        tenant.map(|t| registry.generation(t))
    });
    let mut lists = ListWatch::new(catalog.changes().subscribe(), move || {
        tenant.map(|t| catalog.changes().generation(t))
    });
    tokio::spawn(async move {
        let mut alive = tokio::time::interval(SESSION_CHECK);
        loop {
            tokio::select! {
                changed = tools.next() => {
                    if !changed || peer.notify_tool_list_changed().await.is_err() {
                        break;
                    }
                }
                changed = lists.next() => {
                    if !changed
                        || peer.notify_resource_list_changed().await.is_err()
                        || peer.notify_prompt_list_changed().await.is_err()
                    {
                        break;
                    }
                }
                _ = alive.tick() => {
                    if peer.is_transport_closed() {
                        break;
                    }
                }
            }
        }
    });
}

/// Changes to one kind of list a tenant sees: `changes` wakes on every change, to anyone's
/// list; `generation` (the tenant's count of changes, `None` when the tenant is unknown)
/// tells which were the tenant's.
pub(crate) struct ListWatch<F> {
    changes: tokio::sync::watch::Receiver<u64>,
    generation: F,
    seen: Option<u64>,
}

impl<F: Fn() -> Option<u64>> ListWatch<F> {
    pub(crate) fn new(mut changes: tokio::sync::watch::Receiver<u64>, generation: F) -> Self {
        changes.mark_unchanged();
        let seen = generation();
        Self {
            changes,
            generation,
            seen,
        }
    }

    /// Waits for the next change to the tenant's list; `false` when changes can no longer
    /// come.
    pub(crate) async fn next(&mut self) -> bool {
        loop {
            if self.changes.changed().await.is_err() {
                return false;
            }
            if let (Some(now), Some(last)) = ((self.generation)(), self.seen.as_mut()) {
                if now == *last {
                    continue;
                }
                *last = now;
            }
            return true;
        }
    }
}
