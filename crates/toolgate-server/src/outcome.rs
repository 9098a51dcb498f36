//! A successful call's outcome as the REST API shows it, and as the outcome of an
//! approved REST call is kept for `GET /v1/calls/{call_id}` ([`kept`], which core's
//! decisions run, whichever front door the decision came through).

use serde::Serialize;
use serde_json::{Value, json};
use toolgate_core::{Completed, Content, ToolError};
use utoipa::ToSchema;

/// A successful call.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "call_id": "01936f0e-9b7a-7c11-8d2f-0a4b5c6d7e8f",
    "content": [{"type": "text", "text": "# toolgate\n"}],
    "structured": {"path": "README.md", "start_line": 1, "end_line": 1, "total_lines": 120, "has_more": true},
    "duration_ms": 0.412,
    "truncated": false
}))]
pub struct InvokeResponse {
    /// Identifies this call in events and logs.
    pub call_id: String,
    /// Output for people and models.
    pub content: Vec<Content>,
    /// Structured result matching the tool's `output_schema`, when it has one.
    #[schema(value_type = Option<Object>)]
    pub structured: Option<Value>,
    /// Time spent in the gateway and the tool, in milliseconds.
    pub duration_ms: f64,
    /// Whether text output was cut to the tool's limit (a marker ends the text).
    pub truncated: bool,
}

impl From<Completed> for InvokeResponse {
    fn from(done: Completed) -> Self {
        Self {
            call_id: done.call_id.to_string(),
            content: done.output.content,
            structured: done.output.structured,
            duration_ms: (done.duration.as_secs_f64() * 1_000_000.0).round() / 1000.0,
            truncated: done.truncated,
        }
    }
}

/// The outcome of an approved REST call as it is kept for `GET /v1/calls/{call_id}`: the
/// status and body the call would have answered with.
pub fn kept(outcome: Result<Completed, ToolError>) -> Value {
    match outcome {
        Ok(done) => json!({"status": 200, "body": InvokeResponse::from(done)}),
        Err(err) => {
            let (status, problem, cause) = crate::error::ApiError::Tool(err).into_problem();
            if let Some(cause) = cause {
                tracing::error!(error = %cause, "an approved call failed internally");
            }
            json!({"status": status.as_u16(), "body": problem})
        }
    }
}
