//! REST errors as RFC 9457 `application/problem+json`.
//!
//! [`ApiError`] is the one error type handlers return. Its mapping to a status is one
//! exhaustive `match` over [`ErrorKind`]: a new kind does not compile until someone
//! decides how REST shows it. Internal causes never reach the body; they ride in the
//! response extensions to the observe middleware, which logs them inside the request span.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use toolgate_core::{ErrorKind, ToolError};
use utoipa::ToSchema;

use crate::request_id;

/// The message of the 401 for a request with no credentials at all: its challenge names
/// no error (RFC 6750 §3.1).
pub const MISSING_TOKEN: &str = "missing bearer token";

/// Media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem details body.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "type": "urn:toolgate:error:invalid_arguments",
    "title": "Invalid arguments",
    "status": 400,
    "detail": "arguments do not match the input schema of read_file: 2 violations",
    "request_id": "01936f0e-8f1c-7a53-9d3e-5c0e0b7e4a21",
    "recoverable": true,
    "suggestion": "fix the listed fields and call again; the tool's input schema is in its listing",
    "errors": [
        {"pointer": "/path", "message": "\"path\" is a required property"},
        {"pointer": "/limit", "message": "value is less than the minimum of 1"}
    ]
}))]
pub struct Problem {
    /// Stable URI naming the error category: `urn:toolgate:error:<category>`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Short, fixed summary of the category.
    pub title: &'static str,
    /// The HTTP status, repeated.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// The request id (also in the `x-request-id` response header).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Whether trying again (changed, or later) can succeed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recoverable: Option<bool>,
    /// What to do about it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggestion: Option<String>,
    /// Each schema violation, with the JSON pointer into the arguments.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ProblemViolation>,
    /// Further facts (limits, timeouts).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
}

/// What every route behind authentication may answer besides its own responses: listed
/// in each such route's `responses(..)`, so that no route's documentation leaves them out.
#[derive(utoipa::IntoResponses)]
pub enum Refusals {
    /// No credentials, or credentials that are not valid (expired, revoked, malformed).
    #[response(
        status = 401,
        description = "Missing or invalid credentials",
        content_type = "application/problem+json",
        headers(("WWW-Authenticate" = String, description = "The Bearer challenge (RFC 6750): `error=\"invalid_token\"` when credentials came but are not valid"))
    )]
    Unauthenticated(Problem),
    /// The gateway failed; the cause is logged under the request id.
    #[response(
        status = 500,
        description = "Internal error (the cause is logged under the request id)",
        content_type = "application/problem+json"
    )]
    Internal(Problem),
}

/// What a REST read (`GET`) may also answer: listed beside [`Refusals`] in each read's
/// `responses(..)`.
#[derive(utoipa::IntoResponses)]
pub enum ReadRefusals {
    /// The caller's reads per minute are used up (`limits.principal_reads_per_minute`).
    #[response(
        status = 429,
        description = "Your reads per minute are used up (`limits.principal_reads_per_minute`); try again after `Retry-After`",
        content_type = "application/problem+json",
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    RateLimited(Problem),
}

/// One violation of a tool's input schema.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProblemViolation {
    /// JSON pointer into `arguments` (`""` is the arguments object itself).
    pub pointer: String,
    pub message: String,
}

/// Everything a REST handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A tool call (or tool lookup) failed.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The request itself is malformed (bad JSON, bad query or path parameter).
    #[error("malformed request: {0}")]
    Malformed(String),
    /// The body is not `application/json`.
    #[error("unsupported media type")]
    UnsupportedMediaType,
    /// The body exceeds the configured limit.
    #[error("payload too large")]
    PayloadTooLarge,
    /// No route matches the path.
    #[error("no such route")]
    NoRoute,
    /// The request conflicts with existing state (a duplicate name).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The route exists but not for this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// A failure inside the gateway; logged, never shown.
    #[error("internal error: {0:#}")]
    Internal(anyhow::Error),
}

impl ApiError {
    fn parts(&self) -> (StatusCode, &'static str, &'static str) {
        match self {
            ApiError::Tool(err) => {
                let (status, title) = tool_status(err.kind);
                (status, err.kind.as_str(), title)
            }
            ApiError::Malformed(_) => (
                StatusCode::BAD_REQUEST,
                "malformed_request",
                "Malformed request",
            ),
            ApiError::UnsupportedMediaType => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "Unsupported media type",
            ),
            ApiError::PayloadTooLarge => (
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                "Payload too large",
            ),
            ApiError::NoRoute => (StatusCode::NOT_FOUND, "no_route", "No such route"),
            ApiError::Conflict(_) => (StatusCode::CONFLICT, "conflict", "Conflict"),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "Method not allowed",
            ),
            ApiError::Internal(_) => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
            ),
        }
    }
}

