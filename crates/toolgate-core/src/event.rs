//! Events the executor emits on every call path, and the sink seam they flow into.
//!
//! Sinks are synchronous and must not block: a sink that needs I/O (the SSE bus, a
//! metrics exporter) copies what it needs and hands it to its own task. The audit record
//! is not an event sink: it is awaited by the executor, because it must be durable before
//! the caller sees the result.

use std::sync::Arc;
use std::time::Duration;

use crate::{ApprovalId, CallContext, ErrorKind, PrincipalId, RunId, TenantId};

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Error(ErrorKind),
}

impl Outcome {
    /// `ok`, or the error kind's name (`timeout`, `cancelled`, `denied`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error(kind) => kind.as_str(),
        }
    }
}

/// Something that happened to a call. Borrowed from the call's context: sinks copy what
/// they keep.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// `call.started`: the executor accepted the call (before resolving the tool).
    CallStarted { ctx: &'a CallContext, tool: &'a str },
    /// `call.finished`: emitted exactly once per started call, on every path.
    CallFinished {
        ctx: &'a CallContext,
        tool: &'a str,
        outcome: Outcome,
        duration: Duration,
    },
    /// `approval.used`, `approval.pending` or `approval.denied`: the policy step met the
    /// call's approval (one it presented, or one made for it now).
    ApprovalGate {
        ctx: &'a CallContext,
        tool: &'a str,
        approval: ApprovalId,
        gate: GateEvent,
    },
    /// `approval.decided`: a person approved or denied, through any front door.
    ApprovalDecided {
        tenant: TenantId,
        approval: ApprovalId,
        approved: bool,
        by: PrincipalId,
    },
    /// `approval.expired`: nobody decided in time, an approved call was not made in time
    /// (the approval lapsed), or the run that asked was cancelled.
    ApprovalExpired {
        tenant: TenantId,
        approval: ApprovalId,
        run: Option<RunId>,
    },
    /// `policy.changed`: a tenant replaced its approval policy.
    PolicyChanged { tenant: TenantId, level: u8 },
    /// `run.finished` (or `run.paused`, waiting for approvals): an agent run stopped on
    /// this instance.
    RunStopped {
        tenant: TenantId,
        run: RunId,
        status: &'a str,
        best_effort: bool,
        input_tokens: u64,
        output_tokens: u64,
    },
    /// `definition.changed` (a pinned upstream tool's definition changed),
    /// `definition.flagged` (its description reads as written at the model) or
    /// `definition.approved` (a person approved the new definition).
    Definition {
        /// The owning tenant; `None` for the operator's upstreams.
        tenant: Option<TenantId>,
        upstream: &'a str,
        tool: &'a str,
        hash: &'a str,
        what: DefinitionEvent,
        /// Whether the tool is withheld until a person approves.
        withheld: bool,
    },
}

/// What happened to an upstream tool's definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DefinitionEvent {
    Changed,
    Flagged,
    Approved,
}

/// What the policy step found of a call's approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateEvent {
    /// Approved: the call runs, using it.
    Used,
    /// Waiting for a person.
    Pending,
    /// Denied (or expired).
    Denied,
}

impl Event<'_> {
    /// The stable event name.
    pub fn name(&self) -> &'static str {
        match self {
            Event::CallStarted { .. } => "call.started",
            Event::CallFinished { .. } => "call.finished",
            Event::ApprovalGate { gate, .. } => match gate {
                GateEvent::Used => "approval.used",
                GateEvent::Pending => "approval.pending",
                GateEvent::Denied => "approval.denied",
            },
            Event::ApprovalDecided { .. } => "approval.decided",
            Event::ApprovalExpired { .. } => "approval.expired",
            Event::PolicyChanged { .. } => "policy.changed",
            Event::RunStopped { status, .. } if *status == "awaiting_approval" => "run.paused",
            Event::RunStopped { .. } => "run.finished",
            Event::Definition { what, .. } => match what {
                DefinitionEvent::Changed => "definition.changed",
                DefinitionEvent::Flagged => "definition.flagged",
                DefinitionEvent::Approved => "definition.approved",
            },
        }
    }
}

/// Receives every event. Must return quickly and never block.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: &Event<'_>);
}

/// Several sinks, each given every event in order.
impl EventSink for Vec<Arc<dyn EventSink>> {
    fn emit(&self, event: &Event<'_>) {
        for sink in self {
            sink.emit(event);
        }
    }
}

/// Writes events to `tracing` (target `toolgate::call`). `call.finished` is one line per
/// call carrying its own context fields (tenant, principal, tool, call id, adapter,
/// request id, outcome, duration), so the default `info` level needs no per-call span;
/// the executor's `tool_call` span is at `debug` for deeper tracing.
#[derive(Clone, Copy, Debug, Default)]
pub struct TracingSink;

impl EventSink for TracingSink {
    fn emit(&self, event: &Event<'_>) {
        match *event {
            Event::CallStarted { .. } => {
                tracing::debug!(target: "toolgate::call", event = "call.started");
            }
            Event::CallFinished {
                ctx,
                tool,
                outcome,
                duration,
            } => {
                let duration_ms = duration.as_secs_f64() * 1000.0;
                macro_rules! finished {
                    ($level:ident) => {
                        tracing::$level!(
                            target: "toolgate::call",
                            event = "call.finished",
                            tenant = %ctx.auth.tenant,
                            principal = %ctx.auth.principal.id,
                            tool,
                            call_id = %ctx.call_id,
                            adapter = ctx.adapter.as_str(),
                            request_id = ctx.request_id.as_deref().unwrap_or(""),
                            outcome = outcome.as_str(),
                            duration_ms,
                        )
                    };
                }
                match outcome {
                    Outcome::Ok => finished!(info),
                    Outcome::Error(_) => finished!(warn),
                }
            }
            Event::ApprovalGate {
                ctx,
                tool,
                approval,
                ..
            } => tracing::info!(
                target: "toolgate::approval",
                event = event.name(),
                tenant = %ctx.auth.tenant,
                approval_id = %approval,
                tool,
                call_id = %ctx.call_id,
                adapter = ctx.adapter.as_str(),
            ),
            Event::ApprovalDecided {
                tenant,
                approval,
                approved,
                by,
            } => tracing::info!(
                target: "toolgate::approval",
                event = event.name(),
                %tenant,
                approval_id = %approval,
                status = if approved { "approved" } else { "denied" },
                decided_by = %by,
            ),
            Event::ApprovalExpired {
                tenant,
                approval,
                run,
            } => tracing::info!(
                target: "toolgate::approval",
                event = event.name(),
                %tenant,
                approval_id = %approval,
                run_id = run.map(|r| r.to_string()).unwrap_or_default(),
            ),
            Event::PolicyChanged { tenant, level } => tracing::info!(
                target: "toolgate::approval",
                event = event.name(),
                %tenant,
                level,
            ),
            Event::RunStopped {
                tenant,
                run,
                status,
                best_effort,
                input_tokens,
                output_tokens,
            } => tracing::info!(
                target: "toolgate::run",
                event = event.name(),
                run_id = %run,
                %tenant,
                status,
                best_effort,
                input_tokens,
                output_tokens,
            ),
            Event::Definition {
                tenant,
                upstream,
                tool,
                hash,
                withheld,
                ..
            } => tracing::warn!(
                target: "toolgate::definition",
                event = event.name(),
                tenant = tenant.map(|t| t.to_string()).unwrap_or_default(),
                upstream,
                tool,
                hash,
                withheld,
            ),
        }
    }
}
