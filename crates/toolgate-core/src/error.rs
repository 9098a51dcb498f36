//! One error taxonomy for every adapter.
//!
//! Each adapter maps [`ErrorKind`] to its wire form in one exhaustive `match` (REST:
//! problem+json status; MCP: JSON-RPC error or `isError` result; agent: a JSON object fed
//! back to the model), so a new kind does not compile until each adapter decides.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

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
        }
    }

    pub fn invalid_arguments(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArguments, message)
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
