//! Group commit for audit records ([`toolgate_core::group_commit`]).
//!
//! Every call's record goes through one writer task. While a transaction commits, the
//! records of calls finishing meanwhile queue up; the writer then takes all of them (up to
//! [`MAX_BATCH`]) into the next transaction. Each caller waits for its own record's
//! commit, so a result is never returned before its row is durable, and throughput grows
//! with concurrency instead of paying one commit per call.
//!
//! The queue is bounded ([`QUEUE`]); when it is full, callers wait (backpressure), they
//! are never dropped. When a batch fails, its records are retried one by one, so one bad
//! record cannot fail the others. When every handle is dropped, the task drains the queue
//! and ends; await [`AuditWriterTask::join`] on shutdown.
//!
//! The writer runs on a thread of its own with its own single-threaded runtime and its own
//! connections. Measured on the REST benchmark: on the shared runtime, under 64 concurrent
//! requests, each of the writer's round trips waited behind request tasks and a batch took
//! about 8 ms; the batch is the latency floor of every audited call. On SQLite the batch
//! runs on this thread itself, through a connection of its own (see
//! [`crate::SqliteStore::append_audit`]), not on sqlx's connection thread.

use async_trait::async_trait;
use tokio::sync::{mpsc, oneshot};
use toolgate_core::TenantId;
use toolgate_core::audit::{AuditError, AuditRecord, AuditSink};
use toolgate_core::group_commit::next_group;
use toolgate_core::metrics::Metrics;
use toolgate_core::stores::Change;

use crate::{Store, StoreError};

/// Most records committed in one transaction (see [`Store::max_batch`]).
pub const MAX_BATCH: usize = 512;
/// Records waiting for the writer before callers wait to enqueue.
pub const QUEUE: usize = 8192;

/// A record's outcome, with the record itself handed back so that the request thread that
/// built it also frees it: measured under load, records freed on the writer's thread cost
/// mimalloc's cross-thread free path on both sides.
type Ack = oneshot::Sender<(Result<(), AuditError>, AuditRecord)>;

/// A handle on the writer task. Cheap to clone.
#[derive(Clone, Debug)]
pub struct AuditWriter {
    queue: mpsc::Sender<(AuditRecord, Ack)>,
    store: Store,
    /// What a row keeps of arguments and errors (see [`AuditWriter::cutting_at`]).
    cut_at: usize,
}

/// The writer's thread: finished once the queue is drained after the last handle drops.
#[derive(Debug)]
pub struct AuditWriterTask {
    done: oneshot::Receiver<()>,
}

impl AuditWriterTask {
    /// Waits until every queued record has been written (or failed).
    pub async fn join(self) {
        let _ = self.done.await;
    }
}

impl AuditWriter {
    /// Starts the writer on its own thread over `store`.
    pub fn spawn(store: Store) -> std::io::Result<(AuditWriter, AuditWriterTask)> {
        Self::spawn_measured(store, Metrics::default())
    }

    /// [`AuditWriter::spawn`], recording each transaction's duration into `metrics`.
    pub fn spawn_measured(
        store: Store,
        metrics: Metrics,
    ) -> std::io::Result<(AuditWriter, AuditWriterTask)> {
        let (queue, rx) = mpsc::channel(QUEUE);
        let (done_tx, done) = oneshot::channel();
        let writer_store = store.clone();
        std::thread::Builder::new().name("toolgate-audit".into()).spawn(move || {
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(async move {
                    match writer_store.reopen().await {
                        Ok(own) => run(own, rx, metrics).await,
                        Err(err) => {
                            tracing::error!(error = %err, "the audit writer cannot open the store");
                            refuse_all(rx, &err.to_string()).await;
                        }
                    }
                }),
                Err(err) => tracing::error!(error = %err, "the audit writer cannot start its runtime"),
            }
            let _ = done_tx.send(());
        })?;
        let writer = AuditWriter {
            queue,
            store,
            cut_at: 0,
        };
        Ok((writer, AuditWriterTask { done }))
    }

    /// Rows keep about `bytes` of a call's arguments and of its error, each (see
    /// [`toolgate_core::audit::cut_record`]); 0, as from [`AuditWriter::spawn`], keeps
    /// them whole.
    pub fn cutting_at(mut self, bytes: usize) -> Self {
        self.cut_at = bytes;
        self
    }
}

