//! Approvals over a store: the executor's [`Approvals`] seam ([`StoredApprovals`]: tenant
//! policies cached briefly, calls gated atomically in the store), and a person's
//! decision ([`Decisions`]): its rules and what it sets going, the same whichever front
//! door it comes through (REST, an MCP client's elicitation).
//!
//! A decision may land on any instance. An agent run waiting on it is taken over by the
//! instance that received the decision ([`PausedRuns`]; failing that, by the next
//! periodic claim of any instance). An approved REST call is run by the deciding
//! instance, as its requester, and its outcome kept for its requester to read back
//! ([`FollowUps::keep`]); should that instance stop first, the call's outcome says so
//! once it can no longer be running ([`Decisions::interrupt_orphaned_calls`]). An MCP
//! client makes its call again, which uses the approval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use crate::audit::{AuditError, AuditRecord, AuditSink};
use crate::executor::Completed;
use crate::policy::{ApprovalError, ApprovalRequest};
use crate::stores::{ApprovalRecord, ApprovalStatus, ApprovalStore, Decision};
use crate::{
    Adapter, ApprovalId, Approvals, AuthContext, CallContext, ErrorKind, Event, Executor, Gate,
    Outcome, Policy, Registry, TenantId, ToolError, Toolset, Violation,
};

/// How long a tenant's policy is served from memory: a change made on another instance
/// applies within this time (at once on the instance that made it, see
/// [`StoredApprovals::forget`]).
const POLICY_TTL: Duration = Duration::from_secs(1);

/// How long past the longest a tool may run an approved REST call without an outcome is
/// taken for interrupted: room for its audit row and its outcome to be written.
const ORPHAN_MARGIN: Duration = Duration::from_secs(60);

/// How many times an approved call's outcome is offered to the store.
const KEEP_ATTEMPTS: u32 = 5;

/// Longest reason a decision may give, in characters.
pub const MAX_REASON_CHARS: usize = 2000;

/// The executor's approvals over the store `S`.
pub struct StoredApprovals<S> {
    store: S,
    cache: Mutex<HashMap<TenantId, (Instant, Arc<Policy>)>>,
}

impl<S: ApprovalStore> StoredApprovals<S> {
    pub fn new(store: S) -> Self {
        Self {
            store,
            cache: Mutex::default(),
        }
    }

    /// Drops the cached policy of `tenant` (after it changed here).
    pub fn forget(&self, tenant: TenantId) {
        self.lock().remove(&tenant);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, (Instant, Arc<Policy>)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tenant's policy from the store, cached for [`POLICY_TTL`].
    async fn load_policy(&self, tenant: TenantId) -> Result<Arc<Policy>, ApprovalError> {
        let stored = self
            .store
            .approval_policy(tenant)
            .await
            .map_err(|e| ApprovalError::from_store::<S>(&e))?;
        let policy = match stored {
            Some(doc) => serde_json::from_value(doc).map_err(|e| {
                ApprovalError::new(format!("the stored policy cannot be read: {e}"))
            })?,
            None => Policy::default(),
        };
        let policy = Arc::new(policy);
        self.lock().insert(tenant, (Instant::now(), policy.clone()));
        Ok(policy)
    }
}

#[async_trait]
impl<S: ApprovalStore> Approvals for StoredApprovals<S> {
    async fn policy(&self, tenant: TenantId) -> Result<Arc<Policy>, ApprovalError> {
        if let Some((at, policy)) = self.lock().get(&tenant)
            && at.elapsed() < POLICY_TTL
        {
            return Ok(policy.clone());
        }
        // Boxed apart: the store read's future is kilobytes, and every call's (cached)
        // policy lookup would otherwise allocate and copy it.
        Box::pin(self.load_policy(tenant)).await
    }

    async fn gate(&self, request: ApprovalRequest) -> Result<Gate, ApprovalError> {
        // The executor announces what it found (`approval.used`, …).
        self.store
            .gate_approval(&request)
            .await
            .map_err(|e| ApprovalError::from_store::<S>(&e))
    }
}

/// Why a decision was not taken; `E` is the store's error (a decided or expired
/// approval is the store's conflict).
#[derive(Debug, thiserror::Error)]
pub enum DecideError<E: std::error::Error + 'static> {
    /// The decider may not decide it, or the decision is malformed.
    #[error(transparent)]
    Refused(ToolError),
    #[error(transparent)]
    Store(E),
    /// Decided and stored, but its audit row could not be written.
    #[error("the decision could not be audited: {0}")]
    Audit(AuditError),
}

/// The runs of this instance's supervisor that may be waiting on a decision.
#[async_trait]
pub trait PausedRuns: Send + Sync {
    /// Takes over, at once, the runs a decision lets go on (whichever instance paused
    /// them).
    async fn resume_decided(self: Arc<Self>);
}

/// How the outcome of an approved call is kept for its requester to read back: the REST
/// door's own encoding of it (`GET /v1/calls/{call_id}`).
pub type KeepOutcome = dyn Fn(Result<Completed, ToolError>) -> serde_json::Value + Send + Sync;

