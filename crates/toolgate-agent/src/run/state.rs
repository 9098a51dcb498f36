//! A run's state: the journal's events ([`RunEvent`]) and the pure fold that rebuilds a
//! run from them ([`RunState::fold`]), so that any instance resumes a run where its
//! journal ends. No I/O here: the loop in the parent module appends events and folds
//! each one in as it goes.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_core::ApprovalId;
pub use toolgate_core::stores::RunFinish;

use crate::message::{AssistantMessage, Message, ToolCall, ToolResult};
use crate::provider::Usage;

pub use toolgate_core::stores::RunStatus;

/// One journal entry: a step of the run and an SSE event (`event:` = the type name).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    RunStarted {
        agent: String,
        input: String,
    },
    TurnStarted {
        turn: u32,
    },
    /// The model's reply. `best_effort`: the answer asked for at the turn limit or after a
    /// refused repetition.
    ModelMessage {
        turn: u32,
        message: AssistantMessage,
        /// The model that answered (with routing, the fast one or the main one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<String>,
        /// `None` when the provider reported no usage (not zero).
        #[serde(default)]
        usage: Option<Usage>,
        #[serde(default)]
        duration_ms: f64,
    },
    /// Routing: the fast model wanted tools on the first turn; its reply was not run, and
    /// the turn goes to the main model.
    ModelRouted {
        turn: u32,
        /// The fast model that was asked.
        model: String,
        #[serde(default)]
        usage: Option<Usage>,
    },
    ToolCallStarted {
        turn: u32,
        call_id: String,
        tool: String,
        arguments: Value,
    },
    ToolCallFinished {
        turn: u32,
        result: ToolResult,
        /// The error category, for failures.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        category: Option<String>,
        #[serde(default)]
        duration_ms: f64,
    },
    /// A call waits for a person's approval; it is made again when the run resumes.
    ApprovalRequested {
        turn: u32,
        call_id: String,
        tool: String,
        approval_id: ApprovalId,
        /// Seconds until the approval expires (and counts as denied).
        expires_in_secs: u64,
    },
    /// The run stops until the approvals it waits for are decided.
    RunPaused {
        approvals: Vec<ApprovalId>,
        usage: Usage,
    },
    /// The gateway speaking to the model.
    Note {
        turn: u32,
        reason: NoteReason,
        text: String,
    },
    /// The run's end, as its row keeps it.
    RunFinished(RunFinish),
}

