//! One call's context: who, through which front door, under which deadline.

use std::sync::Arc;
use std::time::Duration;

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
}

impl Adapter {
    pub fn as_str(self) -> &'static str {
        match self {
            Adapter::Rest => "rest",
            Adapter::Mcp => "mcp",
            Adapter::Agent => "agent",
            Adapter::Approval => "approval",
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

/// The trace id and flags of a valid W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`,
/// ids not all zeros; later versions are read by the version-00 fields).
fn parse_traceparent(header: &str) -> Option<(String, String)> {
    let mut parts = header.trim().split('-');
    let (version, trace, parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let valid = hex(version, 2)
        && version != "ff"
        && (version != "00" || parts.next().is_none())
        && hex(trace, 32)
        && trace.bytes().any(|b| b != b'0')
        && hex(parent, 16)
        && parent.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then(|| (trace.to_owned(), flags.to_owned()))
}

/// `bytes` random bytes as lowercase hex (the random tails of v7 UUIDs).
fn random_hex(bytes: usize) -> String {
    let mut random = Vec::with_capacity(bytes + 8);
    while random.len() < bytes {
        // The last 8 bytes of a v7 UUID are random (but for the variant bits).
        random.extend_from_slice(&uuid::Uuid::now_v7().as_bytes()[8..]);
    }
    random.truncate(bytes);
    crate::to_hex(&random)
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
    /// This call's span id (16 hex digits) and trace flags, for the `traceparent` sent
    /// on to upstreams (see [`CallContext::traceparent`]).
    pub span: Option<(String, String)>,
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
            span: None,
            run: None,
            agent: None,
            approval: None,
            client: None,
            requested_timeout: None,
            cancel: CancellationToken::new(),
            progress: None,
            peer: None,
            deadline: None,
        }
    }

    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
    }

    /// Continues the caller's W3C trace (`traceparent` header or `_meta`), or starts one
    /// when it sent none or an invalid one. The call gets a span id of its own.
    pub fn with_trace(mut self, traceparent: Option<&str>) -> Self {
        let (trace, flags) = traceparent
            .and_then(parse_traceparent)
            .unwrap_or_else(|| (random_hex(16), "01".to_owned()));
        self.trace_id = Some(trace);
        self.span = Some((random_hex(8), flags));
        self
    }

    /// The `traceparent` to send with work this call causes (an upstream call): this
    /// call's trace, with its span as the parent.
    pub fn traceparent(&self) -> Option<String> {
        let trace = self.trace_id.as_deref()?;
        let (span, flags) = self.span.as_ref()?;
        Some(format!("00-{trace}-{span}-{flags}"))
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
        assert_eq!(
            parse_traceparent(parent),
            Some((
                "4bf92f3577b34da6a3ce929d0e0e4736".to_owned(),
                "01".to_owned()
            ))
        );
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
        let started = random_hex(16);
        assert_eq!(started.len(), 32);
        assert_ne!(started, random_hex(16));
    }
}
