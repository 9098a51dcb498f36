//! One call's context: who, through which front door, under which deadline.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::client::{Client, ClientChannel};
use crate::{ApprovalId, AuthContext, CallId, RunId};

/// The front door a call came through.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Adapter {
    Rest,
    Mcp,
    Agent,
    /// A person's decision on an approval (recorded in the audit log beside the calls).
    Approval,
    /// An upstream tool's definition changed or was approved (tool pinning).
    Definition,
    /// An administrative change through the API: a principal, key, policy, agent or
    /// upstream made, changed or removed.
    Admin,
}

impl Adapter {
    pub fn as_str(self) -> &'static str {
        match self {
            Adapter::Rest => "rest",
            Adapter::Mcp => "mcp",
            Adapter::Agent => "agent",
            Adapter::Approval => "approval",
            Adapter::Definition => "definition",
            Adapter::Admin => "admin",
        }
    }
}

/// The agent run and step a call belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStep {
    pub run_id: RunId,
    pub step: u32,
}

/// What the client said about itself (MCP `clientInfo`, or an HTTP user agent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    pub name: String,
    pub version: Option<String>,
}

impl ClientInfo {
    /// A client known only by its HTTP `User-Agent` (first 200 characters).
    pub fn user_agent(value: &str) -> Self {
        Self {
            name: value.chars().take(200).collect(),
            version: None,
        }
    }
}

/// How far a long call has come, reported by the tool as it works.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    /// Grows with every report (units are the tool's: items, seconds, bytes…).
    pub progress: f64,
    /// The value `progress` reaches when done, when known.
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// Where a call's progress reports go: set by an adapter whose caller asked for them
/// (MCP `progressToken`). Reports are dropped when no one listens or the listener lags.
pub type ProgressSink = tokio::sync::mpsc::Sender<Progress>;

/// The span a W3C `traceparent` names (its trace, span and flags), read by the W3C Trace
/// Context propagator; `None` when it is missing or invalid.
pub fn parse_traceparent(header: &str) -> Option<SpanContext> {
    let context = TraceContextPropagator::new().extract(&Traceparent(Some(header.trim())));
    let span = context.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// `header` for `span`, written by the W3C Trace Context propagator.
pub fn format_traceparent(span: &SpanContext) -> Option<String> {
    let context = opentelemetry::Context::new().with_remote_span_context(span.clone());
    let mut carrier = Traceparent(None);
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.0
}

/// The propagator's carrier for the one header read and written here: no map, no
/// lower-casing of keys, which a `HashMap` carrier costs on every traced call.
struct Traceparent<T>(Option<T>);

const TRACEPARENT: &str = "traceparent";

impl Extractor for Traceparent<&str> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.filter(|_| key.eq_ignore_ascii_case(TRACEPARENT))
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

impl Injector for Traceparent<String> {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = Some(value);
        }
    }
}

/// The sampler deciding which traces are recorded, installed once at start-up when
/// traces are exported (see [`set_sampler`]); unset, every trace is.
static SAMPLER: OnceLock<Box<dyn ShouldSample>> = OnceLock::new();

/// Installs the sampler (the one `OTEL_TRACES_SAMPLER` describes). toolgate decides once
/// per trace root (a server span, an agent run, a call that continues nothing) and creates
/// no span at all in a trace it does not record: the spans under a root follow its
/// sampled flag, as do the upstreams it calls. The tracer itself then records every span
/// it is given.
pub fn set_sampler(sampler: Box<dyn ShouldSample>) {
    let _ = SAMPLER.set(sampler);
}

/// Whether a trace root continuing `parent` (a caller's span), in trace `trace_id`, is
/// recorded.
pub fn sample_root(parent: Option<&SpanContext>, trace_id: TraceId) -> bool {
    let Some(sampler) = SAMPLER.get() else {
        return true;
    };
    let parent = parent.map(|p| opentelemetry::Context::new().with_remote_span_context(p.clone()));
    let result = sampler.should_sample(parent.as_ref(), trace_id, "", &SpanKind::Server, &[], &[]);
    result.decision == SamplingDecision::RecordAndSample
}