impl RunEvent {
    pub fn kind(&self) -> &'static str {
        match self {
            RunEvent::RunStarted { .. } => "run_started",
            RunEvent::TurnStarted { .. } => "turn_started",
            RunEvent::ModelMessage { .. } => "model_message",
            RunEvent::ModelRouted { .. } => "model_routed",
            RunEvent::ToolCallStarted { .. } => "tool_call_started",
            RunEvent::ToolCallFinished { .. } => "tool_call_finished",
            RunEvent::ApprovalRequested { .. } => "approval_requested",
            RunEvent::RunPaused { .. } => "run_paused",
            RunEvent::Note { .. } => "note",
            RunEvent::RunFinished(_) => "run_finished",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoteReason {
    /// Every call of the last turn failed: answer from what you know.
    AllToolsFailed,
    /// The turn limit (or a persisting repetition) was reached: answer now.
    AnswerNow,
    /// The answer did not match the agent's output schema: answer again.
    OutputInvalid,
}

/// The run so far, folded from its journal.
#[derive(Clone, Debug, Default)]
pub struct RunState {
    pub history: Vec<Message>,
    pub turn: u32,
    pub usage: Usage,
    /// Calls of the last model message still without a result, with whether each had
    /// started (and so may have had effects).
    pub pending: Vec<(ToolCall, bool)>,
    /// Results already in for the last model message (by call id).
    pub partial: HashMap<String, ToolResult>,
    /// Signature of the latest call and how many times in a row it came.
    pub last_signature: Option<String>,
    pub repeats: u32,
    /// For each pending call, how many identical calls in a row it ends.
    pub repeat_at: HashMap<String, u32>,
    /// The next model call must answer without tools.
    pub answer_now: bool,
    /// The current turn's calls that ran (refused repetitions and unexecuted extras
    /// aside): how many, how many failed, how many failed for a reason the model cannot
    /// fix by calling differently (forbidden, denied, timeout, upstream…).
    pub turn_calls: TurnCalls,
    /// Turns in a row, up to the last settled one, in which every call that ran failed.
    pub failed_streak: u32,
    /// Pending calls held for approval, by call id: made again, presenting it.
    pub approvals: HashMap<String, ApprovalId>,
    /// Answers sent back for not matching the agent's output schema.
    pub output_retries: u32,
    /// Routing has decided: the first turn was answered, or routed to the main model.
    pub routed: bool,
    /// The current turn has started but its model message is not in (the gateway
    /// stopped while the model was thinking): the turn is redone, not skipped.
    pub awaiting_model: bool,
    pub finished: Option<RunFinish>,
}

/// See [`RunState::turn_calls`].
#[derive(Clone, Copy, Debug, Default)]
pub struct TurnCalls {
    pub ran: u32,
    pub failed: u32,
    pub unfixable: u32,
}

impl TurnCalls {
    fn count(&mut self, is_error: bool, category: Option<&str>) {
        if matches!(category, Some("repetition" | "not_executed")) {
            return;
        }
        self.ran += 1;
        if is_error {
            self.failed += 1;
            // What the model can put right in its next message.
            let fixable = matches!(
                category,
                Some("invalid_arguments" | "not_found" | "truncated" | "rate_limited")
            );
            if !fixable {
                self.unfixable += 1;
            }
        }
    }

    fn all_failed(&self) -> bool {
        self.ran > 0 && self.failed == self.ran
    }
}

impl RunState {
    /// Whether the model should now answer without tools: every call of the last two
    /// turns failed, and those of the last one for reasons it cannot fix. One failed
    /// turn is not enough: the model gets a chance to correct itself first.
    pub fn tools_are_no_use(&self) -> bool {
        self.failed_streak >= 2
            && self.turn_calls.all_failed()
            && self.turn_calls.unfixable == self.turn_calls.ran
    }

    /// Rebuilds a run from its events, in order.
    pub fn fold(events: &[RunEvent]) -> RunState {
        let mut state = RunState::default();
        for event in events {
            state.apply(event);
        }
        state
    }

    /// Folds one more event in.
    pub fn apply(&mut self, event: &RunEvent) {
        match event {
            RunEvent::RunStarted { input, .. } => self.history.push(Message::User {
                text: input.clone(),
            }),
            RunEvent::TurnStarted { turn } => {
                self.turn = *turn;
                self.awaiting_model = true;
            }
            RunEvent::ModelRouted { usage, .. } => {
                // The turn goes on: the main model is asked it.
                self.routed = true;
                if let Some(u) = usage {
                    self.usage.add(u);
                }
            }
            RunEvent::ModelMessage { message, usage, .. } => {
                self.routed = true;
                self.awaiting_model = false;
                // A note asking for an answer applies to the one model call after it.
                self.answer_now = false;
                if let Some(u) = usage {
                    self.usage.add(u);
                }
                self.history.push(Message::Assistant(message.clone()));
                self.pending = message
                    .tool_calls
                    .iter()
                    .map(|c| (c.clone(), false))
                    .collect();
                self.partial.clear();
                self.turn_calls = TurnCalls::default();
                for call in &message.tool_calls {
                    let sig = call.signature();
                    if self.last_signature.as_deref() == Some(sig.as_str()) {
                        self.repeats += 1;
                    } else {
                        self.last_signature = Some(sig);
                        self.repeats = 1;
                    }
                    self.repeat_at.insert(call.id.clone(), self.repeats);
                }
            }
            RunEvent::ToolCallStarted { call_id, .. } => {
                for (c, started) in &mut self.pending {
                    if &c.id == call_id {
                        *started = true;
                    }
                }
            }
            RunEvent::ToolCallFinished {
                result, category, ..
            } => {
                self.turn_calls.count(result.is_error, category.as_deref());
                self.approvals.remove(&result.call_id);
                self.partial.insert(result.call_id.clone(), result.clone());
                self.settle_if_complete();
            }
            RunEvent::ApprovalRequested {
                call_id,
                approval_id,
                ..
            } => {
                // Held before it ran: it has had no effects.
                for (c, started) in &mut self.pending {
                    if &c.id == call_id {
                        *started = false;
                    }
                }
                self.approvals.insert(call_id.clone(), *approval_id);
            }
            RunEvent::RunPaused { .. } => {}
            RunEvent::Note { text, reason, .. } => {
                self.history.push(Message::Note { text: text.clone() });
                self.answer_now = true;
                if *reason == NoteReason::OutputInvalid {
                    self.output_retries += 1;
                }
            }
            RunEvent::RunFinished(finish) => self.finished = Some(finish.clone()),
        }
    }

    /// When every pending call has a result, moves them (in call order) into history.
    fn settle_if_complete(&mut self) {
        if self.pending.is_empty()
            || !self
                .pending
                .iter()
                .all(|(c, _)| self.partial.contains_key(&c.id))
        {
            return;
        }
        let results = self
            .pending
            .drain(..)
            .filter_map(|(c, _)| self.partial.remove(&c.id))
            .collect();
        self.partial.clear();
        self.repeat_at.clear();
        self.history.push(Message::ToolResults { results });
        if self.turn_calls.all_failed() {
            self.failed_streak += 1;
        } else if self.turn_calls.ran > 0 {
            self.failed_streak = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A turn of one call to `tool` that ends with an error of `category` (or succeeds).
    fn turn(n: u32, tool: &str, category: Option<&str>) -> Vec<RunEvent> {
        let call = ToolCall {
            id: format!("c{n}"),
            provider_id: true,
            name: tool.into(),
            arguments: json!({}),
            malformed: None,
        };
        vec![
            RunEvent::TurnStarted { turn: n },
            RunEvent::ModelMessage {
                turn: n,
                message: AssistantMessage {
                    tool_calls: vec![call.clone()],
                    ..AssistantMessage::default()
                },
                model: None,
                stop_reason: None,
                usage: None,
                duration_ms: 0.0,
            },
            RunEvent::ToolCallFinished {
                turn: n,
                result: ToolResult {
                    call_id: call.id,
                    provider_id: true,
                    name: tool.into(),
                    content: "{}".into(),
                    is_error: category.is_some(),
                },
                category: category.map(str::to_owned),
                duration_ms: 0.0,
            },
        ]
    }

    fn fold(turns: &[Vec<RunEvent>]) -> RunState {
        RunState::fold(&turns.concat())
    }

    #[test]
    fn tools_are_taken_away_only_after_a_second_turn_of_failures_the_model_cannot_fix() {
        // One failed turn: the model gets to correct itself, whatever the reason.
        assert!(!fold(&[turn(1, "t", Some("denied"))]).tools_are_no_use());
        // Failures it can fix never take the tools away.
        let fixable = [
            turn(1, "t", Some("invalid_arguments")),
            turn(2, "u", Some("not_found")),
            turn(3, "t", Some("truncated")),
        ];
        assert!(!fold(&fixable).tools_are_no_use());
        // Two turns in a row whose calls all failed, the last for reasons beyond the
        // model: answer without tools.
        assert!(
            fold(&[
                turn(1, "t", Some("invalid_arguments")),
                turn(2, "t", Some("forbidden"))
            ])
            .tools_are_no_use()
        );
        // A success in between starts the count again.
        let state = fold(&[
            turn(1, "t", Some("denied")),
            turn(2, "t", None),
            turn(3, "t", Some("denied")),
        ]);
        assert!(!state.tools_are_no_use());
        assert_eq!(state.failed_streak, 1);
        // Refused repetitions are not the tools' failures.
        let state = fold(&[
            turn(1, "t", Some("denied")),
            turn(2, "t", Some("repetition")),
        ]);
        assert_eq!(state.failed_streak, 1);
    }

    /// A routed first turn counts the fast model's usage and leaves the turn open for the
    /// main model, whose answer then closes it; a resumed run does not route again.
    #[test]
    fn a_routed_turn_stays_open_for_the_main_model() {
        let usage = Usage {
            input_tokens: 7,
            output_tokens: 3,
            ..Usage::default()
        };
        let mut state = RunState::fold(&[
            RunEvent::RunStarted {
                agent: "a".into(),
                input: "hi".into(),
            },
            RunEvent::TurnStarted { turn: 1 },
            RunEvent::ModelRouted {
                turn: 1,
                model: "fast".into(),
                usage: Some(usage),
            },
        ]);
        assert!(state.routed && state.awaiting_model);
        assert_eq!(state.usage.total(), 10);
        assert_eq!(state.history.len(), 1, "the fast reply is not history");
        state.apply(&RunEvent::ModelMessage {
            turn: 1,
            message: AssistantMessage::default(),
            model: Some("main".into()),
            stop_reason: None,
            usage: Some(usage),
            duration_ms: 0.0,
        });
        assert!(!state.awaiting_model);
        assert_eq!(state.usage.total(), 20);
    }
}
