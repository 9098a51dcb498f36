//! `/console`: the operators' console, served by the gateway itself.
//!
//! **Stack: none.** One HTML page, one stylesheet and one plain ES module, embedded in
//! the binary with `include_str!`: no build step, no bundler, no lockfile to keep, no CDN
//! (works offline), and nothing to audit but ~850 lines the browser runs as written. The
//! console holds no authority of its own: it signs in with an API key (kept in
//! `sessionStorage`, gone when the tab closes) and calls the same REST API as everyone,
//! so it shows only what the key's scopes and tenant allow; a page the key may not read
//! says so. Live views read the SSE streams with `fetch` (an `EventSource` cannot send
//! the `Authorization` header).
//!
//! The page may load nothing but its own assets (`Content-Security-Policy`), cannot be
//! framed, and is never cached with a key in it (there is none: the key lives in the
//! tab's storage, not the page).

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_FRAME_OPTIONS};
use axum::response::IntoResponse;
use axum::routing::get;

const INDEX: &str = include_str!("../assets/console/index.html");
const APP_JS: &str = include_str!("../assets/console/app.js");
const APP_CSS: &str = include_str!("../assets/console/app.css");

const POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "no-cache"),
            (CONTENT_SECURITY_POLICY, POLICY),
            (X_FRAME_OPTIONS, "DENY"),
        ],
        body,
    )
}

/// The console's routes.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let index = || async { asset("text/html; charset=utf-8", INDEX) };
    Router::new()
        .route("/console", get(index))
        .route("/console/", get(index))
        .route(
            "/console/app.js",
            get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }),
        )
        .route(
            "/console/app.css",
            get(|| async { asset("text/css; charset=utf-8", APP_CSS) }),
        )
}
