//! How a run ends or pauses: an answer (checked against its output schema), a
//! best-effort summary, cancellation, a provider's failure, waiting for approval.

use super::*;

impl Driver<'_> {
    /// Stops the run until its held calls are decided.
    pub(super) async fn pause(&self, state: &mut RunState) -> Result<RunFinish, Stop> {
        let mut approvals: Vec<ApprovalId> = state.approvals.values().copied().collect();
        approvals.sort();
        let usage = state.usage;
        self.append(state, RunEvent::RunPaused { approvals, usage })
            .await?;
        Ok(RunFinish {
            status: RunStatus::AwaitingApproval,
            output: None,
            best_effort: false,
            usage,
            error: None,
        })
    }

    /// One last model call without tools; if that fails too, a summary of what the tools
    /// returned. Either way the answer is marked best-effort.
    pub(super) async fn best_effort(
        &self,
        state: &mut RunState,
        why: &str,
    ) -> Result<RunFinish, Stop> {
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
    pub(super) async fn answer(
        &self,
        state: &mut RunState,
        turn: u32,
        answer: String,
    ) -> Result<Option<RunFinish>, Stop> {
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
    pub(super) fn checked(&self, answer: &str) -> Result<String, String> {
        match &self.output {
            Some(schema) => schema.check(answer).map(|v| v.to_string()),
            None => Ok(answer.to_owned()),
        }
    }

    /// Ends the run as cancelled.
    pub(super) async fn cancelled(&self, state: &mut RunState) -> Result<RunFinish, Stop> {
        self.finish(
            state,
            RunStatus::Cancelled,
            None,
            false,
            Some(match self.ctx.cancelled_because.get() {
                Some(reason) => format!("cancelled: {reason}"),
                None => "cancelled".into(),
            }),
        )
        .await
    }

    pub(super) async fn provider_failed(
        &self,
        state: &mut RunState,
        err: ProviderError,
    ) -> Result<RunFinish, Stop> {
        if err.kind == crate::provider::ProviderErrorKind::Cancelled {
            return self.cancelled(state).await;
        }
        let message = format!("the model provider failed: {err}");
        self.finish(state, RunStatus::Failed, None, false, Some(message))
            .await
    }

    pub(super) async fn finish(
        &self,
        state: &mut RunState,
        status: RunStatus,
        output: Option<String>,
        best_effort: bool,
        error: Option<String>,
    ) -> Result<RunFinish, Stop> {
        let outcome = RunFinish {
            status,
            output,
            best_effort,
            usage: state.usage,
            error,
        };
        self.append(state, RunEvent::RunFinished(outcome.clone()))
            .await?;
        Ok(outcome)
    }
}

/// A deterministic best-effort answer: what the tools returned.
pub(super) fn summarize(history: &[Message], why: &str) -> String {
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
