//! The MCP front door's side of relaying: an MCP caller as the [`ClientChannel`] of its
//! call, so that an upstream tool's log messages, sampling and elicitation requests reach
//! the client that made the call (the upstream side attributes them, see
//! [`crate::upstream`]).
//!
//! - Log messages go out as `notifications/message`, at or above the level the session
//!   chose with `logging/setLevel` (everything until it chooses), in the order they came,
//!   and, like the call's progress, before its result ([`CallNotices`]).
//! - Sampling and elicitation requests go out only when the client declared the
//!   capability, and on the call's own response stream (SEP-2260: the request is marked
//!   with the `tools/call` it belongs to). On protocol 2026-07-28, which has no
//!   server-to-client requests, rmcp refuses to send them and the upstream hears why.
//!
//! Logging and sampling are deprecated by SEP-2577 (2026-07-28), which is why this module
//! allows rmcp's deprecation warnings: clients of 2025-11-25 and earlier still use them.
#![allow(deprecated)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use async_trait::async_trait;
use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, ElicitRequest,
    ElicitRequestParams, LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProgressToken, RequestId, ServerRequest,
};
use rmcp::service::{ElicitationMode, OriginatingRequestId, Peer};
use rmcp::{RoleServer, ServiceError};
use serde_json::Value;
use tokio::sync::mpsc;
use toolgate_core::{ClientChannel, ClientError, ClientRequest, Progress, ProgressSink};

/// Log messages queued for a slow client before newer ones are dropped.
const LOG_BACKLOG: usize = 64;
/// Progress reports queued for a slow client before newer ones are dropped.
const PROGRESS_BACKLOG: usize = 16;

/// The lowest level a session wants to hear (`logging/setLevel`); all until it says.
#[derive(Debug, Default)]
pub struct LogLevel(AtomicU8);

/// Above every level: nothing passes.
const SILENT: u8 = u8::MAX;

impl LogLevel {
    /// A 2026-07-28 request's own level (`io.modelcontextprotocol/logLevel` in its
    /// `_meta`); without one the request hears no log messages (SEP-2575: the server
    /// MUST NOT send any).
    pub fn per_request(level: Option<LoggingLevel>) -> Self {
        Self(AtomicU8::new(level.map_or(SILENT, rank)))
    }

    pub fn set(&self, level: LoggingLevel) {
        self.0.store(rank(level), Ordering::Relaxed);
    }

    fn passes(&self, level: LoggingLevel) -> bool {
        rank(level) >= self.0.load(Ordering::Relaxed)
    }
}

fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// One MCP `tools/call`'s way back to its client.
pub struct CallerPeer {
    peer: Peer<RoleServer>,
    /// The `tools/call` request: requests made for it ride its response stream.
    call: RequestId,
    level: Arc<LogLevel>,
    /// Into the call's [`CallNotices`], which sends them in order, before the result.
    logs: mpsc::Sender<LoggingMessageNotificationParam>,
}

impl CallerPeer {
    /// The call's way back, and the [`CallNotices`] that must drive the call for its log
    /// messages and progress reports to go out.
    pub fn new(
        peer: Peer<RoleServer>,
        call: RequestId,
        level: Arc<LogLevel>,
    ) -> (Self, CallNotices) {
        let (logs, queued) = mpsc::channel(LOG_BACKLOG);
        let notices = CallNotices {
            peer: peer.clone(),
            progress: None,
            logs: queued,
        };
        let caller = Self {
            peer,
            call,
            level,
            logs,
        };
        (caller, notices)
    }

    fn capable(&self, request: ClientRequest) -> bool {
        let Some(info) = self.peer.peer_info() else {
            return false;
        };
        match request {
            ClientRequest::Sampling => info.capabilities.sampling.is_some(),
            ClientRequest::Elicitation => info.capabilities.elicitation.is_some(),
        }
    }
}

#[async_trait]
impl ClientChannel for CallerPeer {
    fn log(&self, message: Value) {
        let Ok(param) = serde_json::from_value::<LoggingMessageNotificationParam>(message) else {
            return;
        };
        if self.level.passes(param.level) {
            let _ = self.logs.try_send(param);
        }
    }

