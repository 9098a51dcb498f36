//! The one path every tool call takes.
//!
//! resolve in toolset → validate arguments → authorize → policy (allow, approval, deny) →
//! (intent, for side effects) → run under deadline and cancellation → truncate → audit
//! record → emit events → return.
//!
//! A call the tenant's policy holds for approval ends `approval_required`, naming the
//! pending approval; once a person decides, the same call made again (or presenting the
//! approval id) runs, or ends `denied` with their reason.
//!
//! Before all of this, admission ([`crate::limits`]): a call over a rate or concurrency
//! limit, or arriving while the instance sheds load, is refused at once. It was never
//! accepted, so it leaves no audit row and no call events; the metrics count it.
//!
//! The tool runs in its own task. If the caller goes away (an HTTP client disconnects, an
//! MCP client cancels) the call's cancellation token fires, the tool's future is dropped,
//! and the task still emits `call.finished{cancelled}`. A tool that panics yields an
//! `internal` error; the gateway keeps serving.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::audit::{AuditError, AuditRecord, AuditSink};
use crate::auth::scopes;
use crate::cache::{CacheMode, CacheStatus, ResultCache};
use crate::limits::{Admission, RateLimits};
use crate::metrics::Metrics;
use crate::policy::{Action, ApprovalError, Approvals, NoApprovals, Policy};
use crate::{
    CallContext, CallId, ErrorKind, Event, EventSink, Outcome, RegisteredTool, Risk, ScopedToolset,
    SecretNames, ToolError, ToolOutput,
};

mod authorize;
mod gate;
mod relay;
mod run;
#[cfg(test)]
mod tests;

use authorize::authorize;
pub use authorize::may_call;
use run::{Extension, failed, run, trace_span};

/// A successful call.
#[derive(Debug)]
pub struct Completed {
    pub call_id: CallId,
    pub output: ToolOutput,
    /// Whether text output was cut to the tool's limit.
    pub truncated: bool,
    pub duration: Duration,
    /// For a tool whose results are cached: whether this output came from the cache.
    pub cache: Option<CacheStatus>,
}

/// Gateway-wide limits applied on top of each tool's own.
#[derive(Clone, Copy, Debug)]
pub struct ExecutorLimits {
    /// Text output beyond this many characters is cut even if a tool allows more.
    pub max_output_chars: usize,
}

impl Default for ExecutorLimits {
    fn default() -> Self {
        Self {
            max_output_chars: crate::spec::DEFAULT_MAX_OUTPUT_CHARS,
        }
    }
}

/// Runs tool calls. Cheap to clone.
#[derive(Clone)]
pub struct Executor {
    events: Arc<dyn EventSink>,
    audit: Arc<dyn AuditSink>,
    approvals: Arc<dyn Approvals>,
    limits: ExecutorLimits,
    secret_names: SecretNames,
    digest: crate::audit::ArgumentsDigest,
    admission: Arc<Admission>,
    metrics: Metrics,
    cache: ResultCache,
}

impl Executor {
    pub fn new(
        events: Arc<dyn EventSink>,
        audit: Arc<dyn AuditSink>,
        limits: ExecutorLimits,
    ) -> Self {
        Self {
            events,
            audit,
            approvals: Arc::new(NoApprovals),
            limits,
            secret_names: SecretNames::default(),
            digest: Default::default(),
            admission: Arc::new(Admission::new(Default::default())),
            metrics: Metrics::default(),
            cache: ResultCache::default(),
        }
    }

    /// Names calls' unmasked arguments by `digest` (by default unkeyed: see
    /// [`ArgumentsDigest`](crate::audit::ArgumentsDigest)).
    pub fn with_arguments_digest(mut self, digest: crate::audit::ArgumentsDigest) -> Self {
        self.digest = digest;
        self
    }

    /// Answers calls of the tools configured for it from `cache` (by default nothing is
    /// cached).
    pub fn with_cache(mut self, cache: ResultCache) -> Self {
        self.cache = cache;
        self
    }

    /// Admits calls through `admission` (by default: no rate limits, the default
    /// instance capacity).
    pub fn with_admission(mut self, admission: Arc<Admission>) -> Self {
        self.admission = admission;
        self
    }

    /// Records calls and refusals into `metrics` (by default nowhere).
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Where events go: the gateway's other parts (approvals decided, runs stopped) emit
    /// theirs into the same sinks as the executor's calls.
    pub fn events(&self) -> &dyn EventSink {
        &*self.events
    }