/// Fails every record that arrives: calls fail closed rather than run unaudited.
async fn refuse_all(mut rx: mpsc::Receiver<(AuditRecord, Ack)>, reason: &str) {
    while let Some((record, ack)) = rx.recv().await {
        let _ = ack.send((Err(AuditError::new(reason)), record));
    }
}

async fn run(store: Store, mut rx: mpsc::Receiver<(AuditRecord, Ack)>, metrics: Metrics) {
    let limit = store.max_batch();
    let mut batch = Vec::with_capacity(limit);
    while next_group(&mut rx, &mut batch, limit, |_| false).await > 0 {
        let (records, acks): (Vec<AuditRecord>, Vec<Ack>) = batch.drain(..).unzip();
        // Only while someone watches (a live audit view): nothing to do per batch otherwise.
        let tenants = store.watched().then(|| {
            let mut tenants: Vec<TenantId> = records.iter().map(|r| r.tenant).collect();
            tenants.sort_unstable();
            tenants.dedup();
            tenants
        });
        let started = std::time::Instant::now();
        let appended = store.append_audit(&records).await;
        metrics.audit_committed(started.elapsed(), appended.is_ok());
        match appended {
            Ok(()) => {
                tracing::debug!(
                    records = records.len(),
                    elapsed_ms = started.elapsed().as_secs_f64() * 1000.0,
                    "audit batch committed"
                );
                for (record, ack) in records.into_iter().zip(acks) {
                    let _ = ack.send((Ok(()), record));
                }
            }
            Err(err) if records.len() == 1 => {
                tracing::error!(error = %err, "audit record could not be written");
                for (record, ack) in records.into_iter().zip(acks) {
                    let _ = ack.send((Err(audit_error(&err)), record));
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, records = records.len(), "audit batch failed; retrying records one by one");
                for (record, ack) in records.into_iter().zip(acks) {
                    let result = store.append_audit(std::slice::from_ref(&record)).await;
                    if let Err(err) = &result {
                        tracing::error!(error = %err, call_id = %record.call_id, "audit record could not be written");
                    }
                    let _ = ack.send((result.map_err(|e| audit_error(&e)), record));
                }
            }
        }
        // After the callers have their answers: this instance's live views of the audit
        // look now (another instance's rows reach them on their timer).
        for tenant in tenants.into_iter().flatten() {
            store.announce_local(Change::Audit(tenant));
        }
    }
}

/// A store failure as the executor takes it: transient when the store could not take
/// the write for now (see [`StoreError::is_unavailable`]).
fn audit_error(err: &StoreError) -> AuditError {
    if err.is_unavailable() {
        AuditError::transient(err.to_string())
    } else {
        AuditError::new(err.to_string())
    }
}

#[async_trait]
impl AuditSink for AuditWriter {
    async fn record_intent(&self, record: &AuditRecord) -> Result<(), AuditError> {
        // An intent's arguments become its row's if the gateway stops mid-call.
        let cut = toolgate_core::audit::needs_cut(record, self.cut_at).then(|| {
            let mut cut = record.clone();
            toolgate_core::audit::cut_record(&mut cut, self.cut_at);
            cut
        });
        self.store
            .record_call_intent(cut.as_ref().unwrap_or(record))
            .await
            .map_err(|e| audit_error(&e))
    }

    async fn record(&self, mut record: AuditRecord) -> Result<(), AuditError> {
        toolgate_core::audit::cut_record(&mut record, self.cut_at);
        let (ack, done) = oneshot::channel();
        self.queue
            .send((record, ack))
            .await
            .map_err(|_| AuditError::new("the audit writer has stopped"))?;
        match done.await {
            Ok((Ok(()), _record)) => Ok(()),
            Ok((Err(err), _)) => Err(err),
            Err(_) => Err(AuditError::new(
                "the audit writer stopped before committing",
            )),
        }
    }

    fn backlog(&self) -> usize {
        QUEUE - self.queue.capacity()
    }
}