/// The REST status and title for each error category. Exhaustive on purpose.
fn tool_status(kind: ErrorKind) -> (StatusCode, &'static str) {
    match kind {
        ErrorKind::InvalidArguments => (StatusCode::BAD_REQUEST, "Invalid arguments"),
        ErrorKind::Unauthenticated => (StatusCode::UNAUTHORIZED, "Unauthenticated"),
        ErrorKind::Forbidden => (StatusCode::FORBIDDEN, "Forbidden"),
        ErrorKind::Denied => (StatusCode::FORBIDDEN, "Denied by policy"),
        ErrorKind::NotFound => (StatusCode::NOT_FOUND, "Not found"),
        ErrorKind::ApprovalRequired => (StatusCode::CONFLICT, "Approval required"),
        ErrorKind::RateLimited => (StatusCode::TOO_MANY_REQUESTS, "Rate limited"),
        ErrorKind::Upstream => (StatusCode::BAD_GATEWAY, "Upstream failed"),
        ErrorKind::Timeout => (StatusCode::GATEWAY_TIMEOUT, "Timed out"),
        // The caller went away or the gateway is shutting down: nobody is left to blame
        // but the service's own availability.
        ErrorKind::Cancelled => (StatusCode::SERVICE_UNAVAILABLE, "Cancelled"),
        ErrorKind::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "Internal error"),
        ErrorKind::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "Service unavailable"),
    }
}

impl ApiError {
    /// The problem document for this error, its status, and the internal cause to log.
    pub fn into_problem(self) -> (StatusCode, Problem, Option<String>) {
        let (status, category, title) = self.parts();
        let mut problem = Problem {
            kind: format!("urn:toolgate:error:{category}"),
            title,
            status: status.as_u16(),
            detail: String::new(),
            request_id: request_id::current(),
            recoverable: None,
            suggestion: None,
            errors: Vec::new(),
            details: None,
        };
        let mut cause = None;
        match self {
            ApiError::Tool(err) => {
                problem.detail = err.message;
                problem.recoverable = Some(err.recoverable);
                problem.suggestion = err.suggestion;
                problem.errors = err
                    .violations
                    .into_iter()
                    .map(|v| ProblemViolation {
                        pointer: v.pointer,
                        message: v.message,
                    })
                    .collect();
                problem.details = err.details;
                cause = err.cause;
            }
            ApiError::Malformed(detail) => problem.detail = detail,
            ApiError::UnsupportedMediaType => {
                problem.detail =
                    "the body must be JSON, sent with Content-Type: application/json".into();
            }
            ApiError::PayloadTooLarge => {
                problem.detail = "the request body is larger than this gateway accepts".into();
            }
            ApiError::NoRoute => problem.detail = "no route matches this path; see /docs".into(),
            ApiError::Conflict(detail) => problem.detail = detail,
            ApiError::MethodNotAllowed => {
                problem.detail = "this route does not accept this method".into()
            }
            ApiError::Internal(err) => {
                problem.detail = "internal error; quote the request id when reporting it".into();
                cause = Some(format!("{err:#}"));
            }
        }
        (status, problem, cause)
    }
}

impl ApiError {
    /// `Retry-After` seconds for a call to make again later (503, 429), from its details.
    fn retry_after(&self) -> Option<u64> {
        let ApiError::Tool(err) = self else {
            return None;
        };
        if !matches!(err.kind, ErrorKind::Unavailable | ErrorKind::RateLimited) {
            return None;
        }
        Some(
            err.retry
                .map_or(toolgate_core::executor::RETRY_AFTER_SECS, |r| {
                    r.after.as_secs()
                }),
        )
    }