/// Whether a new trace (no caller), with this trace id, is recorded.
pub fn sample_new_trace(trace_id: [u8; 16]) -> bool {
    sample_root(None, TraceId::from_bytes(trace_id))
}

/// A server span's root decision (see [`set_sampler`]).
pub enum Root {
    /// Traces are not exported: what the request causes continues the caller's trace,
    /// when it named a valid one.
    Off(Option<Continued>),
    /// Recorded: the span continues the caller's span, if it named one.
    Recorded(Option<SpanContext>),
    /// Not recorded: no span; what the request causes continues this, the caller's (or a
    /// new) trace with the sampled flag clear, so none of it is recorded.
    Skipped(Continued),
}

/// The span a request's calls continue, as its edge decided it ([`root`]): the request's
/// exported server span, an unrecorded one when the sampler skipped the trace, or the
/// caller's own when traces are not exported. Handed to the
/// call as it is ([`CallContext::continuing`]): written as a `traceparent` by the edge
/// and read back by the call, it went through the W3C propagator twice on every traced
/// request.
#[derive(Clone, Debug)]
pub struct Continued(SpanContext);

impl Continued {
    /// The caller's span a W3C `traceparent` names; `None` when it is invalid.
    pub fn parse(traceparent: &str) -> Option<Self> {
        parse_traceparent(traceparent).map(Self)
    }

    /// `span`'s own context, when it is exported, as its calls see it: what a
    /// `traceparent` naming it carries (a remote parent, its sampled flag, no trace state).
    pub fn exported(span: &tracing::Span) -> Option<Self> {
        exported(span).map(|own| {
            let flags = if own.is_sampled() {
                TraceFlags::SAMPLED
            } else {
                TraceFlags::default()
            };
            Self(SpanContext::new(
                own.trace_id(),
                own.span_id(),
                flags,
                true,
                TraceState::default(),
            ))
        })
    }
}

/// Decides whether a request whose caller sent `traceparent` is traced, and which span
/// its calls continue: the one place both edges (REST, `/mcp`) take that from.
pub fn root(traceparent: Option<&str>) -> Root {
    if SAMPLER.get().is_none() {
        return Root::Off(traceparent.and_then(Continued::parse));
    }
    let parent = traceparent.and_then(parse_traceparent);
    let trace = parent.as_ref().map_or_else(
        || TraceId::from_bytes(random_bytes::<16>()),
        SpanContext::trace_id,
    );
    if sample_root(parent.as_ref(), trace) {
        return Root::Recorded(parent);
    }
    let span = parent.as_ref().map_or_else(
        || SpanId::from_bytes(random_bytes::<8>()),
        SpanContext::span_id,
    );
    Root::Skipped(Continued(SpanContext::new(
        trace,
        span,
        TraceFlags::default(),
        true,
        TraceState::default(),
    )))
}

/// Whether spans under `span` (a call's or a run's) are recorded: its sampled flag; a
/// call with no trace context at all is treated as recorded.
pub fn recorded(span: Option<&SpanContext>) -> bool {
    span.is_none_or(SpanContext::is_sampled)
}

/// Makes `span` (one exported over OTLP) a child of `parent`, a span of another process.
pub fn set_remote_parent(span: &tracing::Span, parent: Option<SpanContext>) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if let Some(parent) = parent
        && !span.is_disabled()
    {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
}

/// `span`'s own context when it is exported (valid only then): what a `traceparent`
/// naming it carries.
pub fn exported(span: &tracing::Span) -> Option<SpanContext> {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if span.is_disabled() {
        return None;
    }
    let context = span.context().span().span_context().clone();
    context.is_valid().then_some(context)
}

