//! A turn's model call: the request, streaming, retries, the fast model, the reply.

use super::*;

impl Driver<'_> {
    pub(super) async fn call_model(
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
}

pub(super) struct ModelReply {
    pub(super) message: AssistantMessage,
    pub(super) meta: ReplyMeta,
}

/// What a model call reported besides its message.
pub(super) struct ReplyMeta {
    pub(super) stop_reason: Option<String>,
    pub(super) usage: Option<Usage>,
    pub(super) duration_ms: f64,
    /// The model that answered, and whether it was the fast one.
    pub(super) model: String,
    pub(super) fast: bool,
}

impl ReplyMeta {
    pub(super) fn event(self, turn: u32, message: AssistantMessage) -> RunEvent {
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
