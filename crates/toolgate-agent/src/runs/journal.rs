//! A run's journal in the store: its events committed in order, grouped
//! ([`toolgate_core::group_commit`]), by one writer task per run.

use toolgate_core::group_commit::next_group;

use super::*;

/// A run's journal in the store: one writer task per run commits events in order,
/// numbered by the run's one driver, grouping whatever queued while it was committing
/// into one transaction. The loop waits for a commit only where effects are at stake
/// (see [`Journal::append`]); the queue holds [`QUEUE`] events, and a full queue makes
/// the loop wait for the store.
pub(super) struct StoreJournal {
    queue: tokio::sync::mpsc::Sender<Queued>,
    /// The first failed commit: every later append fails with it.
    failed: Arc<Mutex<Option<String>>>,
}

struct Queued {
    event: Value,
    finish: Option<RunFinish>,
    done: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
}

/// Most events committed in one transaction.
const MAX_GROUP: usize = 64;
/// Events a run may have queued for commit before its loop waits.
const QUEUE: usize = 256;

impl StoreJournal {
    pub(super) fn new<S: Store>(
        runs: Arc<Runs<S>>,
        tenant: TenantId,
        run: RunId,
        next_seq: i64,
    ) -> Self {
        let (queue, mut rx) = tokio::sync::mpsc::channel::<Queued>(QUEUE);
        let failed = Arc::new(Mutex::new(None::<String>));
        let failure = failed.clone();
        tokio::spawn(async move {
            let mut next = next_seq;
            let mut group = Vec::with_capacity(MAX_GROUP);
            // The run's end closes a group: it also updates the run row.
            while next_group(&mut rx, &mut group, MAX_GROUP, |q| q.finish.is_some()).await > 0 {
                let events: Vec<Value> = group.iter().map(|q| q.event.clone()).collect();
                let finish = group.last().and_then(|q| q.finish.clone());
                // Durable when anyone waits on this group (see `Journal::append`).
                let durable = group.iter().any(|q| q.done.is_some());
                // After a failed commit nothing more is written: the numbering has a gap.
                let earlier = failure.lock().unwrap_or_else(|p| p.into_inner()).clone();
                let result = match earlier {
                    Some(err) => Err(err),
                    None => runs
                        .store
                        .append_run_events(tenant, run, next, &events, finish.as_ref(), durable)
                        .await
                        .map_err(|e| e.to_string()),
                };
                match &result {
                    Ok(()) => {
                        next += events.len() as i64;
                        runs.notify(run, next - 1, finish.is_some());
                    }
                    Err(err) => {
                        tracing::warn!(run_id = %run, error = %err, "a run's journal could not be written");
                        failure
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert_with(|| err.clone());
                    }
                }
                for q in group.drain(..) {
                    if let Some(done) = q.done {
                        let _ = done.send(result.clone());
                    }
                }
            }
        });
        StoreJournal { queue, failed }
    }
}

#[async_trait::async_trait]
impl Journal for StoreJournal {
    async fn append(&self, event: &RunEvent, wait: bool) -> Result<(), String> {
        if let Some(err) = self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Err(err);
        }
        let value = serde_json::to_value(event).map_err(|e| e.to_string())?;
        let finish = match event {
            RunEvent::RunFinished(finish) => Some(finish.clone()),
            // Paused: the run row says so and frees its lease, so that whichever instance
            // sees the decision first takes it over.
            RunEvent::RunPaused { usage, .. } => Some(RunFinish {
                status: RunStatus::AwaitingApproval,
                output: None,
                best_effort: false,
                error: None,
                usage: *usage,
            }),
            _ => None,
        };
        let (done, committed) = if wait {
            let (tx, rx) = tokio::sync::oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        self.queue
            .send(Queued {
                event: value,
                finish,
                done,
            })
            .await
            .map_err(|_| "the run's journal writer has stopped".to_owned())?;
        match committed {
            Some(rx) => rx
                .await
                .unwrap_or_else(|_| Err("the run's journal writer has stopped".to_owned())),
            None => Ok(()),
        }
    }
}