/// The `traceparent` naming `span`, when it is exported: what its children in other
/// processes are told.
pub fn exported_traceparent(span: &tracing::Span) -> Option<String> {
    exported(span).and_then(|c| format_traceparent(&c))
}

/// Marks an exported span failed: `error.type` (semantic conventions) and status ERROR.
pub fn span_failed(span: &tracing::Span, error_type: &str) {
    span.record("error.type", error_type);
    span.record("otel.status_code", "ERROR");
}

/// `N` random bytes (from the random tails of v7 UUIDs).
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut random = Vec::with_capacity(N + 8);
    while random.len() < N {
        // The last 8 bytes of a v7 UUID are random (but for the variant bits).
        random.extend_from_slice(&uuid::Uuid::now_v7().as_bytes()[8..]);
    }
    let mut out = [0; N];
    out.copy_from_slice(&random[..N]);
    out
}

/// One call. Adapters build it with [`CallContext::new`] and the `with_*` methods; the
/// executor sets the deadline.
#[derive(Clone, Debug)]
pub struct CallContext {
    pub auth: Arc<AuthContext>,
    pub call_id: CallId,
    pub adapter: Adapter,
    pub request_id: Option<String>,
    /// W3C trace id (32 hex digits): the caller's, from its `traceparent`, or a new one.
    pub trace_id: Option<String>,
    /// The caller's span, from its `traceparent`: the parent of this call's span.
    pub parent: Option<SpanContext>,
    /// This call's span (its trace, span id and flags), the parent named in the
    /// `traceparent` sent on to upstreams (see [`CallContext::traceparent`]). The
    /// executor's exported span when tracing is on.
    pub span: Option<SpanContext>,
    pub run: Option<RunStep>,
    /// The agent making the call, for per-agent policy rules.
    pub agent: Option<String>,
    /// An approval the caller presents for this call (a retry after approval, or a
    /// resumed agent run).
    pub approval: Option<ApprovalId>,
    pub client: Option<ClientInfo>,
    /// The deadline the caller asked for; the executor clamps it to the tool's maximum.
    pub requested_timeout: Option<Duration>,
    /// Cancelled when the caller goes away or cancels; tools should stop promptly.
    pub cancel: CancellationToken,
    /// Progress reports for the caller, when it asked for them.
    pub progress: Option<ProgressSink>,
    /// The calling client, when its front door lets a tool's server reach it mid-call
    /// (log messages, sampling, elicitation: MCP).
    pub peer: Option<Client>,
    /// Whether a cached result may answer the call (see [`crate::cache`]).
    pub cache: crate::cache::CacheMode,
    /// The caller's own token from the identity provider, for upstreams that exchange it
    /// (RFC 8693); `None` for API keys and calls made later on the caller's behalf.
    pub subject_token: Option<crate::SubjectToken>,
    deadline: Option<Instant>,
}

impl CallContext {
    pub fn new(auth: Arc<AuthContext>, adapter: Adapter) -> Self {
        Self {
            auth,
            call_id: CallId::new(),
            adapter,
            request_id: None,
            trace_id: None,
            parent: None,
            span: None,
            run: None,
            agent: None,
            approval: None,
            client: None,
            requested_timeout: None,
            cancel: CancellationToken::new(),
            progress: None,
            peer: None,
            cache: crate::cache::CacheMode::Use,
            subject_token: None,
            deadline: None,
        }
    }