    /// Masks, in audit rows and approvals, every argument whose name `names` matches
    /// (by default [`crate::secrets::DEFAULT_SECRET_NAMES`]), beside the fields each
    /// tool's schema marks secret.
    pub fn with_secret_names(mut self, names: SecretNames) -> Self {
        self.secret_names = names;
        self
    }

    /// `args` as the audit keeps them: masked by `tool`'s schema and declaration when
    /// known, and by the deployment's secret names always. For views of arguments kept
    /// whole elsewhere (a run's journal, which a resumed run calls again with).
    pub fn masked(&self, tool: Option<&RegisteredTool>, args: &Value) -> Value {
        match tool {
            Some(tool) => tool.mask(args, &self.secret_names),
            None => crate::secrets::mask(args, &Default::default(), &[], &self.secret_names),
        }
    }

    /// Asks `approvals` for tenants' policies and approvals (by default every policy is
    /// level 0 and nothing waits).
    pub fn with_approvals(mut self, approvals: Arc<dyn Approvals>) -> Self {
        self.approvals = approvals;
        self
    }

    /// Calls `name` from `tools` with `args`, as the caller in `ctx`.
    ///
    /// Every admitted call, whatever its outcome (unknown tool, invalid arguments,
    /// forbidden, timeout, cancelled, panicked…), emits `call.started` and `call.finished`
    /// and leaves one audit record, committed before this returns. A call refused at
    /// admission (`rate_limited`, or `unavailable` while shedding) leaves neither.
    pub async fn call(
        &self,
        tools: &ScopedToolset,
        mut ctx: CallContext,
        name: &str,
        args: Value,
    ) -> Result<Completed, ToolError> {
        let otel = trace_span(&mut ctx, name);
        let span = tracing::debug_span!(
            "tool_call",
            tenant = %ctx.auth.tenant,
            principal = %ctx.auth.principal.id,
            tool = name,
            call_id = %ctx.call_id,
            adapter = ctx.adapter.as_str(),
            request_id = ctx.request_id.as_deref().unwrap_or(""),
        );
        let started = Instant::now();
        // Read once (cached) for admission and the policy step both.
        let policy = self.approvals.policy(ctx.auth.tenant).await;
        let admitted = match self.admit(&ctx, name, policy.as_deref().ok()) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                tracing::debug!(parent: &span, limit = refusal.limit.as_str(), "call refused at admission");
                failed(&otel, &refusal.error);
                return Err(refusal.error);
            }
        };
        let prepared = {
            let _enter = span.enter();
            self.events.emit(&Event::CallStarted {
                ctx: &ctx,
                tool: name,
            });
            self.prepare(tools, &ctx, name, &args)
        };
        // From here the call runs in its own task, so that it finishes and is recorded
        // even when the caller is dropped; dropping the caller cancels it.
        let cancel_on_drop = ctx.cancel.clone().drop_guard();
        let this = self.clone();
        let name = name.to_owned();
        let task = tokio::spawn(
            async move {
                let result = this
                    .run_prepared(prepared, policy, ctx, name, args, started)
                    .await;
                drop(admitted);
                if let Err(err) = &result {
                    failed(&otel, err);
                }
                result
            }
            .instrument(span),
        );
        let joined = task.await;
        cancel_on_drop.disarm();
        joined.unwrap_or_else(|join_err| Err(ToolError::internal(join_err)))
    }

    /// Admission under the tenant's limits (its `policy`), tightened from the operator's.
    /// A policy that could not be read leaves the operator's limits (the policy step then
    /// fails the call closed, audited). A refusal is counted in the metrics.
    fn admit(
        &self,
        ctx: &CallContext,
        name: &str,
        policy: Option<&Policy>,
    ) -> Result<crate::limits::Admitted, crate::limits::Refusal> {
        let operator = &self.admission.config().defaults;
        let tenant = policy.map(|p| &p.rate_limits);
        let combined;
        let limits: &RateLimits = match tenant {
            Some(tenant) if !tenant.is_empty() => {
                combined = operator.tightest(tenant);
                &combined
            }
            _ => operator,
        };
        self.admission
            .admit(&ctx.auth, name, limits, self.audit.backlog())
            .inspect_err(|refusal| {
                self.metrics
                    .rejected(ctx.auth.tenant, refusal.limit, ctx.adapter);
            })
    }

    async fn run_prepared(
        &self,
        prepared: Result<Arc<RegisteredTool>, Refused>,
        policy: Result<Arc<Policy>, ApprovalError>,
        mut ctx: CallContext,
        name: String,
        args: Value,
        started: Instant,
    ) -> Result<Completed, ToolError> {
        // Metrics name a tool only when it exists: made-up names must not make series
        // without end.
        let known = matches!(&prepared, Ok(_) | Err(Refused { tool: Some(_), .. }));
        let (record, secrets, result) = match prepared {
            // What was sent is kept, masked as well as the gateway can: by the tool's
            // schema when it resolved (invalid arguments, forbidden), else by name alone.
            Err(Refused { tool, error }) => {
                let masked = self.masked(tool.as_deref(), &args);
                let secrets = crate::secrets::masked_values(&args, &masked);
                (
                    AuditRecord::start(&ctx, &name, masked, self.digest.digest(&args)),
                    secrets,
                    Err(error),
                )
            }
            Ok(tool) => {
                let spec = tool.spec();
                let masked = self.masked(Some(&tool), &args);
                let secrets = crate::secrets::masked_values(&args, &masked);
                let mut record = AuditRecord::start(&ctx, &name, masked, self.digest.digest(&args));
                let timeout = spec.effective_timeout(ctx.requested_timeout);
                let deadline = started + timeout;
                ctx.set_deadline(deadline);
                // Progress may move the deadline: the executor hears every report (and
                // passes each on to the caller, if it asked for them).
                let extension = spec.progress_extends.map(|by| {
                    let (heard, reports) = tokio::sync::mpsc::channel(16);
                    let caller = ctx.progress.replace(heard);
                    let cap = ctx
                        .requested_timeout
                        .map_or(spec.max_timeout, |asked| asked.min(spec.max_timeout));
                    Extension {
                        by,
                        until: started + cap,
                        reports,
                        caller,
                    }
                });
                let ttl = self.cache.ttl(
                    &spec.name,
                    &spec.effects,
                    policy.as_deref().ok().map(|p| &p.cache),
                );
                // Policy, then the cache, then the intent for side effects, then the tool:
                // each may stop the call, and the record learns the approval on the way.
                let result = async {
                    self.apply_policy(&ctx, policy, &tool, &args, &mut record)
                        .await?;
                    if ttl.is_some() {
                        let cached = (ctx.cache == CacheMode::Use)
                            .then(|| {
                                self.cache
                                    .get(ctx.auth.tenant, &spec.name, &record.arguments_hash)
                            })
                            .flatten();
                        record.cache = Some(match (&cached, ctx.cache) {
                            (Some(_), _) => CacheStatus::Hit,
                            (None, CacheMode::Use) => CacheStatus::Miss,
                            (None, _) => CacheStatus::Bypass,
                        });
                        if let Some(hit) = cached {
                            return Ok(hit);
                        }
                    }
                    self.record_intent(spec.effects.writes, &record).await?;
                    let mut output = run(&tool, &ctx, args, started, timeout, extension).await?;
                    let limit = spec.max_output_chars.min(self.limits.max_output_chars);
                    let truncated = output.truncate_text(limit);
                    if let Some(ttl) = ttl
                        && ctx.cache != CacheMode::Bypass
                    {
                        self.cache.put(
                            ctx.auth.tenant,
                            &spec.name,
                            &record.arguments_hash,
                            &output,
                            truncated,
                            ttl,
                        );
                    }
                    Ok((output, truncated))
                }
                .await;
                (record, secrets, result)
            }
        };
        let cache = record.cache;
        if let Some(status) = cache {
            self.metrics.cache(ctx.auth.tenant, &name, status);
        }
        let result = self
            .settle(
                record,
                &secrets,
                &ctx,
                &name,
                known,
                result,
                started.elapsed(),
            )
            .await;
        result.map(|((output, truncated), duration)| Completed {
            call_id: ctx.call_id,
            output,
            truncated,
            duration,
            cache,
        })
    }

    /// The end of every admitted call, tool or relayed: its audit row committed (a
    /// result whose row could not be written is withheld), `call.finished`, the metrics.
    /// `known`: the name is a tool (or operation) that exists, not one a caller made up.
    /// `secrets`: the argument values masking hid, kept out of the row's error and the
    /// log as well.
    #[allow(clippy::too_many_arguments)]
    async fn settle<T>(
        &self,
        record: AuditRecord,
        secrets: &[String],
        ctx: &CallContext,
        name: &str,
        known: bool,
        result: Result<T, ToolError>,
        duration: Duration,
    ) -> Result<(T, Duration), ToolError> {
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(err) => Outcome::Error(err.kind),
        };
        let error = result
            .as_ref()
            .err()
            .map(|e| crate::secrets::scrub(&e.message, secrets));
        let result = match (
            self.audit
                .record(record.finish(outcome, error, duration))
                .await,
            result,
        ) {
            (Ok(()), result) => result,
            (Err(audit_err), Ok(_)) => Err(audit_failure(
                &audit_err,
                "the audit log cannot record calls right now, so this call's result is withheld",
                "the audit log could not record this call, so its result is withheld",
            )),
            (Err(audit_err), Err(err)) => {
                tracing::error!(error = %audit_err, "failed call could not be audited");
                Err(err)
            }
        };
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(err) => {
                if let Some(cause) = &err.cause {
                    let cause = crate::secrets::scrub(cause, secrets);
                    tracing::error!(error = %cause, "tool call failed internally");
                }
                Outcome::Error(err.kind)
            }
        };
        self.events.emit(&Event::CallFinished {
            ctx,
            tool: name,
            outcome,
            duration,
        });
        self.metrics.tool_call(
            ctx.auth.tenant,
            if known { name } else { UNKNOWN_TOOL },
            ctx.adapter,
            match outcome {
                Outcome::Ok => None,
                Outcome::Error(kind) => Some(kind),
            },
            duration,
        );
        result.map(|value| (value, duration))
    }

    /// For a tool with side effects, a durable intent before it runs; failing closed.
    async fn record_intent(
        &self,
        side_effects: bool,
        record: &AuditRecord,
    ) -> Result<(), ToolError> {
        if !side_effects {
            return Ok(());
        }
        self.audit.record_intent(record).await.map_err(|audit_err| {
            audit_failure(
                &audit_err,
                "the audit log cannot record calls right now, so this call was not run",
                "the audit log is unavailable, so this call was not run",
            )
        })
    }

    /// Resolution, validation and authorization: everything decided before the tool runs.
    fn prepare(
        &self,
        tools: &ScopedToolset,
        ctx: &CallContext,
        name: &str,
        args: &Value,
    ) -> Result<Arc<RegisteredTool>, Refused> {
        if tools.tenant() != ctx.auth.tenant {
            return Err(Refused {
                tool: None,
                error: ToolError::internal(
                    "BUG: toolset scoped for another tenant than the caller's",
                ),
            });
        }
        let tool = tools.get(name).ok_or_else(|| Refused {
            tool: None,
            error: ToolError::not_found(format!("no tool named {name:?} is available to you"))
                .with_suggestion("list the available tools with GET /v1/tools or tools/list"),
        })?;
        if let Err(error) = tool.validate(args).and_then(|()| authorize(ctx, &tool)) {
            return Err(Refused {
                tool: Some(tool),
                error,
            });
        }
        Ok(tool)
    }
}

