//! The agent loop and its journal.
//!
//! A run's truth is its append-only journal of [`RunEvent`]s: every model message, tool
//! call start and finish, and gateway note is appended (committed) as it happens, before
//! the loop moves on. The history sent to the model is a fold over the journal
//! ([`RunState::fold`]), so a run interrupted by a stopped gateway resumes from its events
//! on any instance: finished calls keep their results, calls that never started run, and
//! a call that was running when the gateway died is re-run only if the tool has no side
//! effects — otherwise the model is told its outcome is unknown.
//!
//! Until a final answer or `max_turns`: call the provider, run the requested tools through
//! the executor (adapter `agent`, the run id, the turn as step) — concurrently when the
//! agent allows parallel calls — and feed the results back. Failures are data for the
//! model, never an abort: unknown tools, malformed arguments, errors, refused repetitions
//! and "not executed" calls all come back as structured JSON results. Only a provider that
//! keeps failing after retries, or a journal that cannot be written, ends a run as failed.
//!
//! A call the tenant's policy holds for a person's approval pauses the run: the journal
//! records `approval_requested` for it and `run_paused`, and the loop returns with status
//! `awaiting_approval`. Whichever instance later takes the run over folds the journal and
//! makes the held call again, presenting its approval: it runs if approved; if denied (or
//! expired), the model gets a structured `denied` result with the reason and goes on.
//!
//! Layout: this file drives the turns ([`drive`]); `model.rs` calls the model,
//! `tools.rs` runs a turn's tool calls, `ending.rs` ends or pauses a run, and
//! `state.rs` holds the events and their pure fold (with its unit tests).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolgate_core::{
    Adapter, ApprovalId, AuthContext, CallContext, Content, ErrorKind, Executor, RunId, RunStep,
    ScopedToolset, ToolError,
};

use tracing::Instrument;

use crate::agent::AgentConfig;
use crate::message::{AssistantMessage, Message, ToolCall, ToolResult};
use crate::output::OutputSchema;
use crate::provider::stream::Delta;
use crate::provider::{ModelRequest, Provider, ProviderError, ToolChoice, ToolDecl, Usage};

/// Retries of one tool call that failed with a retryable error (upstream, rate limited,
/// timeout) and has no side effects, or that the gateway's admission refused (the tool did
/// not run).
const TOOL_RETRIES: u32 = 2;
/// The waits before those retries (400 ms, then 800 ms, each jittered).
const TOOL_BACKOFF: toolgate_core::backoff::Backoff = toolgate_core::backoff::Backoff::new(
    std::time::Duration::from_millis(400),
    std::time::Duration::from_secs(5),
);
/// Longest wait for a refused call's `retry_after_secs` before the model is told instead.
const MAX_ADMISSION_WAIT: Duration = Duration::from_secs(30);
/// Characters of each tool result quoted in a deterministic best-effort summary.
const SUMMARY_RESULT_CHARS: usize = 500;

mod ending;
mod model;
mod state;
mod tools;

pub use state::{NoteReason, RunEvent, RunFinish, RunState, RunStatus, TurnCalls};

/// Where a run's events go, in order.
#[async_trait::async_trait]
pub trait Journal: Send + Sync {
    /// Appends `event`. Events are committed in order, promptly, whether or not the
    /// caller waits. With `wait`, returns once it (and everything before it) is
    /// committed; without, once it is queued — for events whose loss in a crash only
    /// makes the resumed run redo work without effects (a model call, a read-only tool
    /// call). A failed commit fails every later append.
    async fn append(&self, event: &RunEvent, wait: bool) -> Result<(), String>;
}

/// Everything a run needs from the gateway.
#[derive(Clone)]
pub struct RunContext {
    pub run_id: RunId,
    pub auth: Arc<AuthContext>,
    /// The agent's toolset intersected with the caller's, scoped to the caller.
    pub tools: ScopedToolset,
    pub executor: Executor,
    pub provider: Arc<dyn Provider>,
    pub journal: Arc<dyn Journal>,
    pub cancel: CancellationToken,
    /// Why the gateway cancelled the run, when it was not a person asking (set before
    /// `cancel`).
    pub cancelled_because: Arc<std::sync::OnceLock<String>>,
    pub request_id: Option<String>,
    /// The provider of the agent's `fast_model`, when it routes.
    pub fast: Option<Arc<dyn Provider>>,
    /// Where a streaming agent's pieces of replies go as they arrive (turn, piece): not
    /// journaled, for those watching the run live.
    pub deltas: Option<Arc<dyn Fn(u32, Delta) + Send + Sync>>,
}

