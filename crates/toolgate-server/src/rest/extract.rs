//! Our own extractors, so every rejection speaks problem+json (a missing field becomes a
//! 400 naming it, not axum's plain-text 422).

use axum::extract::{FromRequest, FromRequestParts};
use axum::response::{IntoResponse, Response};

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

/// `axum::extract::Query` with problem+json rejections.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct AppQuery<T>(pub T);

/// `axum::extract::Path` with problem+json rejections.
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct AppPath<T>(pub T);
