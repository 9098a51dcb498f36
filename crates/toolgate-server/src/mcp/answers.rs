//! The guard's own answers: JSON-RPC errors for what rmcp would mishandle, and 401/403
//! with their `WWW-Authenticate` challenges.

use super::*;

/// 400 with JSON-RPC's invalid-request error for a request id already in flight.
pub(super) fn duplicate_id(id: &serde_json::Value) -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {
            "code": -32600,
            "message": "Invalid request: a request with this id is still being answered on this session",
        },
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// 200 with a JSON-RPC error answering request `id`: the guard's refusal of a request
/// it read, as rmcp answers a handler's error.
pub(super) fn rpc_error(id: Option<&serde_json::Value>, error: rmcp::ErrorData) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
    (StatusCode::OK, axum::Json(body)).into_response()
}

/// A request body that could not be read: too large (413), cut to make room at the
/// connection cap (503), past the body bytes its tenant (429) or the instance (503) may
/// hold, or not in full and in time (400).
pub(super) fn body_error(err: &axum::Error) -> Response {
    if crate::http_server::body_was_cut(err) {
        return crate::error::body_cut(err.to_string()).into_response();
    }
    if let Some(over) = crate::http_server::over_budget(err) {
        return crate::error::body_over_budget(over).into_response();
    }
    if toolgate_core::error::cause::<http_body_util::LengthLimitError>(err).is_some() {
        return ApiError::PayloadTooLarge.into_response();
    }
    ApiError::Malformed("the request body did not arrive in full and in time".into())
        .into_response()
}

/// Whether a session request's `MCP-Protocol-Version` header agrees with the version
/// the session negotiated. `2025-03-26` agrees with any: it is the version the
/// specification tells servers to assume when the header is absent (its revision had no
/// header), so naming it says no more than leaving the header out.
pub(super) fn same_version(header: &HeaderValue, negotiated: &str) -> bool {
    header == negotiated || header == "2025-03-26"
}

/// 400 for a session request naming a protocol version other than the session's.
pub(super) fn version_mismatch(header: &HeaderValue, negotiated: &str) -> Response {
    let named = String::from_utf8_lossy(header.as_bytes());
    let named: String = named.chars().take(64).collect();
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {
            "code": -32600,
            "message": format!(
                "Invalid request: MCP-Protocol-Version {named:?} is not the version this session negotiated ({negotiated}); send {negotiated}, or open a new session"
            ),
            "data": {"negotiated": negotiated},
        },
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// 400 with the JSON-RPC parse error (its id is null: none could be read).
pub(super) fn parse_error() -> Response {
    let body = json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32700, "message": "Parse error: the body is not a JSON-RPC message"},
    });
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// 401 naming the protected-resource metadata, so OAuth clients can find a token issuer.
pub(super) fn unauthorized(guard: &Guard, headers: &HeaderMap, err: ToolError) -> Response {
    if err.kind != ErrorKind::Unauthenticated {
        return crate::auth::rejection(err).into_response();
    }
    let presented = headers.contains_key(header::AUTHORIZATION);
    let mut response = ApiError::from(err).into_response();
    let metadata = format!("{}{METADATA_PATH}", guard.base_url(headers));
    let challenge = if presented {
        format!(r#"Bearer resource_metadata="{metadata}", error="invalid_token""#)
    } else {
        format!(r#"Bearer resource_metadata="{metadata}""#)
    };
    match HeaderValue::from_str(&challenge) {
        Ok(value) => {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        Err(_) => *response.status_mut() = StatusCode::UNAUTHORIZED,
    }
    response
}
