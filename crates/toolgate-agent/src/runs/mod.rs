//! Agent runs in this gateway instance: starting them, journaling their events to the
//! store, waking SSE readers, leases, cancellation, and taking over runs whose instance
//! stopped.
//!
//! Each run is driven by one task on the instance holding its lease (30 s, renewed every
//! 10 s). A gateway that stops gracefully drops its drivers and expires its leases at
//! once; one that dies lets them run out. Either way, an instance that finds a running run
//! with an expired lease (at start-up and every 15 s) claims it, folds its journal back
//! into state and drives it on. A cancel request is a flag on the run: the owner sees it
//! within one renewal (at once when it is the instance that received the request).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toolgate_core::clock::{Clock, SystemClock};
use toolgate_core::per_key::PerKey;
use toolgate_core::stores::{ApprovalStore, NewRun, RunFinish, RunStore};
use toolgate_core::{AuthContext, Event, Executor, Registry, RunId, TenantId, Toolset};
use uuid::Uuid;

use crate::provider::Provider;
use crate::provider::stream::Delta;
use crate::{AgentConfig, Journal, RunContext, RunEvent, RunState, RunStatus, drive};

mod journal;
mod leases;

use journal::StoreJournal;

/// How long a lease lasts, and how often its owner renews it.
/// Pieces of replies a slow stream may fall behind by before it skips some (the whole
/// message follows as a step anyway).
const DELTA_BACKLOG: usize = 1024;
const LEASE: Duration = Duration::from_secs(30);
const RENEW_EVERY: Duration = Duration::from_secs(10);
/// How often to look for runs whose instance stopped.
const ORPHAN_SCAN_EVERY: Duration = Duration::from_secs(15);
/// Most orphaned runs taken over per scan.
const ORPHAN_BATCH: i64 = 32;

/// Why a run could not start; `E` is the store's error.
#[derive(Debug, thiserror::Error)]
pub enum StartError<E: std::error::Error + 'static> {
    #[error("the agent names the provider {0:?}, which this gateway does not configure")]
    UnknownProvider(String),
    #[error("the agent's configuration is invalid: {0}")]
    InvalidAgent(String),
    /// The tenant has as many runs going on this instance as it may start; try again
    /// once one ends.
    #[error("{0}")]
    Busy(String),
    #[error(transparent)]
    Store(E),
}

/// How many runs this instance drives for each tenant: new runs are counted against
/// the tenant's cap; runs taken over from another instance are counted, never refused.
#[derive(Default)]
struct Driven {
    counts: Mutex<PerKey<TenantId>>,
    /// Runs one tenant may start while that many are driven here.
    per_tenant: std::sync::atomic::AtomicUsize,
}

/// One run counted in [`Driven`], until dropped (with the run's task, or when the run
/// fails to start).
struct Slot {
    driven: Arc<Driven>,
    tenant: TenantId,
}

impl Driven {
    fn counts(&self) -> std::sync::MutexGuard<'_, PerKey<TenantId>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new run of `tenant`'s; `None` when the tenant is at its cap.
    fn admit(self: &Arc<Self>, tenant: TenantId) -> Option<Slot> {
        let cap = self.per_tenant.load(std::sync::atomic::Ordering::Relaxed);
        self.counts().try_add(tenant, cap).ok()?;
        Some(self.slot(tenant))
    }

    /// A slot for a run of `tenant`'s taken over from another instance: counted, never
    /// refused.
    fn count(self: &Arc<Self>, tenant: TenantId) -> Slot {
        self.counts().add(tenant);
        self.slot(tenant)
    }