/// What a decision sets going, wired by the gateway.
pub struct FollowUps {
    /// The tools an approved REST call is run against (scoped to its requester).
    pub registry: Arc<Registry>,
    pub runs: Arc<dyn PausedRuns>,
    pub keep: Arc<KeepOutcome>,
    /// Whether the credential a call was asked with still stands: a call asked for with
    /// a key revoked since is not approved.
    pub standing: Arc<dyn crate::auth::Standing>,
}

/// People's decisions on approvals: who may decide, what a decision must say, what it
/// leaves behind (the stored decision, an audit row, an event) and what it sets going
/// ([`FollowUps`]).
pub struct Decisions<S> {
    /// The policies and the store they are read from.
    approvals: Arc<StoredApprovals<S>>,
    audit: Arc<dyn AuditSink>,
    /// For its events, and for approved REST calls.
    executor: Executor,
    follow_ups: FollowUps,
    /// Approved REST calls running here: a graceful stop waits for them
    /// ([`drain`](Self::drain)).
    calls: tokio_util::task::TaskTracker,
}

impl<S: ApprovalStore + 'static> Decisions<S> {
    pub fn new(
        approvals: Arc<StoredApprovals<S>>,
        audit: Arc<dyn AuditSink>,
        executor: Executor,
        follow_ups: FollowUps,
    ) -> Self {
        Self {
            approvals,
            audit,
            executor,
            follow_ups,
            calls: tokio_util::task::TaskTracker::new(),
        }
    }

    /// Waits for the approved REST calls running here to end and keep their outcomes
    /// (a graceful stop; bound it with a timeout). Calls approved after this run at once
    /// too, and are not waited for.
    pub async fn drain(&self) {
        self.calls.close();
        self.calls.wait().await;
    }

    /// Whether `auth` may decide approvals of its own calls (as an MCP client's
    /// elicitation asks it to): it holds `approvals:decide` and its tenant's policy
    /// allows self-approval.
    pub async fn may_self_approve(&self, auth: &AuthContext) -> bool {
        auth.has_scope(crate::auth::scopes::APPROVALS_DECIDE)
            && self
                .approvals
                .policy(auth.tenant)
                .await
                .is_ok_and(|p| p.self_approval)
    }

    /// `decider` decides approval `id`. The decider needs `approvals:decide`; nobody
    /// decides their own call unless the tenant's policy allows self-approval; a reason
    /// is at most [`MAX_REASON_CHARS`], and a denial without one says so. The decision is
    /// stored (once: a decided approval is the store's conflict; an approval lapses when
    /// its call is not made within the tenant's approval time), audited as a row of
    /// adapter `approval`, announced as the `approval.decided` event, and what it allows
    /// is set going: a waiting run resumes here, an approved REST call runs here.
    pub async fn decide(
        &self,
        decider: &Arc<AuthContext>,
        id: ApprovalId,
        approve: bool,
        reason: String,
        request_id: Option<&str>,
    ) -> Result<ApprovalRecord, DecideError<S::Error>> {
        if !decider.has_scope(crate::auth::scopes::APPROVALS_DECIDE) {
            return Err(DecideError::Refused(ToolError::forbidden(
                "deciding approvals needs the approvals:decide scope",
            )));
        }
        if reason.chars().count() > MAX_REASON_CHARS {
            return Err(DecideError::Refused(
                ToolError::invalid_arguments(format!(
                    "the reason is longer than {MAX_REASON_CHARS} characters"
                ))
                .with_violations(vec![Violation {
                    pointer: "/reason".into(),
                    message: format!("at most {MAX_REASON_CHARS} characters"),
                }]),
            ));
        }
        let tenant = decider.tenant;
        let record = self
            .approvals
            .store
            .get_approval(tenant, id)
            .await
            .map_err(DecideError::Store)?
            .ok_or_else(|| {
                DecideError::Refused(ToolError::not_found(format!(
                    "no approval {id} in your tenant"
                )))
            })?;
        let policy = self.approvals.policy(tenant).await.map_err(|e| {
            DecideError::Refused(ToolError::new(ErrorKind::Unavailable, e.to_string()))
        })?;
        if approve && let Some(lapsed) = self.follow_ups.standing.lapsed(&record.auth).await {
            return Err(DecideError::Refused(
                ToolError::forbidden(format!(
                    "this call cannot be approved: {lapsed} since it was asked for"
                ))
                .with_suggestion("deny it, or let it expire"),
            ));
        }
        if record.requester == decider.principal.id && !policy.self_approval {
            return Err(DecideError::Refused(ToolError::forbidden(
                "you made this call, so someone else must decide it (the tenant's policy does not allow self-approval)",
            )));
        }
        let decision = Decision {
            approve,
            by: decider.principal.id,
            by_name: decider.principal.name.clone(),
            reason: if reason.is_empty() && !approve {
                "denied without a reason".to_owned()
            } else {
                reason
            },
            use_within: policy.approval_ttl(),
        };
        let decided = self
            .approvals
            .store
            .decide_approval(tenant, id, &decision)
            .await
            .map_err(DecideError::Store)?;
        self.record(decider, request_id, &decided)
            .await
            .map_err(DecideError::Audit)?;
        self.executor.events().emit(&Event::ApprovalDecided {
            tenant,
            approval: id,
            approved: decided.status == ApprovalStatus::Approved,
            by: decider.principal.id,
        });
        self.set_going(&decided).await;
        Ok(decided)
    }

    /// Gives every approved REST call that started longer ago than any tool may run and
    /// has no outcome (the instance making it stopped, or could not keep its outcome) an
    /// outcome saying so: without it, `GET /v1/calls/{id}` said `running` for good.
    /// Whether the tool ran is in the audit log (the call's rows name the approval).
    /// Any instance may do it, as often as it likes.
    pub async fn interrupt_orphaned_calls(&self) {
        let horizon = self.follow_ups.registry.longest_timeout() + ORPHAN_MARGIN;
        let Ok(horizon) = chrono::Duration::from_std(horizon) else {
            return;
        };
        let error = ToolError::new(
            ErrorKind::Unavailable,
            "the gateway instance making this approved call stopped before its outcome was kept; \
             whether the tool ran is in the audit log (its rows name this call's approval)",
        );
        let result = (self.follow_ups.keep)(Err(error));
        match self
            .approvals
            .store
            .interrupt_approved_calls(chrono::Utc::now() - horizon, &result)
            .await
        {
            Ok(calls) => {
                for (tenant, approval) in calls {
                    tracing::warn!(tenant_id = %tenant, approval_id = %approval, "an approved call's outcome was never kept: its instance stopped while making it");
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not look for approved calls left without an outcome")
            }
        }
    }

    /// What `decided` allows, set going on this instance.
    async fn set_going(&self, decided: &ApprovalRecord) {
        if decided.run_id.is_some() {
            self.follow_ups.runs.clone().resume_decided().await;
        } else if decided.adapter == Adapter::Rest && decided.status == ApprovalStatus::Approved {
            let call = ApprovedCall {
                approvals: self.approvals.clone(),
                executor: self.executor.clone(),
                registry: self.follow_ups.registry.clone(),
                keep: self.follow_ups.keep.clone(),
            };
            self.calls.spawn(call.run(decided.clone()));
        }
    }

    /// A decision as an audit row of adapter `approval`: the decider, the tool and masked
    /// arguments decided on, the outcome (`ok` approved, `denied`), the reason.
    async fn record(
        &self,
        decider: &Arc<AuthContext>,
        request_id: Option<&str>,
        decided: &ApprovalRecord,
    ) -> Result<(), AuditError> {
        let mut ctx = CallContext::new(decider.clone(), Adapter::Approval);
        ctx.request_id = request_id.map(str::to_owned);
        let mut record = AuditRecord::start(
            &ctx,
            &decided.tool,
            decided.arguments.clone(),
            decided.arguments_hash.clone(),
        );
        record.approval = Some(decided.id);
        let (outcome, note) = if decided.status == ApprovalStatus::Approved {
            (Outcome::Ok, None)
        } else {
            (Outcome::Error(ErrorKind::Denied), decided.reason.clone())
        };
        self.audit
            .record(record.finish(outcome, note, Duration::ZERO))
            .await
    }
}

