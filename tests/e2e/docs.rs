//! The OpenAPI document and the offline docs page, in a real browser too.

use toolgate_e2e::{Gateway, run_browser, screenshots};

const CHECKED_IN: &str = include_str!("../../openapi/openapi.json");

#[tokio::test]
async fn served_openapi_equals_the_checked_in_copy() {
    let gw = Gateway::start().await;
    let served = gw
        .http
        .get(gw.url("/openapi.json"))
        .send()
        .await
        .expect("request")
        .text()
        .await
        .expect("text");
    assert!(
        served == CHECKED_IN,
        "openapi/openapi.json is out of date: regenerate it with\n  cargo run -- openapi > openapi/openapi.json"
    );
    let doc: serde_json::Value = serde_json::from_str(&served).expect("JSON");
    assert_eq!(doc["openapi"], "3.1.0");
    for path in [
        "/v1/tools",
        "/v1/tools/{name}",
        "/v1/tools/{name}/invoke",
        "/healthz",
        "/readyz",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} undocumented");
    }
    // Every operation's responses are described, and error responses use problem+json.
    // Every route behind authentication says it may answer 401 (with its challenge) and
    // 500: 22 of 42 did not.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            if path.starts_with("/v1") {
                assert!(
                    op["responses"]["401"]["headers"]["WWW-Authenticate"].is_object(),
                    "{method} {path} does not document 401 and its challenge"
                );
                assert!(
                    op["responses"]["500"].is_object(),
                    "{method} {path} does not document 500"
                );
            }
            for (status, response) in op["responses"].as_object().expect("responses") {
                assert!(
                    response["description"].is_string(),
                    "{method} {path} {status} lacks a description"
                );
                if status.starts_with('4') || status.starts_with('5') && path.starts_with("/v1") {
                    assert!(
                        response["content"]["application/problem+json"].is_object(),
                        "{method} {path} {status} is not problem+json"
                    );
                }
            }
        }
    }
}

#[tokio::test]
async fn docs_page_and_its_assets_are_served_from_the_binary() {
    let gw = Gateway::start().await;
    let page = gw.http.get(gw.url("/docs")).send().await.expect("request");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("html");
    assert!(html.contains("/openapi.json"));
    assert!(!html.contains("https://"), "no CDN assets: {html}");
    for (asset, content_type) in [
        (
            "/docs/swagger-ui-bundle.js",
            "text/javascript; charset=utf-8",
        ),
        ("/docs/swagger-ui.css", "text/css; charset=utf-8"),
        ("/docs/favicon.png", "image/png"),
    ] {
        let response = gw.http.get(gw.url(asset)).send().await.expect("request");
        assert_eq!(response.status(), 200, "{asset}");
        assert_eq!(response.headers()["content-type"], content_type, "{asset}");
        assert!(
            response.bytes().await.expect("bytes").len() > 500,
            "{asset}"
        );
    }
}

/// The docs page in Debian's Chromium (headless, through playwright-core): Swagger UI
/// renders every operation from the embedded assets, with no error in the console. The
/// screenshot goes to `target/screenshots/docs.png` for a person to look at.
#[tokio::test]
async fn docs_page_renders_every_operation_in_a_real_browser() {
    let gw = Gateway::start().await;
    let shots = screenshots();
    let shot = shots.join("docs.png");
    let seen = run_browser(
        "browser.mjs",
        &[
            &gw.url("/docs"),
            ".opblock-summary-path",
            shot.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(seen["title"], "toolgate API");
    let paths: Vec<&str> = seen["texts"]
        .as_array()
        .expect("texts")
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    let document: serde_json::Value = serde_json::from_str(CHECKED_IN).expect("openapi");
    let operations: usize = document["paths"]
        .as_object()
        .expect("paths")
        .values()
        .map(|p| p.as_object().map_or(0, |o| o.len()))
        .sum();
    assert_eq!(paths.len(), operations, "{paths:?}");
    assert!(
        paths.iter().any(|p| p.contains("/v1/audit/verify")),
        "{paths:?}"
    );
    assert_eq!(seen["errors"], serde_json::json!([]), "{seen}");
    assert!(shots.join("docs.png").exists());
}