    fn slot(self: &Arc<Self>, tenant: TenantId) -> Slot {
        Slot {
            driven: self.clone(),
            tenant,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.driven.counts().release(&self.tenant);
    }
}

/// What the supervisor needs of a store: runs and their journals, and approval expiry.
pub trait Store: RunStore + ApprovalStore {}
impl<S: RunStore + ApprovalStore> Store for S {}

/// The store's error.
type Error<S> = <S as toolgate_core::stores::Backend>::Error;

/// A piece of a streamed model reply: its turn, and its SSE `model_delta` data.
pub type Piece = (u32, Arc<str>);

/// The agent runs of this gateway instance, over the store `S`.
pub struct Runs<S> {
    store: S,
    registry: Arc<Registry>,
    executor: Executor,
    providers: HashMap<String, Arc<dyn Provider>>,
    /// This instance's name in run leases.
    instance: String,
    /// Where lease times and claim cut-offs come from.
    clock: Arc<dyn Clock>,
    /// Runs this instance drives, with the token that stops each.
    active: Mutex<HashMap<RunId, Active>>,
    /// How many of them each tenant has, and how many it may start.
    driven: Arc<Driven>,
    /// Whether the credential each run was started with still stands (a run whose API
    /// key is revoked is cancelled); every one does unless set.
    standing: std::sync::OnceLock<Arc<dyn toolgate_core::auth::Standing>>,
    /// The latest committed step of each run with readers here, to wake SSE streams
    /// and waiting requests.
    bus: Mutex<HashMap<RunId, watch::Sender<Committed>>>,
    /// Pieces of model replies of runs this instance drives, as SSE data, for the streams
    /// following them here (never stored).
    deltas: Mutex<HashMap<RunId, tokio::sync::broadcast::Sender<Piece>>>,
}

/// How far a run's journal is committed: its last step, and whether that ended (or
/// paused) the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Committed {
    pub seq: i64,
    pub finished: bool,
}

struct Active {
    stop: Stop,
    /// Whose run it is: checked on each renewal to still stand.
    auth: Arc<AuthContext>,
    task: tokio::task::AbortHandle,
}

/// What stops a run here: its token, and why the gateway stopped it, when it did.
#[derive(Clone, Default)]
struct Stop {
    cancel: CancellationToken,
    because: Arc<std::sync::OnceLock<String>>,
}

impl Stop {
    /// Stops the run, saying why.
    fn because(&self, reason: String) {
        let _ = self.because.set(reason);
        self.cancel.cancel();
    }
}

/// A person's decision on an approval lets the runs waiting on it go on here.
#[async_trait::async_trait]
impl<S: Store + 'static> toolgate_core::approvals::PausedRuns for Runs<S> {
    async fn resume_decided(self: Arc<Self>) {
        Runs::resume_decided(&self).await;
    }
}

