//! Running the tool in its task: deadline (moved by progress), cancellation, panics, and
//! the call's span.

use super::*;

/// How progress moves a call's deadline: each report to at least `by` from then, never
/// past `until`; reports are passed on to the caller's sink.
pub(super) struct Extension {
    pub(super) by: Duration,
    pub(super) until: Instant,
    pub(super) reports: tokio::sync::mpsc::Receiver<crate::context::Progress>,
    pub(super) caller: Option<crate::context::ProgressSink>,
}

/// Runs the tool until it returns, panics, passes its deadline (moved by progress, when
/// the tool's spec says so) or is cancelled.
pub(super) async fn run(
    tool: &RegisteredTool,
    ctx: &CallContext,
    args: Value,
    started: Instant,
    timeout: Duration,
    mut extension: Option<Extension>,
) -> Result<ToolOutput, ToolError> {
    let call = AssertUnwindSafe(tool.tool.call(ctx, args)).catch_unwind();
    tokio::pin!(call);
    let mut deadline = started + timeout;
    let outcome = loop {
        let progress = async {
            match extension.as_mut() {
                Some(e) => e.reports.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => break Err(None),
            outcome = &mut call => break Ok(outcome),
            () = tokio::time::sleep_until(deadline) => break Err(Some(deadline)),
            Some(report) = progress => {
                if let Some(e) = extension.as_mut() {
                    deadline = deadline.max(Instant::now() + e.by).min(e.until);
                    if let Some(caller) = &e.caller {
                        let _ = caller.try_send(report);
                    }
                }
            }
        }
    };
    let result = match outcome {
        Err(None) => Err(ToolError::new(
            ErrorKind::Cancelled,
            "the call was cancelled",
        )),
        Ok(Ok(result)) => result,
        Ok(Err(panic)) => Err(ToolError::internal(format!(
            "tool {} panicked: {}",
            tool.spec().name,
            panic_message(panic.as_ref())
        ))),
        Err(Some(at)) => {
            let ran = at.saturating_duration_since(started).max(timeout);
            Err(ToolError::new(
                ErrorKind::Timeout,
                format!("{} did not finish within {} ms", tool.spec().name, ran.as_millis()),
            )
            .with_details(serde_json::json!({
                "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                "max_timeout_ms": u64::try_from(tool.spec().max_timeout.as_millis()).unwrap_or(u64::MAX),
            }))
            .with_suggestion("narrow the request, or ask for a longer timeout up to the tool's maximum"))
        }
    };
    // Whatever the tool spawned should stop too.
    ctx.cancel.cancel();
    result
}

/// The call's span for OpenTelemetry (`execute_tool {tool}`, GenAI conventions), a child
/// of the caller's span; when exported, it becomes the call's span (the parent upstreams
/// are told of) and its trace the call's trace. Disabled, and free, when tracing is off.
pub(super) fn trace_span(ctx: &mut CallContext, name: &str) -> tracing::Span {
    // A trace that is not recorded gets no span at all (see `context::set_sampler`).
    if !crate::context::recorded(ctx.span.as_ref()) {
        return tracing::Span::none();
    }
    let otel = tracing::info_span!(
        target: "toolgate::otel",
        "execute_tool",
        otel.name = tracing::field::Empty,
        otel.kind = "internal",
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = %ctx.call_id,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if otel.is_disabled() {
        return otel;
    }
    otel.record("otel.name", format!("execute_tool {name}"));
    crate::context::set_remote_parent(&otel, ctx.parent.clone());
    if let Some(exported) = crate::context::exported(&otel) {
        ctx.adopt_span(exported);
    }
    otel
}

/// Marks the call's span failed, with the error kind as `error.type`.
pub(super) fn failed(otel: &tracing::Span, err: &ToolError) {
    crate::context::span_failed(otel, err.kind.as_str());
}

pub(super) fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}