/// Drives a run from `state` to its end, journaling every step. A new run starts from
/// `RunState::default()` after its `RunStarted` event was folded in.
pub async fn drive(ctx: &RunContext, agent: &AgentConfig, mut state: RunState) -> RunFinish {
    if let Some(done) = &state.finished {
        return done.clone();
    }
    // Exactly the tools this run may call: a tool its caller's scopes forbid is not
    // offered to the model (it would only ever fail).
    let callable = ctx.tools.list();
    let decls = ToolDecl::for_specs(
        callable
            .iter()
            .map(|t| t.spec())
            .filter(|spec| toolgate_core::executor::may_call(&ctx.auth, spec)),
    );
    let system = agent
        .protocol
        .system_prompt(agent.system_prompt.as_deref(), &decls);
    let output = agent.output();
    let system = match (system, &output) {
        (Some(system), Some(output)) => Some(format!("{system}\n\n{}", output.instruction())),
        (None, Some(output)) => Some(output.instruction()),
        (system, None) => system,
    };
    let (span, trace) = run_span(ctx, agent);
    let mut driver = Driver {
        ctx,
        agent,
        decls,
        system,
        output,
        trace,
    };
    let outcome = driver.run(&mut state).instrument(span.clone()).await;
    if let Ok(outcome) = &outcome
        && outcome.status == RunStatus::Failed
    {
        toolgate_core::context::span_failed(&span, "run_failed");
    }
    match outcome {
        Ok(outcome) => outcome,
        Err(Stop::Journal(e)) => RunFinish {
            status: RunStatus::Failed,
            output: None,
            best_effort: false,
            usage: state.usage,
            error: Some(format!("the run's journal could not be written: {e}")),
        },
    }
}

enum Stop {
    Journal(String),
}

struct Driver<'a> {
    ctx: &'a RunContext,
    agent: &'a AgentConfig,
    decls: Vec<ToolDecl>,
    system: Option<String>,
    /// The schema the final answer must match, if the agent has one.
    output: Option<OutputSchema>,
    /// The `traceparent` the run's tool calls continue: the run's exported span, else
    /// one made from the run id (a run's calls share one trace, whatever drives it).
    trace: String,
}

