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
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

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
use tokio::time::Instant;
use toolgate_core::{ClientChannel, ClientError, ClientRequest, Progress, ProgressSink};

use crate::pace::PerSecond;

/// Log messages queued for a slow client before newer ones are dropped.
const LOG_BACKLOG: usize = 64;
/// Progress reports queued for a slow client before newer ones are dropped.
const PROGRESS_BACKLOG: usize = 16;
/// At most this many of a call's requests (sampling, elicitation) wait on its client at
/// once; more are refused at once. Each waits on a person or a model, and an upstream
/// asked for 50 at once had all 50 put to the client.
const REQUESTS_IN_FLIGHT: usize = 8;
/// At most this many of a call's log messages go to its client a second; the rest are
/// dropped and counted, and the client told the count before the result. MCP asks
/// servers to rate-limit log messages; on a shared store each one is also a row of the
/// session's stream.
const LOGS_PER_SEC: u32 = 100;
/// At most this many of a call's progress reports go to its client a second. One over it
/// waits for the next second, replaced by any newer one, and the newest always goes out
/// before the result: progress only says how far the call is, so nothing is lost.
const PROGRESS_PER_SEC: u32 = 20;

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
    /// Log messages that found the queue full, for [`CallNotices`] to count as dropped.
    overflowed: Arc<AtomicU64>,
    /// Room for the requests waiting on the client ([`REQUESTS_IN_FLIGHT`]).
    in_flight: tokio::sync::Semaphore,
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
            level: level.clone(),
            pace: Pace::default(),
            overflowed: Arc::default(),
        };
        let caller = Self {
            peer,
            call,
            level,
            logs,
            overflowed: notices.overflowed.clone(),
            in_flight: tokio::sync::Semaphore::new(REQUESTS_IN_FLIGHT),
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
        if self.level.passes(param.level)
            && let Err(mpsc::error::TrySendError::Full(_)) = self.logs.try_send(param)
        {
            self.overflowed.fetch_add(1, Ordering::Relaxed);
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
        let Ok(_room) = self.in_flight.try_acquire() else {
            return Err(ClientError::new(
                ClientError::INVALID_REQUEST,
                format!(
                    "this call already has {REQUESTS_IN_FLIGHT} requests waiting on the client; {} refused",
                    request.method()
                ),
            ));
        };
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
///
/// Both go out at a bounded rate ([`LOGS_PER_SEC`], [`PROGRESS_PER_SEC`]): the upstream
/// behind a call writes as fast as it likes, and its client, and the session's stream
/// in the store, should not have to take all of it.
pub struct CallNotices {
    peer: Peer<RoleServer>,
    progress: Option<(ProgressToken, mpsc::Receiver<Progress>)>,
    logs: mpsc::Receiver<LoggingMessageNotificationParam>,
    level: Arc<LogLevel>,
    pace: Pace,
    overflowed: Arc<AtomicU64>,
}

/// What of a call's notices went out this second, and what waits or was dropped.
struct Pace {
    logs: PerSecond,
    logs_dropped: u64,
    progress: PerSecond,
    /// The newest report that came over this second's budget.
    held: Option<Progress>,
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            logs: PerSecond::new(LOGS_PER_SEC),
            logs_dropped: 0,
            progress: PerSecond::new(PROGRESS_PER_SEC),
            held: None,
        }
    }
}

impl Pace {
    /// `notice`, if it may go out now: a log message within its budget, a progress report
    /// within its own (then any held one is older, and dropped) or else held.
    fn admit(&mut self, notice: Notice, now: Instant) -> Option<Notice> {
        match notice {
            Notice::Log(_) if !self.logs.admit(now) => {
                self.logs_dropped += 1;
                None
            }
            Notice::Progress(report) if !self.progress.admit(now) => {
                self.held = Some(report);
                None
            }
            Notice::Progress(report) => {
                self.held = None;
                Some(Notice::Progress(report))
            }
            log => Some(log),
        }
    }

    /// When the held report may go out.
    fn held_until(&mut self, now: Instant) -> Option<Instant> {
        self.held.as_ref()?;
        Some(self.progress.spent_until(now).unwrap_or(now))
    }