/// An approved REST call, run by the deciding instance.
struct ApprovedCall<S> {
    approvals: Arc<StoredApprovals<S>>,
    executor: Executor,
    registry: Arc<Registry>,
    keep: Arc<KeepOutcome>,
}

impl<S: ApprovalStore> ApprovedCall<S> {
    /// Runs the call `approval` allowed as its requester and keeps its outcome.
    async fn run(self, approval: ApprovalRecord) {
        let auth = approval.auth.clone();
        let tools = Toolset::all().scope(self.registry.clone(), &auth);
        let ctx = CallContext::new(Arc::new(auth), Adapter::Rest)
            .with_approval(Some(approval.id))
            .with_trace(None);
        let args = approval
            .call_arguments
            .clone()
            .unwrap_or(serde_json::Value::Null);
        let outcome = self.executor.call(&tools, ctx, &approval.tool, args).await;
        let kept = (self.keep)(outcome);
        // The call has run: a store briefly out of reach must not lose what it did.
        let backoff =
            crate::backoff::Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
        for attempt in 1..=KEEP_ATTEMPTS {
            match self
                .approvals
                .store
                .set_approval_result(approval.tenant, approval.id, &kept)
                .await
            {
                Ok(()) => return,
                Err(err) if attempt < KEEP_ATTEMPTS => {
                    tracing::warn!(approval_id = %approval.id, error = %err, attempt, "could not keep an approved call's outcome yet; trying again");
                    tokio::time::sleep(backoff.delay(attempt)).await;
                }
                Err(err) => {
                    tracing::error!(approval_id = %approval.id, error = %err, "the outcome of an approved call could not be kept");
                }
            }
        }
    }
}
