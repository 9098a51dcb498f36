//! One error taxonomy for every adapter.
//!
//! Each adapter maps [`ErrorKind`] to its wire form in one exhaustive `match` (REST:
//! problem+json status; MCP: JSON-RPC error or `isError` result; agent: a JSON object fed
//! back to the model), so a new kind does not compile until each adapter decides.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How long a caller is asked to wait before trying again a call refused for now (the
/// store could not take it, a limit was reached).
pub const RETRY_AFTER_SECS: u64 = 1;

/// The category of a failed call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The arguments do not match the tool's input schema, or name something impossible.
    InvalidArguments,
    /// No such tool in the caller's toolset (or no such object the tool was asked about).
    NotFound,
    /// No valid credentials.
    Unauthenticated,
    /// Valid credentials lacking a scope or role.
    Forbidden,
    /// Policy requires a person to approve this call first.
    ApprovalRequired,
    /// Policy, or a person, refused this call.
    Denied,
    /// The caller exceeded a rate limit.
    RateLimited,
    /// The call ran past its deadline.
    Timeout,
    /// The caller cancelled the call (or went away).
    Cancelled,
    /// An upstream (MCP server, web site, provider) failed.
    Upstream,
    /// A bug or an unavailable dependency inside the gateway. Its cause is logged, never shown.
    Internal,
    /// The gateway cannot serve the call right now (its store is unreachable, overloaded
    /// or locked); trying again shortly may succeed. REST answers 503 with `Retry-After`.
    Unavailable,
}

impl ErrorKind {
    /// Every kind, for exhaustive tests and documentation.
    pub const ALL: [ErrorKind; 12] = [
        ErrorKind::InvalidArguments,
        ErrorKind::NotFound,
        ErrorKind::Unauthenticated,
        ErrorKind::Forbidden,
        ErrorKind::ApprovalRequired,
        ErrorKind::Denied,
        ErrorKind::RateLimited,
        ErrorKind::Timeout,
        ErrorKind::Cancelled,
        ErrorKind::Upstream,
        ErrorKind::Internal,
        ErrorKind::Unavailable,
    ];

    /// The stable snake_case name used in problem types, audit rows and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArguments => "invalid_arguments",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::ApprovalRequired => "approval_required",
            ErrorKind::Denied => "denied",
            ErrorKind::RateLimited => "rate_limited",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Upstream => "upstream",
            ErrorKind::Internal => "internal",
            ErrorKind::Unavailable => "unavailable",
        }
    }

    /// Whether trying again (perhaps with other arguments, or later) can succeed.
    pub fn default_recoverable(self) -> bool {
        match self {
            ErrorKind::InvalidArguments
            | ErrorKind::ApprovalRequired
            | ErrorKind::RateLimited
            | ErrorKind::Timeout
            | ErrorKind::Upstream
            | ErrorKind::Unavailable => true,
            ErrorKind::NotFound
            | ErrorKind::Unauthenticated
            | ErrorKind::Forbidden
            | ErrorKind::Denied
            | ErrorKind::Cancelled
            | ErrorKind::Internal => false,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One schema violation: where in the arguments, and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    /// JSON pointer into the arguments (`""` is the whole object).
    pub pointer: String,
    /// What is wrong, without echoing the offending value (it may be a secret).
    pub message: String,
}

/// A failed call, as every adapter sees it.
///
/// `message` is shown to callers (people and models); for [`ErrorKind::Internal`] it is a
/// generic text and the real cause sits in `cause`, which is logged by the executor and
/// never serialized.
#[derive(Clone, Debug, Serialize)]
pub struct ToolError {
    pub kind: ErrorKind,
    pub message: String,
    pub recoverable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// Schema violations, for `invalid_arguments` from validation.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub violations: Vec<Violation>,
    /// Extra structured facts (e.g. the limit that was hit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// The internal cause, for logs only.
    #[serde(skip)]
    pub cause: Option<String>,
    /// Held for a person's approval (`approval_required`): the typed twin of
    /// `details.approval_id` and `details.expires_in_secs`, for code that acts on it.
    #[serde(skip)]
    pub awaiting_approval: Option<AwaitingApproval>,
    /// When the same call may be made again (`Retry-After`), and whether the tool did not
    /// run at all: the typed twin of `details.retry_after_secs` and `details.not_run`.
    #[serde(skip)]
    pub retry: Option<Retry>,
}

/// A call held for a person's approval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AwaitingApproval {
    pub approval: crate::ApprovalId,
    /// Until the approval expires (and counts as denied).
    pub expires_in: std::time::Duration,
}

/// When to come back after a refusal or a transient failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retry {
    pub after: std::time::Duration,
    /// Refused at admission, before the tool ran: the same call may be made again even
    /// when it has side effects.
    pub not_run: bool,
}