    /// The `WWW-Authenticate` challenge of a 401 or 403 (RFC 6750 §3): no error code when
    /// no credentials came, `invalid_token` for bad ones, `insufficient_scope` (naming the
    /// scope when known) when they do not reach far enough.
    fn challenge(&self) -> Option<String> {
        let ApiError::Tool(err) = self else {
            return None;
        };
        match err.kind {
            ErrorKind::Unauthenticated if err.message == MISSING_TOKEN => {
                Some(r#"Bearer realm="toolgate""#.into())
            }
            ErrorKind::Unauthenticated => {
                Some(r#"Bearer realm="toolgate", error="invalid_token""#.into())
            }
            ErrorKind::Forbidden => {
                let scope = err
                    .details
                    .as_ref()
                    .and_then(|d| d.get("required_scope"))
                    .and_then(|s| s.as_str())
                    .filter(|s| {
                        s.bytes()
                            .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
                    });
                Some(match scope {
                    Some(scope) => format!(
                        r#"Bearer realm="toolgate", error="insufficient_scope", scope="{scope}""#
                    ),
                    None => r#"Bearer realm="toolgate", error="insufficient_scope""#.into(),
                })
            }
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let challenge = self.challenge();
        let retry_after = self.retry_after();
        let (status, problem, cause) = self.into_problem();
        let mut response = (status, Json(problem)).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        if let Some(cause) = cause {
            response
                .extensions_mut()
                .insert(request_id::InternalCause(cause.into()));
        }
        response
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::MissingJsonContentType(_) => ApiError::UnsupportedMediaType,
            JsonRejection::JsonDataError(e) => ApiError::Malformed(e.body_text()),
            JsonRejection::JsonSyntaxError(e) => ApiError::Malformed(e.body_text()),
            JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                ApiError::PayloadTooLarge
            }
            other if crate::http_server::body_was_cut(&other) => body_cut(other.body_text()),
            other => match crate::http_server::over_budget(&other) {
                Some(over) => body_over_budget(over),
                None => ApiError::Malformed(other.body_text()),
            },
        }
    }
}

/// A store that cannot take an operation for now, as the client hears it: 503 with
/// `Retry-After` (the cause logged, not shown).
pub fn store_unavailable(err: &toolgate_store::StoreError) -> ToolError {
    let message = match err {
        toolgate_store::StoreError::Busy(busy) => format!("{busy}; try again shortly"),
        _ => "the store cannot take this request right now; try again shortly".into(),
    };
    unavailable(message, err.to_string())
}

/// 503 with `Retry-After` for a request whose body was still arriving when its
/// connection was closed to make room (see [`crate::http_server`]).
pub fn body_cut(cause: String) -> ApiError {
    ApiError::Tool(unavailable(
        "the gateway is at its connection cap and closed this connection while the request \
         body was still arriving; try again shortly"
            .into(),
        cause,
    ))
}

/// A request body refused for the body bytes held already (see
/// [`crate::http_server::BodyBytes`]): 429 when its tenant holds its share, 503 when the
/// instance holds all it may, both with `Retry-After`.
pub(crate) fn body_over_budget(over: &crate::http_server::OverBudget) -> ApiError {
    let retry_after = std::time::Duration::from_secs(toolgate_core::executor::RETRY_AFTER_SECS);
    ApiError::Tool(match over {
        crate::http_server::OverBudget::Tenant => {
            ToolError::new(ErrorKind::RateLimited, over.to_string())
                .with_retry_after(retry_after, false)
        }
        crate::http_server::OverBudget::Server => unavailable(over.to_string(), over.to_string()),
    })
}

/// 503 with `Retry-After`: `message` shown, `cause` logged.
fn unavailable(message: String, cause: String) -> ToolError {
    let mut unavailable = ToolError::new(ErrorKind::Unavailable, message).with_retry_after(
        std::time::Duration::from_secs(toolgate_core::executor::RETRY_AFTER_SECS),
        false,
    );
    unavailable.cause = Some(cause);
    unavailable
}

/// A store error met on the way to a request's real work (looking up its key or its
/// tenant): 503 to retry when the store is out of reach for now, else internal.
pub fn store_failure(err: toolgate_store::StoreError) -> ToolError {
    if err.is_unavailable() {
        store_unavailable(&err)
    } else {
        ToolError::internal(err)
    }
}

/// An audit row that could not be written, as an answer: 503 with `Retry-After` when the
/// store is out of reach for now, else internal.
pub fn audit_failure(err: toolgate_core::audit::AuditError) -> ApiError {
    if err.transient {
        ApiError::Tool(unavailable(
            "the audit log cannot take this record right now; try again shortly".into(),
            err.message,
        ))
    } else {
        ApiError::Internal(anyhow::anyhow!(err.message))
    }
}

impl From<toolgate_store::StoreError> for ApiError {
    fn from(err: toolgate_store::StoreError) -> Self {
        use toolgate_store::StoreError;
        match err {
            StoreError::Conflict(detail) => ApiError::Conflict(detail),
            StoreError::NotFound(detail) => ApiError::Tool(ToolError::not_found(detail)),
            StoreError::Invalid(detail) => ApiError::Malformed(detail),
            busy @ StoreError::Busy(_) => ApiError::Tool(store_unavailable(&busy)),
            other if other.is_unavailable() => ApiError::Tool(store_unavailable(&other)),
            other @ (StoreError::Database(_)
            | StoreError::Sqlite(_)
            | StoreError::Migrate(_)
            | StoreError::Corrupt(_)) => ApiError::Internal(other.into()),
        }
    }
}

impl From<QueryRejection> for ApiError {
    fn from(rejection: QueryRejection) -> Self {
        ApiError::Malformed(rejection.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        ApiError::Malformed(rejection.body_text())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_category_has_a_client_or_server_status() {
        for kind in ErrorKind::ALL {
            let (status, _) = tool_status(kind);
            let expected_server_side = matches!(
                kind,
                ErrorKind::Upstream
                    | ErrorKind::Timeout
                    | ErrorKind::Internal
                    | ErrorKind::Cancelled
                    | ErrorKind::Unavailable
            );
            assert_eq!(status.is_server_error(), expected_server_side, "{kind}");
        }
    }

    #[test]
    fn internal_causes_are_kept_out_of_the_body() {
        let response =
            ApiError::Tool(ToolError::internal("db password=hunter2 rejected")).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let cause = response
            .extensions()
            .get::<request_id::InternalCause>()
            .expect("cause for the logs");
        assert!(cause.0.contains("hunter2"));
    }
}
