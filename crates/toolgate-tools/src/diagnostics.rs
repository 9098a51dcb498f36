//! `echo` and `sleep`: tools with no side effects for checking a deployment end to end,
//! exercising deadlines, and benchmarking the gateway's own overhead.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolgate_core::{CallContext, Tool, ToolError, ToolOutput, ToolSpec};

use crate::parse_args;

pub struct Echo {
    spec: ToolSpec,
}

impl Echo {
    pub fn new() -> Self {
        let spec = ToolSpec::new(
            "echo",
            "Return the given message unchanged. Useful to check that calls reach the gateway.",
            crate::input_schema::<EchoArgs>(),
        )
        .with_title("Echo")
        .with_category("diagnostics")
        .with_output_schema(crate::output_schema::<Echoed>())
        // Status lines OpenAI's clients show while the tool runs (Apps SDK); the MCP
        // adapter sends them to those clients only.
        .with_vendor_meta("openai/toolInvocation/invoking", json!("Echoing…"))
        .with_vendor_meta("openai/toolInvocation/invoked", json!("Echoed"));
        Self { spec }
    }
}

impl Default for Echo {
    fn default() -> Self {
        Self::new()
    }
}

/// What `echo` returns: the message it was given.
#[derive(Serialize, JsonSchema)]
struct Echoed<'a> {
    message: &'a str,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    #[schemars(length(max = 100000))]
    message: String,
}

#[async_trait]
impl Tool for Echo {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let EchoArgs { message } = parse_args(args)?;
        let structured = crate::structured(&Echoed { message: &message });
        Ok(ToolOutput::text(message).with_structured(structured))
    }
}

pub struct Sleep {
    spec: ToolSpec,
}

impl Sleep {
    pub fn new() -> Self {
        let spec = ToolSpec::new(
            "sleep",
            "Wait the given number of seconds, then return. Useful to check deadlines and \
             cancellation: the default deadline is 30 s, callers may ask for up to 600 s.",
            crate::input_schema::<SleepArgs>(),
        )
        .with_title("Sleep")
        .with_category("diagnostics")
        .with_timeouts(Duration::from_secs(30), Duration::from_secs(600));
        Self { spec }
    }
}

impl Default for Sleep {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SleepArgs {
    #[schemars(range(min = 0, max = 3600))]
    seconds: f64,
}

#[async_trait]
impl Tool for Sleep {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let SleepArgs { seconds } = parse_args(args)?;
        let wait = Duration::try_from_secs_f64(seconds)
            .map_err(|e| ToolError::invalid_arguments(format!("seconds: {e}")))?;
        // One progress report per second slept (and one at the start), for callers that
        // asked for them.
        let started = tokio::time::Instant::now();
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(started + wait) => {
                    return Ok(ToolOutput::text(format!("slept {seconds} s")));
                }
                () = ctx.cancel.cancelled() => {
                    return Err(ToolError::new(toolgate_core::ErrorKind::Cancelled, "the call was cancelled"));
                }
                _ = ticks.tick() => {
                    let done = started.elapsed().as_secs_f64().min(seconds);
                    ctx.report_progress(done, Some(seconds), Some(format!("{done:.0} of {seconds} s")));
                }
            }
        }
    }
}
