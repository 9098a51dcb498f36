//! Our own extractors, so every rejection speaks problem+json (a missing field becomes a
//! 400 naming it, not axum's plain-text 422).

use std::convert::Infallible;

use axum::extract::{FromRequest, FromRequestParts};
use axum::http::header::USER_AGENT;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use toolgate_core::ClientInfo;
use toolgate_core::context::Continued;

use super::error::ApiError;

/// `axum::Json` with problem+json rejections.
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub struct AppJson<T>(pub T);

impl<T: serde::Serialize> IntoResponse for AppJson<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// A JSON body with `status` and a `Location` header (a created resource, or where to
/// follow an accepted one).
pub fn located<T: serde::Serialize>(
    status: axum::http::StatusCode,
    location: &str,
    body: T,
) -> Response {
    let mut response = (status, AppJson(body)).into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(location) {
        response
            .headers_mut()
            .insert(axum::http::header::LOCATION, v);
    }
    response
}

/// `axum::extract::Query` with problem+json rejections.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct AppQuery<T>(pub T);

/// `axum::extract::Path` with problem+json rejections.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct AppPath<T>(pub T);

/// What a call's request says of where it comes from: its client (the `User-Agent`, first
/// 200 characters) and the span it continues, as the observe layer decided it
/// (`crate::request_id`).
pub struct CallOrigin {
    pub client: Option<ClientInfo>,
    pub parent: Option<Continued>,
}

impl<S: Send + Sync> FromRequestParts<S> for CallOrigin {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let client = parts
            .headers
            .get(USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(ClientInfo::user_agent);
        let parent = parts.extensions.get::<Continued>().cloned();
        Ok(CallOrigin { client, parent })
    }
}

/// The page size of a list when the caller names none (`limit`), and the most it may
/// name: the tools' and the tool definitions' lists (the audit, runs and approvals have
/// their own).
pub const DEFAULT_PAGE: usize = 100;
pub const MAX_PAGE: usize = 500;

/// A numeric query parameter `name`: `default` when absent, refused outside `range`
/// ("limit must be between 1 and 500").
pub fn bounded<T>(
    name: &str,
    value: Option<T>,
    default: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ApiError>
where
    T: PartialOrd + std::fmt::Display + Copy,
{
    let value = value.unwrap_or(default);
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(ApiError::Malformed(format!(
            "{name} must be between {} and {}",
            range.start(),
            range.end()
        )))
    }
}

/// The `next_cursor` of a list newest first whose next page starts `after` an item:
/// `<its creation time, nanoseconds since 1970>.<its id as 32 hex digits>`, safe in a URL
/// as it is. Opaque to callers; [`before`] reads it back.
pub fn next_cursor(after: toolgate_store::Before) -> String {
    // Nanoseconds fit an i64 until 2262; a later time would be a clock gone wrong.
    let nanos = after.created_at.timestamp_nanos_opt().unwrap_or(i64::MAX);
    format!("{nanos}.{}", after.id.simple())
}

/// Where a list goes on, from a `cursor` parameter made by [`next_cursor`]; 400 for
/// anything else.
pub fn before(cursor: Option<&str>) -> Result<Option<toolgate_store::Before>, ApiError> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    let read = || {
        let (nanos, id) = cursor.split_once('.')?;
        let nanos: i64 = nanos.parse().ok()?;
        if id.len() != 32 {
            return None;
        }
        Some(toolgate_store::Before {
            created_at: chrono::DateTime::from_timestamp_nanos(nanos),
            id: uuid::Uuid::try_parse(id).ok()?,
        })
    };
    read()
        .map(Some)
        .ok_or_else(|| ApiError::Malformed("invalid cursor".into()))
}