    /// The held report, once its budget allows it.
    fn release(&mut self, now: Instant) -> Option<Notice> {
        if self.held.is_some() && self.progress.admit(now) {
            return self.held.take().map(Notice::Progress);
        }
        None
    }
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
            // A call that reports nothing over the budget reads no clock here.
            let held = match self.pace.held {
                Some(_) => self.pace.held_until(Instant::now()),
                None => None,
            };
            tokio::select! {
                out = &mut call => {
                    self.finish().await;
                    return out;
                }
                Some(notice) = self.next() => {
                    if let Some(notice) = self.pace.admit(notice, Instant::now()) {
                        self.send(notice).await;
                    }
                }
                () = tokio::time::sleep_until(held.unwrap_or_else(Instant::now)), if held.is_some() => {
                    if let Some(notice) = self.pace.release(Instant::now()) {
                        self.send(notice).await;
                    }
                }
            }
        }
    }

    /// What is still queued once the call is done, within the budgets; the newest progress
    /// report whatever the budget; and how many log messages were dropped, if any were.
    async fn finish(&mut self) {
        while let Some(notice) = self.queued() {
            if let Some(notice) = self.pace.admit(notice, Instant::now()) {
                self.send(notice).await;
            }
        }
        if let Some(report) = self.pace.held.take() {
            self.send(Notice::Progress(report)).await;
        }
        let dropped = self.pace.logs_dropped + self.overflowed.load(Ordering::Relaxed);
        if dropped > 0 && self.level.passes(LoggingLevel::Warning) {
            let mut note = LoggingMessageNotificationParam::new(
                LoggingLevel::Warning,
                Value::String(format!(
                    "toolgate did not relay {dropped} log messages of this call: it relays at most {LOGS_PER_SEC} a second, and queues at most {LOG_BACKLOG} for a client that is behind"
                )),
            );
            note.logger = Some("toolgate".to_owned());
            self.send(Notice::Log(note)).await;
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
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn report(progress: f64) -> Notice {
        Notice::Progress(Progress {
            progress,
            total: None,
            message: None,
        })
    }

    fn progress_of(notice: Option<Notice>) -> Option<f64> {
        match notice {
            Some(Notice::Progress(p)) => Some(p.progress),
            _ => None,
        }
    }

    #[test]
    fn a_call_relays_its_log_budget_a_second_and_counts_the_rest() {
        let mut pace = Pace::default();
        let now = Instant::now();
        let log = || {
            Notice::Log(LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                json!("x"),
            ))
        };
        let sent = (0..LOGS_PER_SEC + 50)
            .filter(|_| pace.admit(log(), now).is_some())
            .count();
        assert_eq!(sent, LOGS_PER_SEC as usize);
        assert_eq!(pace.logs_dropped, 50);
        assert!(
            pace.admit(log(), now + Duration::from_secs(1)).is_some(),
            "a new second"
        );
    }

    #[test]
    fn progress_over_its_budget_waits_for_the_next_second_and_only_the_newest_does() {
        let mut pace = Pace::default();
        let now = Instant::now();
        for n in 0..PROGRESS_PER_SEC {
            assert_eq!(
                progress_of(pace.admit(report(f64::from(n)), now)),
                Some(f64::from(n))
            );
        }
        assert_eq!(pace.held_until(now), None, "nothing held yet");
        assert!(pace.admit(report(100.0), now).is_none());
        assert!(pace.admit(report(101.0), now).is_none());
        let until = pace.held_until(now).expect("a report held");
        assert!(until > now, "held for the next second");
        assert!(pace.release(now).is_none(), "not before then");
        assert_eq!(progress_of(pace.release(until)), Some(101.0), "the newest");
        assert_eq!(pace.held_until(until), None);

        // A newer report within the budget makes a held one pointless.
        let later = until + Duration::from_secs(1);
        for n in 0..PROGRESS_PER_SEC {
            pace.admit(report(f64::from(200 + n)), later);
        }
        assert!(pace.admit(report(300.0), later).is_none());
        let next = later + Duration::from_secs(1);
        assert_eq!(progress_of(pace.admit(report(301.0), next)), Some(301.0));
        assert_eq!(pace.held_until(next), None, "300 is not sent after 301");
    }

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