impl ToolError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            recoverable: kind.default_recoverable(),
            suggestion: None,
            violations: Vec::new(),
            details: None,
            cause: None,
            awaiting_approval: None,
            retry: None,
        }
    }

    /// `tool`'s call, held until approval `approval` is decided (or expires in
    /// `expires_in`).
    pub fn awaiting_approval(
        tool: &str,
        approval: crate::ApprovalId,
        expires_in: std::time::Duration,
    ) -> Self {
        let mut err = Self::new(
            ErrorKind::ApprovalRequired,
            format!("calling {tool} needs a person's approval first; approval {approval} is pending"),
        )
        .with_details(serde_json::json!({
            "approval_id": approval,
            "expires_in_secs": expires_in.as_secs(),
        }))
        .with_suggestion(format!(
            "someone with the approvals:decide scope approves it (POST /v1/approvals/{approval}); then make the same call again"
        ));
        err.awaiting_approval = Some(AwaitingApproval {
            approval,
            expires_in,
        });
        err
    }

    /// Says when to come back (whole seconds, rounded up, at least one), and whether the tool did
    /// not run; also in `details` (`retry_after_secs`, `not_run`) for the wire.
    pub fn with_retry_after(mut self, after: std::time::Duration, not_run: bool) -> Self {
        let secs = (after.as_secs() + u64::from(after.subsec_nanos() > 0)).max(1);
        let mut details = match self.details.take() {
            Some(Value::Object(map)) => map,
            _ => serde_json::Map::new(),
        };
        details.insert("retry_after_secs".into(), secs.into());
        if not_run {
            details.insert("not_run".into(), true.into());
        }
        self.details = Some(Value::Object(details));
        self.retry = Some(Retry {
            after: std::time::Duration::from_secs(secs),
            not_run,
        });
        self
    }

    /// Whether the very same call, made again later, may succeed: a rate limit, a
    /// deadline, an upstream's failure or the gateway unable to serve for now, unless
    /// the error says it is final (`recoverable: false`).
    pub fn is_retryable(&self) -> bool {
        self.recoverable
            && matches!(
                self.kind,
                ErrorKind::RateLimited
                    | ErrorKind::Timeout
                    | ErrorKind::Upstream
                    | ErrorKind::Unavailable
            )
    }

    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArguments, message)
    }

    /// `invalid_arguments` saying `message` and listing `problems` (a field's path in
    /// the body, `a/b`, and what is wrong with it), each at its JSON pointer; `Ok` when
    /// there are none.
    pub fn unless_valid(
        message: impl Into<String>,
        problems: Vec<(String, String)>,
    ) -> Result<(), ToolError> {
        if problems.is_empty() {
            return Ok(());
        }
        let violations = problems
            .into_iter()
            .map(|(field, message)| Violation {
                pointer: format!("/{field}"),
                message,
            })
            .collect();
        Err(Self::invalid_arguments(message).with_violations(violations))
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }

    pub fn upstream(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Upstream, message)
    }

    /// An internal failure: callers see only "internal error"; `cause` goes to the logs.
    pub fn internal(cause: impl fmt::Display) -> Self {
        let mut err = Self::new(ErrorKind::Internal, "internal error");
        err.cause = Some(cause.to_string());
        err
    }

    pub fn with_suggestion(mut self, suggestion: impl Into<String>) -> Self {
        self.suggestion = Some(suggestion.into());
        self
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn with_violations(mut self, violations: Vec<Violation>) -> Self {
        self.violations = violations;
        self
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ToolError {}

impl From<std::io::Error> for ToolError {
    /// I/O failures inside a tool are internal unless the tool maps them first.
    fn from(err: std::io::Error) -> Self {
        ToolError::internal(err)
    }
}

/// The first `T` among `err` and its causes.
pub fn cause<'a, T: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    std::iter::successors(Some(err), |e| e.source()).find_map(|e| e.downcast_ref::<T>())
}

/// An error with its causes, `: `-separated (a cause its parent already quotes is not
/// repeated).
pub fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let said = cause.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn held_and_retry_are_typed_and_on_the_wire() {
        let approval = crate::ApprovalId::new();
        let err =
            ToolError::awaiting_approval("execute_command", approval, Duration::from_secs(60));
        assert_eq!(err.kind, ErrorKind::ApprovalRequired);
        assert_eq!(err.awaiting_approval.map(|h| h.approval), Some(approval));
        let wire = serde_json::to_value(&err).expect("json");
        assert_eq!(wire["details"]["approval_id"], approval.to_string());
        assert_eq!(wire["details"]["expires_in_secs"], 60);

        let refused = ToolError::new(ErrorKind::RateLimited, "slow down")
            .with_details(serde_json::json!({"limit": "tenant"}))
            .with_retry_after(Duration::from_millis(200), true);
        assert_eq!(
            refused.retry,
            Some(Retry {
                after: Duration::from_secs(1),
                not_run: true
            })
        );
        let wire = serde_json::to_value(&refused).expect("json");
        assert_eq!(wire["details"]["limit"], "tenant", "other details kept");
        assert_eq!(wire["details"]["retry_after_secs"], 1);
        assert_eq!(wire["details"]["not_run"], true);
    }

    #[test]
    fn only_transient_failures_are_retryable() {
        for kind in ErrorKind::ALL {
            let retryable = ToolError::new(kind, "x").is_retryable();
            let transient = matches!(
                kind,
                ErrorKind::RateLimited
                    | ErrorKind::Timeout
                    | ErrorKind::Upstream
                    | ErrorKind::Unavailable
            );
            assert_eq!(retryable, transient, "{kind}");
        }
        let mut final_upstream = ToolError::upstream("404 from the site");
        final_upstream.recoverable = false;
        assert!(!final_upstream.is_retryable());
    }
}