/// A call refused before it ran, with the tool when it resolved (its schema says which
/// arguments to mask in the audit row).
struct Refused {
    tool: Option<Arc<RegisteredTool>>,
    error: ToolError,
}

/// The tool name in metrics for a call of a tool the caller's toolset does not have.
pub const UNKNOWN_TOOL: &str = "_unknown";

pub use crate::error::RETRY_AFTER_SECS;

/// The call's error when the audit sink failed: see [`store_failure`].
fn audit_failure(audit_err: &AuditError, for_now: &str, otherwise: &str) -> ToolError {
    store_failure(
        audit_err.transient,
        audit_err.to_string(),
        false,
        for_now,
        otherwise,
    )
}

/// The call's error when a store behind one of its steps failed: `unavailable` (try
/// again shortly; `not_run` says the call did not run) when the store could not answer
/// for now (`transient`), else `internal`; `cause` is logged, not shown.
fn store_failure(
    transient: bool,
    cause: String,
    not_run: bool,
    for_now: &str,
    otherwise: &str,
) -> ToolError {
    let mut err = if transient {
        ToolError::new(ErrorKind::Unavailable, for_now)
            .with_retry_after(Duration::from_secs(RETRY_AFTER_SECS), not_run)
            .with_suggestion("make the same call again shortly")
    } else {
        ToolError::new(ErrorKind::Internal, otherwise)
    };
    err.cause = Some(cause);
    err
}
