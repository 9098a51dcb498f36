//! The store's one notifier: a [`Change`] announced when its transaction commits, to
//! every waiter on every instance. SQLite (one instance) sends it in process once the
//! transaction has committed; Postgres sends `NOTIFY` inside the transaction, so it is
//! delivered only if and when it commits, to every instance listening (this one
//! included, through its listening connection).
//!
//! A waiter also keeps a slow timer of its own: a receiver that falls behind, or a
//! listening connection remade, is told [`Change::Missed`] and reads the store again.

use std::sync::Arc;

use tokio::sync::broadcast;
use toolgate_core::stores::{Change, Changes};
use toolgate_core::{RunId, TenantId};

use crate::StoreError;

/// The `NOTIFY` channel changes travel on.
pub(crate) const CHANNEL: &str = "toolgate_changes";
/// Changes a slow receiver may fall behind by before it is told it missed some.
const BACKLOG: usize = 1024;

/// Where a store's changes are announced; shared by its clones.
#[derive(Clone, Debug)]
pub(crate) struct Notifier {
    changes: broadcast::Sender<Change>,
    /// On Postgres: the listening task, started on the first watch.
    listening: Arc<tokio::sync::OnceCell<()>>,
}

impl Default for Notifier {
    fn default() -> Self {
        Self {
            changes: broadcast::channel(BACKLOG).0,
            listening: Arc::default(),
        }
    }
}

impl Notifier {
    /// Tells this process's waiters (SQLite, after the commit).
    pub(crate) fn announce(&self, change: Change) {
        let _ = self.changes.send(change);
    }

    /// Whether anyone in this process watches.
    pub(crate) fn watched(&self) -> bool {
        self.changes.receiver_count() > 0
    }

    /// The changes from now on.
    pub(crate) fn watch(&self) -> Changes {
        Changes::new(self.changes.subscribe())
    }

    /// On Postgres: starts (once) the task listening on [`CHANNEL`] with its own
    /// connection from `pool`'s options, passing what it hears to this process's waiters.
    pub(crate) async fn listen_on(&self, pool: &sqlx::PgPool) -> Result<(), StoreError> {
        self.listening
            .get_or_try_init(|| async {
                let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
                listener.listen(CHANNEL).await?;
                // Weak: the task ends with the store (checked while nothing is heard).
                let changes = self.changes.downgrade();
                tokio::spawn(async move {
                    loop {
                        // `None`: the connection was lost and is made again on the next
                        // call, so something may have been missed.
                        let heard = tokio::select! {
                            heard = listener.try_recv() => Some(heard),
                            () = tokio::time::sleep(std::time::Duration::from_secs(10)) => None,
                        };
                        let Some(changes) = changes.upgrade() else {
                            return;
                        };
                        let change = match heard {
                            None => continue,
                            Some(Ok(Some(n))) => match decode(n.payload()) {
                                Some(change) => change,
                                None => continue,
                            },
                            Some(Ok(None)) => Change::Missed,
                            Some(Err(err)) => {
                                tracing::warn!(error = %err, "listening for store changes failed; retrying");
                                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                                Change::Missed
                            }
                        };
                        let _ = changes.send(change);
                    }
                });
                Ok::<(), StoreError>(())
            })
            .await?;
        Ok(())
    }
}

/// The `NOTIFY` payload of `change`.
pub(crate) fn encode(change: Change) -> String {
    match change {
        Change::Approvals(tenant) => format!("approvals:{tenant}"),
        // As migration 0017's `toolgate_append_run_events` writes it.
        Change::Run { tenant, run } => format!("run:{tenant}:{run}"),
        Change::PinApproved => "pin".to_owned(),
        Change::Audit(tenant) => format!("audit:{tenant}"),
        Change::Missed => "missed".to_owned(),
    }
}

fn decode(payload: &str) -> Option<Change> {
    match payload.split_once(':') {
        Some(("approvals", tenant)) => tenant.parse().ok().map(|t| Change::Approvals(TenantId(t))),
        Some(("audit", tenant)) => tenant.parse().ok().map(|t| Change::Audit(TenantId(t))),
        Some(("run", ids)) => {
            let (tenant, run) = ids.split_once(':')?;
            Some(Change::Run {
                tenant: TenantId(tenant.parse().ok()?),
                run: RunId(run.parse().ok()?),
            })
        }
        _ if payload == "pin" => Some(Change::PinApproved),
        _ if payload == "missed" => Some(Change::Missed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_read_back_as_the_changes_they_announce() {
        let tenant = TenantId(uuid::Uuid::new_v4());
        let run = RunId(uuid::Uuid::new_v4());
        for change in [
            Change::Approvals(tenant),
            Change::Run { tenant, run },
            Change::Missed,
        ] {
            assert_eq!(decode(&encode(change)), Some(change));
        }
        assert_eq!(decode("approvals:not-a-uuid"), None);
        assert_eq!(decode("runs:x"), None);
    }
}