/// The run's span while this instance drives it (`invoke_agent {agent}`, GenAI
/// conventions), in the trace whose id is the run id, so that every stretch of a run
/// (paused, resumed, taken over by another instance) shares one trace. Returns it with
/// the `traceparent` its calls continue.
fn run_span(ctx: &RunContext, agent: &AgentConfig) -> (tracing::Span, String) {
    let run = ctx.run_id.0.simple().to_string();
    // The run is a trace root: recorded or not as the sampler decides on its trace id,
    // the same decision on every instance that drives it.
    if !toolgate_core::context::sample_new_trace(ctx.run_id.0.into_bytes()) {
        return (tracing::Span::none(), format!("00-{run}-{}-00", &run[16..]));
    }
    let synthetic = format!("00-{run}-{}-01", &run[16..]);
    let span = tracing::info_span!(
        target: "toolgate::otel",
        "invoke_agent",
        otel.name = tracing::field::Empty,
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = %agent.name,
        gen_ai.conversation.id = %ctx.run_id,
        gen_ai.provider.name = ctx.provider.kind().semconv_name(),
        gen_ai.request.model = %agent.model,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if span.is_disabled() {
        return (span, synthetic);
    }
    span.record("otel.name", format!("invoke_agent {}", agent.name));
    use toolgate_core::context::{exported_traceparent, parse_traceparent, set_remote_parent};
    set_remote_parent(&span, parse_traceparent(&synthetic));
    let trace = exported_traceparent(&span).unwrap_or(synthetic);
    (span, trace)
}

impl Driver<'_> {
    pub(super) async fn append(&self, state: &mut RunState, event: RunEvent) -> Result<(), Stop> {
        // The loop waits only for what guards against repeated effects and for the end.
        // Anything else lost in a crash is redone on resume without effects: a model
        // call, a read-only tool call.
        let wait = match &event {
            RunEvent::RunFinished(_) | RunEvent::RunPaused { .. } => true,
            RunEvent::ToolCallFinished { result, .. } => self.has_effects(&result.name),
            _ => false,
        };
        self.ctx
            .journal
            .append(&event, wait)
            .await
            .map_err(Stop::Journal)?;
        // Keep the in-memory state equal to a fold of the journal.
        state.apply(&event);
        Ok(())
    }

    pub(super) async fn run(&mut self, state: &mut RunState) -> Result<RunFinish, Stop> {
        // A paused run cancelled while it waited ends here, its held calls unmade.
        if self.ctx.cancel.is_cancelled() && !state.approvals.is_empty() {
            return self.cancelled(state).await;
        }
        // Calls left unanswered by an interrupted gateway (or held for approval) come
        // first.
        if !state.pending.is_empty() {
            let calls = state.pending.clone();
            if let Some(stopped) = self.executed(state, calls).await? {
                return stopped;
            }
        }
        loop {
            if self.ctx.cancel.is_cancelled() {
                return self.cancelled(state).await;
            }
            let turn = if state.awaiting_model {
                // Resumed inside a turn whose model call was cut off: redo it.
                state.turn
            } else {
                if state.turn >= self.agent.max_turns {
                    return self.best_effort(state, "the turn limit was reached").await;
                }
                let turn = state.turn + 1;
                self.append(state, RunEvent::TurnStarted { turn }).await?;
                turn
            };
            let choice = if state.answer_now {
                ToolChoice::None
            } else {
                ToolChoice::Auto
            };
            let reply = match self.call_model(state, choice).await {
                Ok(reply) => reply,
                Err(err) => return self.provider_failed(state, err).await,
            };
            let truncated = crate::provider::is_truncation(reply.meta.stop_reason.as_deref());
            let (message, final_answer) = self.interpret(turn, reply.message);
            let calls = message.tool_calls.clone();
            if reply.meta.fast && choice == ToolChoice::Auto && !calls.is_empty() {
                // The fast model wants tools: not run; the main model takes the turn.
                self.append(
                    state,
                    RunEvent::ModelRouted {
                        turn,
                        model: reply.meta.model,
                        usage: reply.meta.usage,
                    },
                )
                .await?;
                continue;
            }
            self.append(state, reply.meta.event(turn, message)).await?;
            if truncated && !calls.is_empty() && choice != ToolChoice::None {
                // A call cut off at the token limit may be missing arguments that would
                // have changed what it does: it is never run. The model hears why.
                self.answer_pending(
                    state,
                    turn,
                    "truncated",
                    "your message was cut off at the output token limit, so this call may be incomplete; it was not executed",
                    Some("make the call again, with shorter arguments or fewer calls in one message"),
                )
                .await?;
                continue;
            }
            if calls.is_empty() || choice == ToolChoice::None {
                let output = final_answer.unwrap_or_default();
                if choice == ToolChoice::None && !calls.is_empty() {
                    // Asked to answer, the model called tools anyway: answer the calls so
                    // the history stays valid, then summarize.
                    self.answer_unexecuted(
                        state,
                        turn,
                        "the model was asked to answer without tools",
                    )
                    .await?;
                    return self
                        .best_effort(state, "the model kept calling tools")
                        .await;
                }
                match self.answer(state, turn, output).await? {
                    Some(outcome) => return Ok(outcome),
                    // Sent back for not matching the output schema.
                    None => continue,
                }
            }
            let pending: Vec<(ToolCall, bool)> = calls.into_iter().map(|c| (c, false)).collect();
            if let Some(stopped) = self.executed(state, pending).await? {
                return stopped;
            }
        }
    }

    /// Gives calls made up ids where the provider had none, and for text protocols reads
    /// the calls out of the reply. Returns the message and its final answer text.
    pub(super) fn interpret(
        &self,
        turn: u32,
        mut message: AssistantMessage,
    ) -> (AssistantMessage, Option<String>) {
        if self.agent.protocol.is_text() {
            let parsed =
                self.agent
                    .protocol
                    .parse(&message.text, &self.decls, &format!("t{turn}_"));
            message.tool_calls = parsed.calls;
            return (message, parsed.final_answer);
        }
        for (n, call) in message.tool_calls.iter_mut().enumerate() {
            if !call.provider_id {
                call.id = format!("t{turn}_{n}");
            }
        }
        let text = message.text.clone();
        (message, Some(text))
    }
}