    async fn request(&self, request: ClientRequest, params: Value) -> Result<Value, ClientError> {
        if !self.capable(request) {
            return Err(ClientError::new(
                ClientError::METHOD_NOT_FOUND,
                format!(
                    "the calling client does not support {} (it did not declare the capability)",
                    request.method()
                ),
            ));
        }
        let invalid = |e: serde_json::Error| {
            ClientError::new(
                ClientError::INVALID_PARAMS,
                format!("invalid {} params: {e}", request.method()),
            )
        };
        let unsupported = |what: &str| {
            Err(ClientError::new(
                ClientError::INVALID_PARAMS,
                format!("the calling client does not support {what}"),
            ))
        };
        let mut outbound = match request {
            ClientRequest::Sampling => {
                let params: CreateMessageRequestParams =
                    serde_json::from_value(params).map_err(invalid)?;
                if (params.tools.is_some() || params.tool_choice.is_some())
                    && !self.peer.supports_sampling_tools()
                {
                    return unsupported("tools in sampling");
                }
                ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params))
            }
            ClientRequest::Elicitation => {
                let params: ElicitRequestParams =
                    serde_json::from_value(params).map_err(invalid)?;
                let mode = match &params {
                    ElicitRequestParams::UrlElicitationParams { .. } => ElicitationMode::Url,
                    _ => ElicitationMode::Form,
                };
                if !self.peer.supported_elicitation_modes().contains(&mode) {
                    return unsupported(&format!("{mode:?} elicitation"));
                }
                ServerRequest::ElicitRequest(ElicitRequest::new(params))
            }
        };
        // Ride the `tools/call`'s own response stream (the tool runs on a task of its own,
        // where rmcp cannot see which request it serves). Sent from a task of its own too:
        // this runs in the upstream's handler, whose task-local originating request (the
        // upstream's own request id) rmcp would put in place of this tag, sending the
        // request to the standalone stream, which the client may not have open.
        use rmcp::model::GetExtensions;
        outbound
            .extensions_mut()
            .insert(OriginatingRequestId(self.call.clone()));
        let peer = self.peer.clone();
        // A call given up (cancelled, past its deadline) stops waiting for the answer.
        let answer = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
            peer.send_request(outbound).await
        }))
        .await
        .map_err(|e| ClientError::new(ClientError::INTERNAL, e.to_string()))?
        .map_err(|e| match e {
            ServiceError::McpError(e) => ClientError::new(e.code.0, e.message),
            other => ClientError::new(ClientError::INTERNAL, other.to_string()),
        })?;
        match answer {
            ClientResult::CreateMessageResult(_) | ClientResult::ElicitResult(_) => {
                serde_json::to_value(&answer)
                    .map_err(|e| ClientError::new(ClientError::INTERNAL, e.to_string()))
            }
            _ => Err(ClientError::new(
                ClientError::INTERNAL,
                format!(
                    "the client answered {} with something else",
                    request.method()
                ),
            )),
        }
    }
}

/// What one call says to its client before its result: progress reports (through the
/// [`ProgressSink`] it hands the call) and log messages (through the call's
/// [`CallerPeer`]). [`CallNotices::drive`] drives the call and sends them as they come, and once
/// the call is done whatever is still queued, so all of it goes out before the result.
/// A task per call forwarding them raced the result instead, and lost now and then on a
/// busy machine: a stateless call's stream, or a session call's progress, ends with its
/// result, and what came after was gone.
pub struct CallNotices {
    peer: Peer<RoleServer>,
    progress: Option<(ProgressToken, mpsc::Receiver<Progress>)>,
    logs: mpsc::Receiver<LoggingMessageNotificationParam>,
}

enum Notice {
    Progress(Progress),
    Log(LoggingMessageNotificationParam),
}

impl CallNotices {
    /// A sink for the call's progress, reported to the client under its `token`.
    pub fn progress(&mut self, token: ProgressToken) -> ProgressSink {
        let (sink, reports) = mpsc::channel(PROGRESS_BACKLOG);
        self.progress = Some((token, reports));
        sink
    }

    /// Runs `call` to its end, sending what it says meanwhile, then what is left.
    pub async fn drive<F: Future>(&mut self, call: F) -> F::Output {
        let mut call = std::pin::pin!(call);
        loop {
            tokio::select! {
                out = &mut call => {
                    while let Some(notice) = self.queued() {
                        self.send(notice).await;
                    }
                    return out;
                }
                Some(notice) = self.next() => self.send(notice).await,
            }
        }
    }

    async fn next(&mut self) -> Option<Notice> {
        let Self { progress, logs, .. } = self;
        let report = async {
            match progress {
                Some((_, reports)) => reports.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some(report) = report => Some(Notice::Progress(report)),
            Some(log) = logs.recv() => Some(Notice::Log(log)),
            else => None,
        }
    }

    fn queued(&mut self) -> Option<Notice> {
        if let Some((_, reports)) = &mut self.progress
            && let Ok(report) = reports.try_recv()
        {
            return Some(Notice::Progress(report));
        }
        self.logs.try_recv().ok().map(Notice::Log)
    }

    /// Sends one notice; a client that has gone misses it, and the call goes on.
    async fn send(&self, notice: Notice) {
        let _ = match notice {
            Notice::Progress(report) => {
                let Some((token, _)) = &self.progress else {
                    return;
                };
                let mut param = ProgressNotificationParam::new(token.clone(), report.progress);
                if let Some(total) = report.total {
                    param = param.with_total(total);
                }
                if let Some(message) = report.message {
                    param = param.with_message(message);
                }
                self.peer.notify_progress(param).await
            }
            Notice::Log(param) => self.peer.notify_logging_message(param).await,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_hears_everything_until_it_sets_a_level_then_that_level_and_above() {
        let level = LogLevel::default();
        assert!(level.passes(LoggingLevel::Debug));
        level.set(LoggingLevel::Warning);
        assert!(!level.passes(LoggingLevel::Debug));
        assert!(!level.passes(LoggingLevel::Notice));
        assert!(level.passes(LoggingLevel::Warning));
        assert!(level.passes(LoggingLevel::Emergency));
        level.set(LoggingLevel::Debug);
        assert!(level.passes(LoggingLevel::Info));
    }
}
