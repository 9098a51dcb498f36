//! One call's context: who, through which front door, under which deadline.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

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

/// One call. Adapters build it with [`CallContext::new`] and the `with_*` methods; the
/// executor sets the deadline.
#[derive(Clone, Debug)]
pub struct CallContext {
    pub auth: Arc<AuthContext>,
    pub call_id: CallId,
    pub adapter: Adapter,
    pub request_id: Option<String>,
    /// W3C trace id, when the request carried or started a trace.
    pub trace_id: Option<String>,
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
            run: None,
            agent: None,
            approval: None,
            client: None,
            requested_timeout: None,
            cancel: CancellationToken::new(),
            progress: None,
            deadline: None,
        }
    }

    pub fn with_request_id(mut self, request_id: impl Into<String>) -> Self {
        self.request_id = Some(request_id.into());
        self
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
