//! `/openapi.json` and the `/docs` page.
//!
//! The page is Swagger UI from the npm package `swagger-ui-dist` (version in
//! `assets/swagger-ui/VERSION`), embedded in the binary: it works with no internet at
//! build time and at run time (no CDN, no build-script download).

use axum::Router;
use axum::body::Bytes;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{Html, IntoResponse};
use axum::routing::get;

const INDEX: &str = r##"<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>toolgate API</title>
  <link rel="icon" type="image/png" href="/docs/favicon.png">
  <link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script>
    window.ui = SwaggerUIBundle({
      url: "/openapi.json",
      dom_id: "#swagger-ui",
      deepLinking: true,
      tryItOutEnabled: true,
      displayRequestDuration: true
    });
  </script>
</body>
</html>
"##;

const BUNDLE_JS: &[u8] = include_bytes!("../assets/swagger-ui/swagger-ui-bundle.js");
const CSS: &[u8] = include_bytes!("../assets/swagger-ui/swagger-ui.css");
const FAVICON: &[u8] = include_bytes!("../assets/swagger-ui/favicon-32x32.png");

fn asset(content_type: &'static str, body: &'static [u8]) -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, content_type),
            (CACHE_CONTROL, "public, max-age=86400"),
        ],
        body,
    )
}

/// Routes serving `document` (the OpenAPI JSON, already rendered) and the docs page.
/// Each answer shares the rendered bytes: no copy per request (anyone may ask, often).
pub fn router<S: Clone + Send + Sync + 'static>(document: String) -> Router<S> {
    let document = Bytes::from(document);
    Router::new()
        .route(
            "/openapi.json",
            get(move || {
                let document = document.clone();
                async move { ([(CONTENT_TYPE, "application/json")], document) }
            }),
        )
        .route("/docs", get(|| async { Html(INDEX) }))
        .route("/docs/", get(|| async { Html(INDEX) }))
        .route(
            "/docs/swagger-ui-bundle.js",
            get(|| async { asset("text/javascript; charset=utf-8", BUNDLE_JS) }),
        )
        .route(
            "/docs/swagger-ui.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/docs/favicon.png",
            get(|| async { asset("image/png", FAVICON) }),
        )
}