    /// How the cache may answer this call (see [`crate::cache`]).
    pub fn with_cache(mut self, mode: crate::cache::CacheMode) -> Self {
        self.cache = mode;
        self
    }

    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }

    /// Continues the caller's W3C trace (`traceparent` header or `_meta`), or starts one
    /// when it sent none or an invalid one. The call gets a span id of its own.
    pub fn with_trace(self, traceparent: Option<&str>) -> Self {
        self.continuing(traceparent.and_then(Continued::parse))
    }

    /// Continues `parent` (the caller's span, or the one the request's edge decided the
    /// call continues), or starts a trace without one. The call gets a span id of its own.
    pub fn continuing(mut self, parent: Option<Continued>) -> Self {
        let parent = parent.map(|Continued(span)| span);
        let (trace, flags) = match &parent {
            Some(p) => (p.trace_id(), p.trace_flags()),
            None => {
                let trace = TraceId::from_bytes(random_bytes::<16>());
                let flags = if sample_root(None, trace) {
                    TraceFlags::SAMPLED
                } else {
                    TraceFlags::default()
                };
                (trace, flags)
            }
        };
        let span = SpanContext::new(
            trace,
            SpanId::from_bytes(random_bytes::<8>()),
            flags,
            false,
            TraceState::default(),
        );
        self.parent = parent;
        self.adopt_span(span);
        self
    }

    /// Makes `span` this call's span (and its trace the call's trace).
    pub fn adopt_span(&mut self, span: SpanContext) {
        self.trace_id = Some(span.trace_id().to_string());
        self.span = Some(span);
    }

    /// The `traceparent` to send with work this call causes (an upstream call): this
    /// call's trace, with its span as the parent.
    pub fn traceparent(&self) -> Option<String> {
        format_traceparent(self.span.as_ref()?)
    }

    pub fn with_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.requested_timeout = timeout;
        self
    }

    pub fn with_client(mut self, client: Option<ClientInfo>) -> Self {
        self.client = client;
        self
    }

    pub fn with_run(mut self, run: RunStep) -> Self {
        self.run = Some(run);
        self
    }

    pub fn with_agent(mut self, agent: impl Into<String>) -> Self {
        self.agent = Some(agent.into());
        self
    }

    pub fn with_approval(mut self, approval: Option<ApprovalId>) -> Self {
        self.approval = approval;
        self
    }

    pub fn with_progress(mut self, sink: ProgressSink) -> Self {
        self.progress = Some(sink);
        self
    }

    pub fn with_peer(mut self, peer: Arc<dyn ClientChannel>) -> Self {
        self.peer = Some(Client(peer));
        self
    }

    /// Tells the caller how far the call has come, if it asked; never waits.
    pub fn report_progress(&self, progress: f64, total: Option<f64>, message: Option<String>) {
        if let Some(sink) = &self.progress {
            let _ = sink.try_send(Progress {
                progress,
                total,
                message,
            });
        }
    }

    /// When the call must be finished. Set by the executor before the tool runs.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    pub(crate) fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }
}

#[cfg(test)]
mod trace_tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_continued_and_an_invalid_one_replaced() {
        let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let read = parse_traceparent(parent).expect("valid");
        assert_eq!(
            read.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(read.span_id().to_string(), "00f067aa0ba902b7");
        assert!(read.is_sampled());
        assert_eq!(format_traceparent(&read).as_deref(), Some(parent));
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert_eq!(parse_traceparent(bad), None, "{bad}");
        }
        let ctx = CallContext::new(Arc::new(test_auth()), Adapter::Rest).with_trace(Some(parent));
        let sent = ctx.traceparent().expect("a traceparent");
        assert!(
            sent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{sent}"
        );
        assert!(
            !sent.contains("00f067aa0ba902b7"),
            "the call's own span is the parent"
        );
        let fresh = CallContext::new(Arc::new(test_auth()), Adapter::Rest).with_trace(None);
        assert_eq!(fresh.trace_id.as_deref().map(str::len), Some(32));
        assert_ne!(fresh.trace_id, ctx.trace_id);
    }

    fn test_auth() -> crate::AuthContext {
        crate::AuthContext {
            tenant: crate::TenantId::new(),
            tenant_name: "t".into(),
            principal: crate::Principal {
                id: crate::PrincipalId::new(),
                name: "p".into(),
                kind: crate::PrincipalKind::User,
            },
            roles: vec![],
            scopes: vec![],
            key: None,
        }
    }
}
