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
/// Longest wait for a refused call's `retry_after_secs` before the model is told instead.
const MAX_ADMISSION_WAIT: Duration = Duration::from_secs(30);
/// Characters of each tool result quoted in a deterministic best-effort summary.
const SUMMARY_RESULT_CHARS: usize = 500;

mod state;

pub use state::{NoteReason, RunEvent, RunOutcome, RunState, RunStatus, TurnCalls};

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
    pub request_id: Option<String>,
    /// The provider of the agent's `fast_model`, when it routes.
    pub fast: Option<Arc<dyn Provider>>,
    /// Where a streaming agent's pieces of replies go as they arrive (turn, piece): not
    /// journaled, for those watching the run live.
    pub deltas: Option<Arc<dyn Fn(u32, Delta) + Send + Sync>>,
}

/// Drives a run from `state` to its end, journaling every step. A new run starts from
/// `RunState::default()` after its `RunStarted` event was folded in.
pub async fn drive(ctx: &RunContext, agent: &AgentConfig, mut state: RunState) -> RunOutcome {
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
        Err(Stop::Journal(e)) => RunOutcome {
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
    async fn append(&self, state: &mut RunState, event: RunEvent) -> Result<(), Stop> {
        // The loop waits only for what guards against repeated effects and for the end.
        // Anything else lost in a crash is redone on resume without effects: a model
        // call, a read-only tool call.
        let wait = match &event {
            RunEvent::RunFinished { .. } | RunEvent::RunPaused { .. } => true,
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

    async fn run(&mut self, state: &mut RunState) -> Result<RunOutcome, Stop> {
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
    fn interpret(
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

    async fn call_model(
        &self,
        state: &RunState,
        choice: ToolChoice,
    ) -> Result<ModelReply, ProviderError> {
        // Routing: the fast model for the first turn (until it is routed on) and for
        // answers asked without tools; the main model for the rest.
        let fast = match (&self.agent.fast_model, &self.ctx.fast) {
            (Some(model), Some(provider))
                if choice == ToolChoice::None || (state.turn == 1 && !state.routed) =>
            {
                Some((model.as_str(), provider))
            }
            _ => None,
        };
        let (model, provider) = fast.unwrap_or((self.agent.model.as_str(), &self.ctx.provider));
        let text_history;
        let (messages, tools): (&[Message], &[ToolDecl]) = if self.agent.protocol.is_text() {
            text_history = self.agent.protocol.text_history(&state.history);
            (&text_history, &[])
        } else {
            (&state.history, &self.decls)
        };
        let request = ModelRequest {
            model,
            system: self.system.as_deref(),
            messages,
            tools,
            tool_choice: choice,
            parallel_tool_calls: self.agent.parallel_tool_calls,
            temperature: self.agent.temperature,
            max_tokens: self.agent.max_tokens,
            // A text protocol's replies are its own format; their answers are checked.
            output_schema: self
                .output
                .as_ref()
                .filter(|_| !self.agent.protocol.is_text())
                .map(OutputSchema::schema),
        };
        let started = Instant::now();
        // A client span per model call (GenAI conventions), child of the run's span.
        let recorded =
            toolgate_core::context::parse_traceparent(&self.trace).is_some_and(|t| t.is_sampled());
        let chat = if !recorded {
            tracing::Span::none()
        } else {
            tracing::info_span!(
            target: "toolgate::otel",
            "chat",
            otel.name = tracing::field::Empty,
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider.kind().semconv_name(),
            gen_ai.request.model = %model,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
            )
        };
        if !chat.is_disabled() {
            chat.record("otel.name", format!("chat {model}"));
        }
        let turn = if self.agent.stream {
            let deltas = self.ctx.deltas.clone();
            let at = state.turn;
            let sink = move |delta: Delta| {
                if let Some(deltas) = &deltas {
                    deltas(at, delta);
                }
            };
            provider
                .stream(&request, &self.ctx.cancel, &sink)
                .instrument(chat.clone())
                .await
        } else {
            provider
                .complete(&request, &self.ctx.cancel)
                .instrument(chat.clone())
                .await
        };
        let provider_name = provider.kind().semconv_name();
        if let Ok(turn) = &turn
            && !chat.is_disabled()
        {
            if let Some(usage) = turn.usage {
                chat.record(
                    "gen_ai.usage.input_tokens",
                    i64::try_from(usage.input_tokens).unwrap_or(i64::MAX),
                );
                chat.record(
                    "gen_ai.usage.output_tokens",
                    i64::try_from(usage.output_tokens).unwrap_or(i64::MAX),
                );
            }
        } else if let Err(err) = &turn {
            toolgate_core::context::span_failed(&chat, &format!("{:?}", err.kind).to_lowercase());
        }
        drop(chat);
        let error = turn
            .as_ref()
            .err()
            .map(|e| format!("{:?}", e.kind).to_lowercase());
        let usage = turn.as_ref().ok().and_then(|t| t.usage);
        self.ctx.executor.metrics().chat(
            provider_name,
            model,
            error.as_deref(),
            started.elapsed(),
            usage.map(|u| u.input_tokens),
            usage.map(|u| u.output_tokens),
        );
        let turn = turn?;
        Ok(ModelReply {
            message: turn.message,
            meta: ReplyMeta {
                stop_reason: turn.stop_reason,
                usage: turn.usage,
                duration_ms: started.elapsed().as_secs_f64() * 1000.0,
                model: model.to_owned(),
                fast: fast.is_some(),
            },
        })
    }

    /// Stops the run until its held calls are decided.
    async fn pause(&self, state: &mut RunState) -> Result<RunOutcome, Stop> {
        let mut approvals: Vec<ApprovalId> = state.approvals.values().copied().collect();
        approvals.sort();
        let usage = state.usage;
        self.append(state, RunEvent::RunPaused { approvals, usage })
            .await?;
        Ok(RunOutcome {
            status: RunStatus::AwaitingApproval,
            output: None,
            best_effort: false,
            usage,
            error: None,
        })
    }

    /// Runs (or answers) `calls` and journals each result, or that it waits for approval.
    /// Makes `calls`; how the run ends if they end it (a persisting repetition, a call
    /// held for approval), else `None`: the run goes on.
    async fn executed(
        &self,
        state: &mut RunState,
        calls: Vec<(ToolCall, bool)>,
    ) -> Result<Option<Result<RunOutcome, Stop>>, Stop> {
        Ok(match self.execute(state, calls).await? {
            Flow::Continue => None,
            Flow::HardStop => Some(
                self.best_effort(state, "a repeated tool call persisted")
                    .await,
            ),
            Flow::Paused => Some(self.pause(state).await),
        })
    }

    async fn execute(
        &self,
        state: &mut RunState,
        calls: Vec<(ToolCall, bool)>,
    ) -> Result<Flow, Stop> {
        let turn = state.turn;
        // Decide every call first, in order: repetition, one-per-turn, malformed.
        let mut plan: Vec<(ToolCall, Decision)> = Vec::with_capacity(calls.len());
        let mut hard_stop = false;
        for (n, (call, was_started)) in calls.into_iter().enumerate() {
            if state.partial.contains_key(&call.id) {
                continue;
            }
            let decision = if was_started && self.has_effects(&call.name) {
                Decision::Answer(error_result(
                    &call,
                    "unknown_outcome",
                    "the gateway stopped while this call was running; it may or may not have taken effect",
                    Some("check the current state before calling it again"),
                ))
            } else if let Some(problem) = &call.malformed {
                Decision::Answer(error_result(&call, "invalid_arguments", problem, None))
            } else if !self.agent.parallel_tool_calls && n > 0 {
                Decision::Answer(error_result(
                    &call,
                    "not_executed",
                    "only one tool call per turn is allowed; this one was not executed",
                    Some("call it again in your next message"),
                ))
            } else if let Some(&repeats) = state
                .repeat_at
                .get(&call.id)
                .filter(|&&r| r > self.agent.repetition_limit)
            {
                // `repetition_limit` identical calls run; the next is refused; one more
                // after that refusal, and the model insisted.
                hard_stop |= repeats > self.agent.repetition_limit + 1;
                Decision::Answer(error_result(
                    &call,
                    "repetition",
                    &format!(
                        "{} was called with these same arguments {repeats} times in a row; this call was not executed",
                        call.name
                    ),
                    Some("try a different approach, or answer from what you have"),
                ))
            } else {
                Decision::Run(state.approvals.get(&call.id).copied())
            };
            plan.push((call, decision));
        }
        let results = if self.agent.parallel_tool_calls {
            let futures = plan
                .iter()
                .map(|(call, decision)| self.settle(turn, call, decision));
            futures::future::join_all(futures).await
        } else {
            let mut out = Vec::with_capacity(plan.len());
            for (call, decision) in &plan {
                out.push(self.settle(turn, call, decision).await);
            }
            out
        };
        let mut held = false;
        for settled in results {
            let (result, category, duration_ms) = match settled? {
                Settled::Done(result, category, duration_ms) => (result, category, duration_ms),
                Settled::Held(event) => {
                    held = true;
                    self.append(state, event).await?;
                    continue;
                }
            };
            self.append(
                state,
                RunEvent::ToolCallFinished {
                    turn,
                    result,
                    category,
                    duration_ms,
                },
            )
            .await?;
        }
        if held {
            return Ok(Flow::Paused);
        }
        if state.tools_are_no_use() && !hard_stop {
            self.append(
                state,
                RunEvent::Note {
                    turn,
                    reason: NoteReason::AllToolsFailed,
                    text: "Your tool calls keep failing for reasons you cannot fix by calling differently. Answer now from what you already know, and say what is missing.".into(),
                },
            )
            .await?;
        }
        Ok(if hard_stop {
            Flow::HardStop
        } else {
            Flow::Continue
        })
    }

    fn has_effects(&self, name: &str) -> bool {
        self.ctx
            .tools
            .get(name)
            .is_none_or(|t| t.spec().effects.writes)
    }

    /// Runs one planned call (journaling its start) or returns its canned answer.
    async fn settle(
        &self,
        turn: u32,
        call: &ToolCall,
        decision: &Decision,
    ) -> Result<Settled, Stop> {
        let approval = match decision {
            Decision::Answer((result, category)) => {
                return Ok(Settled::Done(result.clone(), Some(category.clone()), 0.0));
            }
            Decision::Run(approval) => *approval,
        };
        // A call with effects must be on record before it runs, so a resumed run never
        // repeats it blindly; a read-only call is simply run again.
        let must_record = self.has_effects(&call.name);
        self.ctx
            .journal
            .append(
                &RunEvent::ToolCallStarted {
                    turn,
                    call_id: call.id.clone(),
                    tool: call.name.clone(),
                    arguments: call.arguments.clone(),
                },
                must_record,
            )
            .await
            .map_err(Stop::Journal)?;
        let started = Instant::now();
        let outcome = self.call_tool(turn, call, approval).await;
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        if let Err(err) = &outcome
            && let Some(event) = held(turn, call, err)
        {
            return Ok(Settled::Held(event));
        }
        Ok(match outcome {
            Ok(text) => Settled::Done(
                ToolResult {
                    call_id: call.id.clone(),
                    provider_id: call.provider_id,
                    name: call.name.clone(),
                    content: text,
                    is_error: false,
                },
                None,
                duration_ms,
            ),
            Err(err) => {
                let (result, category) = tool_error_result(call, &err, &self.ctx.tools);
                Settled::Done(result, Some(category), duration_ms)
            }
        })
    }

    /// One call through the executor, retried on retryable errors when it has no side
    /// effects.
    async fn call_tool(
        &self,
        turn: u32,
        call: &ToolCall,
        approval: Option<ApprovalId>,
    ) -> Result<String, ToolError> {
        let mut attempt = 0;
        loop {
            let mut ctx = CallContext::new(self.ctx.auth.clone(), Adapter::Agent)
                .with_run(RunStep {
                    run_id: self.ctx.run_id,
                    step: turn,
                })
                .with_timeout(self.agent.tool_timeout())
                .with_agent(self.agent.name.clone())
                // One trace per run: its id is the run id's hex, so a run's calls (and
                // what they cause upstream) correlate.
                .with_trace(Some(&self.trace))
                .with_approval(approval);
            ctx.cancel = self.ctx.cancel.child_token();
            if let Some(id) = &self.ctx.request_id {
                ctx = ctx.with_request_id(id.clone());
            }
            let result = self
                .ctx
                .executor
                .call(&self.ctx.tools, ctx, &call.name, call.arguments.clone())
                .await;
            match result {
                Ok(done) => return Ok(output_text(done.output)),
                // Refused at admission (rate limit, load shedding): nothing ran, so even a
                // call with side effects is made again, once the gateway said it may be.
                Err(err)
                    if attempt < TOOL_RETRIES
                        && !self.ctx.cancel.is_cancelled()
                        && toolgate_core::limits::refused_before_running(&err)
                            .is_some_and(|wait| wait <= MAX_ADMISSION_WAIT) =>
                {
                    attempt += 1;
                    let wait =
                        toolgate_core::limits::refused_before_running(&err).unwrap_or_default();
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.ctx.cancel.cancelled() => return Err(err),
                    }
                }
                Err(err)
                    if attempt < TOOL_RETRIES
                        && err.is_retryable()
                        && !self.has_effects(&call.name)
                        && !self.ctx.cancel.is_cancelled() =>
                {
                    attempt += 1;
                    let delay = Duration::from_millis(200 * 2u64.pow(attempt))
                        .mul_f64(0.5 + fastrand::f64() / 2.0);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.ctx.cancel.cancelled() => return Err(err),
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    async fn answer_unexecuted(
        &self,
        state: &mut RunState,
        turn: u32,
        why: &str,
    ) -> Result<(), Stop> {
        self.answer_pending(state, turn, "not_executed", why, None)
            .await
    }

    /// Answers every call still pending with an error of `category`, none of them run.
    async fn answer_pending(
        &self,
        state: &mut RunState,
        turn: u32,
        category: &str,
        why: &str,
        suggestion: Option<&str>,
    ) -> Result<(), Stop> {
        let pending: Vec<ToolCall> = state.pending.iter().map(|(c, _)| c.clone()).collect();
        for call in pending {
            let (result, category) = error_result(&call, category, why, suggestion);
            self.append(
                state,
                RunEvent::ToolCallFinished {
                    turn,
                    result,
                    category: Some(category),
                    duration_ms: 0.0,
                },
            )
            .await?;
        }
        Ok(())
    }

    /// One last model call without tools; if that fails too, a summary of what the tools
    /// returned. Either way the answer is marked best-effort.
    async fn best_effort(&self, state: &mut RunState, why: &str) -> Result<RunOutcome, Stop> {
        let turn = state.turn;
        if !state.pending.is_empty() {
            self.answer_unexecuted(state, turn, why).await?;
        }
        if !self.ctx.cancel.is_cancelled() {
            self.append(
                state,
                RunEvent::Note {
                    turn,
                    reason: NoteReason::AnswerNow,
                    text: format!(
                        "Stop calling tools: {why}. Give your best final answer now from what you have gathered, and say what is missing."
                    ),
                },
            )
            .await?;
            if let Ok(reply) = self.call_model(state, ToolChoice::None).await {
                let (mut message, answer) = self.interpret(turn, reply.message);
                let called_tools = !message.tool_calls.is_empty();
                // Tools were off: calls in this reply are not part of the history.
                message.tool_calls.clear();
                self.append(state, reply.meta.event(turn, message)).await?;
                let answer = answer.unwrap_or_default();
                if !called_tools && !answer.trim().is_empty() {
                    return match self.checked(&answer) {
                        Ok(output) => {
                            self.finish(state, RunStatus::Completed, Some(output), true, None)
                                .await
                        }
                        Err(why) => {
                            self.finish(state, RunStatus::Failed, Some(answer), true, Some(why))
                                .await
                        }
                    };
                }
            }
        }
        if self.output.is_some() && !self.ctx.cancel.is_cancelled() {
            // A summary of tool results is no answer in the agent's schema.
            let error = format!("{why}, and no answer matching the output schema was given");
            return self
                .finish(state, RunStatus::Failed, None, true, Some(error))
                .await;
        }
        let summary = summarize(&state.history, why);
        let status = if self.ctx.cancel.is_cancelled() {
            RunStatus::Cancelled
        } else {
            RunStatus::Completed
        };
        self.finish(state, status, Some(summary), true, None).await
    }

    /// Ends the run with the model's final `answer`, or, when it does not match the
    /// agent's output schema and retries are left, sends it back saying what is wrong
    /// (`None`: the loop goes on).
    async fn answer(
        &self,
        state: &mut RunState,
        turn: u32,
        answer: String,
    ) -> Result<Option<RunOutcome>, Stop> {
        match self.checked(&answer) {
            Ok(output) => self
                .finish(state, RunStatus::Completed, Some(output), false, None)
                .await
                .map(Some),
            Err(why) if state.output_retries < self.agent.output_retries => {
                self.append(
                    state,
                    RunEvent::Note {
                        turn,
                        reason: NoteReason::OutputInvalid,
                        text: format!(
                            "{why}. Reply again with only the JSON value the schema in your instructions asks for."
                        ),
                    },
                )
                .await?;
                Ok(None)
            }
            Err(why) => {
                let error = format!("{why} (answers sent back: {})", state.output_retries);
                self.finish(state, RunStatus::Failed, Some(answer), false, Some(error))
                    .await
                    .map(Some)
            }
        }
    }

    /// A final answer as the run's output: itself, or, when the agent has an output
    /// schema, the JSON value it must be (or what is wrong with it).
    fn checked(&self, answer: &str) -> Result<String, String> {
        match &self.output {
            Some(schema) => schema.check(answer).map(|v| v.to_string()),
            None => Ok(answer.to_owned()),
        }
    }

    /// Ends the run as cancelled.
    async fn cancelled(&self, state: &mut RunState) -> Result<RunOutcome, Stop> {
        self.finish(
            state,
            RunStatus::Cancelled,
            None,
            false,
            Some("cancelled".into()),
        )
        .await
    }

    async fn provider_failed(
        &self,
        state: &mut RunState,
        err: ProviderError,
    ) -> Result<RunOutcome, Stop> {
        if err.kind == crate::provider::ProviderErrorKind::Cancelled {
            return self.cancelled(state).await;
        }
        let message = format!("the model provider failed: {err}");
        self.finish(state, RunStatus::Failed, None, false, Some(message))
            .await
    }

    async fn finish(
        &self,
        state: &mut RunState,
        status: RunStatus,
        output: Option<String>,
        best_effort: bool,
        error: Option<String>,
    ) -> Result<RunOutcome, Stop> {
        let outcome = RunOutcome {
            status,
            output,
            best_effort,
            usage: state.usage,
            error,
        };
        self.append(
            state,
            RunEvent::RunFinished {
                status,
                output: outcome.output.clone(),
                best_effort,
                usage: outcome.usage,
                error: outcome.error.clone(),
            },
        )
        .await?;
        Ok(outcome)
    }
}

struct ModelReply {
    message: AssistantMessage,
    meta: ReplyMeta,
}

/// What a model call reported besides its message.
struct ReplyMeta {
    stop_reason: Option<String>,
    usage: Option<Usage>,
    duration_ms: f64,
    /// The model that answered, and whether it was the fast one.
    model: String,
    fast: bool,
}

impl ReplyMeta {
    fn event(self, turn: u32, message: AssistantMessage) -> RunEvent {
        RunEvent::ModelMessage {
            turn,
            message,
            stop_reason: self.stop_reason,
            usage: self.usage,
            duration_ms: self.duration_ms,
            model: Some(self.model),
        }
    }
}

enum Decision {
    /// Run it, presenting the approval it was held for, if any.
    Run(Option<ApprovalId>),
    /// Not executed: this result (and category) instead.
    Answer((ToolResult, String)),
}

/// What [`Driver::execute`] tells the loop.
enum Flow {
    Continue,
    /// A refused repetition persisted: the run must end.
    HardStop,
    /// A call waits for approval: the run pauses.
    Paused,
}

/// One planned call, settled: its result, or the approval it now waits for.
enum Settled {
    Done(ToolResult, Option<String>, f64),
    Held(RunEvent),
}

/// The `approval_requested` event for a call the policy held, if `err` says so.
fn held(turn: u32, call: &ToolCall, err: &ToolError) -> Option<RunEvent> {
    let held = err.held?;
    Some(RunEvent::ApprovalRequested {
        turn,
        call_id: call.id.clone(),
        tool: call.name.clone(),
        approval_id: held.approval,
        expires_in_secs: held.expires_in.as_secs(),
    })
}

/// The structured JSON error a model reads.
fn error_result(
    call: &ToolCall,
    category: &str,
    message: &str,
    suggestion: Option<&str>,
) -> (ToolResult, String) {
    let mut body = json!({"status": "error", "category": category, "message": message});
    if let Some(s) = suggestion {
        body["suggestion"] = json!(s);
    }
    if call.malformed.is_some()
        && let Value::String(raw) = &call.arguments
    {
        body["arguments_received"] = json!(raw.chars().take(500).collect::<String>());
    }
    (
        ToolResult {
            call_id: call.id.clone(),
            provider_id: call.provider_id,
            name: call.name.clone(),
            content: body.to_string(),
            is_error: true,
        },
        category.to_owned(),
    )
}

fn tool_error_result(
    call: &ToolCall,
    err: &ToolError,
    tools: &ScopedToolset,
) -> (ToolResult, String) {
    let category = err.kind.as_str();
    let mut body = json!({
        "status": "error",
        "category": category,
        "message": err.message,
        "retryable": err.recoverable,
    });
    if let Some(s) = &err.suggestion {
        body["suggestion"] = json!(s);
    }
    if !err.violations.is_empty() {
        body["violations"] = serde_json::to_value(&err.violations).unwrap_or(Value::Null);
    }
    // A person's denial: the model is told who decided and why.
    if err.kind == ErrorKind::Denied
        && let Some(details) = &err.details
    {
        body["status"] = json!("denied");
        for key in ["reason", "decided_by"] {
            if let Some(v) = details.get(key).filter(|v| !v.is_null()) {
                body[key] = v.clone();
            }
        }
    }
    if err.kind == ErrorKind::NotFound && tools.get(&call.name).is_none() {
        let names: Vec<String> = tools.list().iter().map(|t| t.spec().name.clone()).collect();
        body["message"] = json!(format!("there is no tool named {:?}", call.name));
        body["suggestion"] = json!(format!("use one of: {}", names.join(", ")));
    }
    (
        ToolResult {
            call_id: call.id.clone(),
            provider_id: call.provider_id,
            name: call.name.clone(),
            content: body.to_string(),
            is_error: true,
        },
        category.to_owned(),
    )
}

/// A tool's output as text for the model: its text parts, or its structured result.
fn output_text(output: toolgate_core::ToolOutput) -> String {
    let mut text = String::new();
    for c in &output.content {
        match c {
            Content::Text { text: t } => {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(t);
            }
            Content::Image { mime_type, .. } | Content::Audio { mime_type, .. } => {
                text.push_str(&format!("[{mime_type} content omitted]"));
            }
            Content::Resource { resource } => text.push_str(&resource.to_string()),
            Content::ResourceLink { link } => text.push_str(&link.to_string()),
        }
    }
    if text.is_empty()
        && let Some(s) = output.structured
    {
        return s.to_string();
    }
    text
}

/// A deterministic best-effort answer: what the tools returned.
fn summarize(history: &[Message], why: &str) -> String {
    let mut out = format!("Best-effort answer ({why}). What the tools returned:\n");
    let mut any = false;
    for m in history {
        if let Message::ToolResults { results } = m {
            for r in results.iter().filter(|r| !r.is_error) {
                any = true;
                let quoted: String = r.content.chars().take(SUMMARY_RESULT_CHARS).collect();
                out.push_str(&format!("- {}: {}\n", r.name, quoted));
            }
        }
    }
    if !any {
        out.push_str("- nothing: no tool call succeeded.\n");
    }
    out
}