impl<S: Store> Runs<S> {
    /// This instance's name (in run leases and the instances table).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn new(
        store: S,
        registry: Arc<Registry>,
        executor: Executor,
        providers: HashMap<String, Arc<dyn Provider>>,
    ) -> Arc<Self> {
        Self::with_clock(store, registry, executor, providers, Arc::new(SystemClock))
    }

    /// As [`new`](Self::new), with leases and claims timed by `clock`.
    pub fn with_clock(
        store: S,
        registry: Arc<Registry>,
        executor: Executor,
        providers: HashMap<String, Arc<dyn Provider>>,
        clock: Arc<dyn Clock>,
    ) -> Arc<Self> {
        Arc::new(Runs {
            store,
            registry,
            executor,
            providers,
            instance: format!("toolgate-{}", Uuid::now_v7().simple()),
            clock,
            active: Mutex::default(),
            driven: Arc::new(Driven {
                counts: Mutex::default(),
                per_tenant: usize::MAX.into(),
            }),
            standing: std::sync::OnceLock::new(),
            bus: Mutex::default(),
            deltas: Mutex::default(),
        })
    }

    /// At most `runs` of one tenant's runs driven by this instance at once; a start
    /// past that is refused ([`StartError::Busy`]). Runs taken over from other instances
    /// count, but are never refused. Unlimited unless set.
    pub fn limit_per_tenant(&self, runs: usize) {
        self.driven
            .per_tenant
            .store(runs, std::sync::atomic::Ordering::Relaxed);
    }

    /// Cancels runs whose credential no longer stands by `standing` (checked on each lease
    /// renewal, and before a run is taken over). Set once; later calls are ignored.
    pub fn check_standing(&self, standing: Arc<dyn toolgate_core::auth::Standing>) {
        let _ = self.standing.set(standing);
    }

    /// Why `auth` no longer stands, if it does not.
    async fn lapsed(&self, auth: &AuthContext) -> Option<String> {
        match self.standing.get() {
            Some(standing) => standing.lapsed(auth).await,
            None => None,
        }
    }

    /// Records a new run of `agent` for `auth` and starts driving it, unless the tenant
    /// already has as many runs going here as it may ([`limit_per_tenant`](Self::limit_per_tenant)).
    pub async fn start(
        self: &Arc<Self>,
        auth: Arc<AuthContext>,
        agent_id: Uuid,
        agent: AgentConfig,
        input: String,
        request_id: Option<String>,
    ) -> Result<RunId, StartError<Error<S>>> {
        let provider = self.provider(&agent)?;
        let toolset = agent.toolset().map_err(StartError::InvalidAgent)?;
        let slot = self.driven.admit(auth.tenant).ok_or_else(|| {
            StartError::Busy(format!(
                "your tenant has {} agent runs going on this instance, the most it may start; try again when one ends",
                self.driven.per_tenant.load(std::sync::atomic::Ordering::Relaxed)
            ))
        })?;
        let run = RunId::new();
        let first = RunEvent::RunStarted {
            agent: agent.name.clone(),
            input: input.clone(),
        };
        let new = NewRun {
            id: run,
            agent_id,
            agent_name: agent.name.clone(),
            principal: auth.principal.id,
            auth: (*auth).clone(),
            agent_config: serde_json::to_value(&agent).unwrap_or(Value::Null),
            input,
            owner: self.instance.clone(),
            lease_until: self.clock.now() + LEASE,
            first_event: serde_json::to_value(&first).unwrap_or(Value::Null),
        };
        self.store
            .create_run(auth.tenant, &new)
            .await
            .map_err(StartError::Store)?;
        self.notify(run, 1, false);
        let state = RunState::fold(&[first]);
        self.spawn(
            run,
            slot,
            auth,
            toolset,
            agent,
            provider,
            state,
            2,
            request_id,
            Stop::default(),
        );
        Ok(run)
    }

    fn provider(&self, agent: &AgentConfig) -> Result<Arc<dyn Provider>, StartError<Error<S>>> {
        self.providers
            .get(&agent.provider)
            .cloned()
            .ok_or_else(|| StartError::UnknownProvider(agent.provider.clone()))
    }

    /// Whether the gateway knows the provider `name`.
    pub fn has_provider(&self, name: &str) -> bool {
        self.providers.contains_key(name)
    }

    #[allow(clippy::too_many_arguments)] // one call site each; a struct would only rename them
    fn spawn(
        self: &Arc<Self>,
        run: RunId,
        slot: Slot,
        auth: Arc<AuthContext>,
        agent_tools: Toolset,
        agent: AgentConfig,
        provider: Arc<dyn Provider>,
        state: RunState,
        next_seq: i64,
        request_id: Option<String>,
        stop: Stop,
    ) {
        let owner = auth.clone();
        // The caller may use every tool (scopes decide in the executor); the agent's list
        // narrows that.
        let tools = Toolset::all()
            .intersect(&agent_tools)
            .scope(self.registry.clone(), &auth);
        let journal = Arc::new(StoreJournal::new(self.clone(), auth.tenant, run, next_seq));
        let ctx = RunContext {
            run_id: run,
            auth,
            tools,
            executor: self.executor.clone(),
            provider,
            journal,
            cancel: stop.cancel.clone(),
            cancelled_because: stop.because.clone(),
            request_id,
            // Checked when the agent was saved; a provider gone since leaves the main
            // model to answer every turn.
            fast: agent.fast_model.as_ref().and_then(|_| {
                self.providers
                    .get(agent.fast_provider.as_deref().unwrap_or(&agent.provider))
                    .cloned()
            }),
            deltas: agent.stream.then(|| {
                let runs = Arc::downgrade(self);
                let publish: Arc<dyn Fn(u32, Delta) + Send + Sync> =
                    Arc::new(move |turn, delta| {
                        if let Some(runs) = runs.upgrade() {
                            runs.publish_delta(run, turn, delta);
                        }
                    });
                publish
            }),
        };
        let this = self.clone();
        // Registered before the task can finish, so it is removed after, not before.
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let task = tokio::spawn(async move {
            // Given back when the run stops here, or its task is aborted.
            let _slot = slot;
            let outcome = drive(&ctx, &agent, state).await;
            this.executor
                .metrics()
                .run_finished(ctx.auth.tenant, outcome.status);
            this.executor.events().emit(&Event::RunStopped {
                tenant: ctx.auth.tenant,
                run,
                status: outcome.status.as_str(),
                best_effort: outcome.best_effort,
                input_tokens: outcome.usage.input_tokens,
                output_tokens: outcome.usage.output_tokens,
            });
            this.active
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&run);
        });
        active.insert(
            run,
            Active {
                stop,
                auth: owner,
                task: task.abort_handle(),
            },
        );
    }

    /// Asks a run to stop: at once if this instance drives it, else through the store.
    /// False when the run is not running (or not the tenant's).
    pub async fn cancel(self: &Arc<Self>, tenant: TenantId, run: RunId) -> Result<bool, Error<S>> {
        let requested = self.store.request_run_cancel(tenant, run).await?;
        if requested {
            // Nobody waits for what the run held any more: its approvals leave the inbox.
            self.expire_approvals_of(tenant, run, "the run that asked for it was cancelled")
                .await?;
        }
        let here = requested
            && match self.lock_active().get(&run) {
                Some(active) => {
                    active.stop.cancel.cancel();
                    true
                }
                None => false,
            };
        // A run paused for approval has no driver: take it over, so it ends now.
        if requested && !here {
            self.resume_decided().await;
        }
        Ok(requested)
    }

    fn lock_active(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, Active>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that changes when `run` gets a new event on this instance.
    pub fn subscribe(&self, run: RunId) -> watch::Receiver<Committed> {
        let mut bus = self.bus.lock().unwrap_or_else(|p| p.into_inner());
        bus.retain(|_, tx| tx.receiver_count() > 0);
        bus.entry(run)
            .or_insert_with(|| watch::channel(Committed::default()).0)
            .subscribe()
    }

    /// Pieces of `run`'s model replies as they stream in on this instance (the run's
    /// agent must stream), with their turn: SSE `model_delta` data, `{"turn", "text"}`, `{"turn",
    /// "reasoning"}` or `{"turn", "restart": true}`.
    pub fn subscribe_deltas(&self, run: RunId) -> tokio::sync::broadcast::Receiver<Piece> {
        let mut deltas = self.deltas.lock().unwrap_or_else(|p| p.into_inner());
        deltas.retain(|_, tx| tx.receiver_count() > 0);
        deltas
            .entry(run)
            .or_insert_with(|| tokio::sync::broadcast::channel(DELTA_BACKLOG).0)
            .subscribe()
    }

    fn publish_delta(&self, run: RunId, turn: u32, delta: Delta) {
        let deltas = self.deltas.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tx) = deltas.get(&run).filter(|tx| tx.receiver_count() > 0) else {
            return;
        };
        let data = match delta {
            Delta::Text(text) => serde_json::json!({"turn": turn, "text": text}),
            Delta::Reasoning(text) => serde_json::json!({"turn": turn, "reasoning": text}),
            Delta::Restart => serde_json::json!({"turn": turn, "restart": true}),
        };
        let _ = tx.send((turn, data.to_string().into()));
    }

    fn notify(&self, run: RunId, seq: i64, finished: bool) {
        let bus = self.bus.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = bus.get(&run) {
            tx.send_replace(Committed { seq, finished });
        }
    }

    /// A journal entry (`kind`, its stored `payload`) of `tenant`'s as shown to people:
    /// the tool calls' secret arguments masked as the audit masks them. The journal keeps
    /// them whole, for a run resumed after an approval makes its call again with them.
    pub fn mask_secrets(&self, tenant: TenantId, kind: &str, payload: &mut Value) {
        let mask = |call: &mut Value, name: &str| {
            let tool = call.get(name).and_then(Value::as_str).map(str::to_owned);
            if let (Some(tool), Some(args)) = (tool, call.get_mut("arguments")) {
                *args = self
                    .executor
                    .masked(self.registry.get(tenant, &tool).as_deref(), args);
            }
        };
        match kind {
            "tool_call_started" => mask(payload, "tool"),
            "model_message" => {
                let calls = payload
                    .pointer_mut("/message/tool_calls")
                    .and_then(Value::as_array_mut);
                for call in calls.into_iter().flatten() {
                    mask(call, "name");
                }
            }
            _ => {}
        }
    }
}
