//! A turn's tool calls: approval gates, execution through the executor with retries,
//! results (and errors) as the model reads them.

use super::*;

impl Driver<'_> {
    /// Runs (or answers) `calls` and journals each result, or that it waits for approval.
    /// Makes `calls`; how the run ends if they end it (a persisting repetition, a call
    /// held for approval), else `None`: the run goes on.
    pub(super) async fn executed(
        &self,
        state: &mut RunState,
        calls: Vec<(ToolCall, bool)>,
    ) -> Result<Option<Result<RunFinish, Stop>>, Stop> {
        Ok(match self.execute(state, calls).await? {
            Flow::Continue => None,
            Flow::HardStop => Some(
                self.best_effort(state, "a repeated tool call persisted")
                    .await,
            ),
            Flow::Paused => Some(self.pause(state).await),
        })
    }

    pub(super) async fn execute(
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

    pub(super) fn has_effects(&self, name: &str) -> bool {
        self.ctx
            .tools
            .get(name)
            .is_none_or(|t| t.spec().effects.writes)
    }

    /// Runs one planned call (journaling its start) or returns its canned answer.
    pub(super) async fn settle(
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
    pub(super) async fn call_tool(
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
                    let delay = TOOL_BACKOFF.delay(attempt);
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        () = self.ctx.cancel.cancelled() => return Err(err),
                    }
                }
                Err(err) => return Err(err),
            }
        }
    }

    pub(super) async fn answer_unexecuted(
        &self,
        state: &mut RunState,
        turn: u32,
        why: &str,
    ) -> Result<(), Stop> {
        self.answer_pending(state, turn, "not_executed", why, None)
            .await
    }

    /// Answers every call still pending with an error of `category`, none of them run.
    pub(super) async fn answer_pending(
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
}

pub(super) enum Decision {
    /// Run it, presenting the approval it was held for, if any.
    Run(Option<ApprovalId>),
    /// Not executed: this result (and category) instead.
    Answer((ToolResult, String)),
}

/// What [`Driver::execute`] tells the loop.
pub(super) enum Flow {
    Continue,
    /// A refused repetition persisted: the run must end.
    HardStop,
    /// A call waits for approval: the run pauses.
    Paused,
}

/// One planned call, settled: its result, or the approval it now waits for.
pub(super) enum Settled {
    Done(ToolResult, Option<String>, f64),
    Held(RunEvent),
}

/// The `approval_requested` event for a call the policy held, if `err` says so.
pub(super) fn held(turn: u32, call: &ToolCall, err: &ToolError) -> Option<RunEvent> {
    let held = err.awaiting_approval?;
    Some(RunEvent::ApprovalRequested {
        turn,
        call_id: call.id.clone(),
        tool: call.name.clone(),
        approval_id: held.approval,
        expires_in_secs: held.expires_in.as_secs(),
    })
}

/// The structured JSON error a model reads.
pub(super) fn error_result(
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
    failed(call, category, &body)
}

pub(super) fn tool_error_result(
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
    failed(call, category, &body)
}

/// The error result of `call`, and its category.
fn failed(call: &ToolCall, category: &str, body: &Value) -> (ToolResult, String) {
    let result = ToolResult {
        call_id: call.id.clone(),
        provider_id: call.provider_id,
        name: call.name.clone(),
        content: body.to_string(),
        is_error: true,
    };
    (result, category.to_owned())
}

/// A tool's output as text for the model: its text parts, or its structured result.
pub(super) fn output_text(output: toolgate_core::ToolOutput) -> String {
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
