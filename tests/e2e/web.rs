//! `web_fetch` and `web_search` against servers on loopback: main-content extraction,
//! charsets and the byte cap, and the SSRF walls (loopback in its disguises, names
//! resolving to loopback, redirects to private addresses, plain HTTP).

use axum::Router;
use axum::http::header;
use axum::response::{IntoResponse, Redirect};
use axum::routing::get;
use serde_json::{Value, json};
use toolgate_e2e::Gateway;

const ARTICLE: &str = r#"<!doctype html><html><head><title>Launch notes</title></head><body>
<nav><a href="/">Home</a> | <a href="/about">About</a> | <a href="/login">Log in</a></nav>
<article><h1>Launch notes</h1>
<p>The launch moved to Tuesday because the final integration tests needed another day of soak time on the staging cluster.</p>
<p>Everyone on the release rota should check the runbook before Monday evening, and confirm their pager works.</p>
<p>Rollback stays manual for this release; the automated path ships with the next one, once it has been rehearsed twice.</p>
</article><footer>Copyright 2026 Example Corp. All rights reserved.</footer></body></html>"#;

/// A web server on `ip` (any 127.x address); returns its base URL.
async fn site(ip: &str, target: Option<String>) -> String {
    let redirect_to = target.unwrap_or_default();
    let app = Router::new()
        .route("/article", get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], ARTICLE) }))
        .route(
            "/latin1",
            get(|| async { ([(header::CONTENT_TYPE, "text/plain; charset=iso-8859-1")], b"caf\xe9 cr\xe8me".to_vec()) }),
        )
        .route("/big", get(|| async { ([(header::CONTENT_TYPE, "text/plain")], "x".repeat(100_000)) }))
        .route("/image", get(|| async { ([(header::CONTENT_TYPE, "image/png")], vec![0u8; 16]) }))
        .route("/redirect", get(move || async move { Redirect::temporary(&redirect_to).into_response() }))
        .route(
            "/search",
            get(|q: axum::extract::Query<std::collections::HashMap<String, String>>| async move {
                axum::Json(json!({
                    "query": q.0.get("q"),
                    "results": [
                        {"title": "Toolgate", "url": "https://example.org/toolgate", "content": format!("about {}", q.0.get("q").cloned().unwrap_or_default())},
                        {"title": "Second", "url": "https://example.org/2", "content": "more"}
                    ]
                }))
            }),
        );
    let listener = tokio::net::TcpListener::bind(format!("{ip}:0"))
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

async fn fetch(gw: &Gateway, url: &str) -> (u16, Value) {
    let (status, _, body) = gw
        .invoke("web_fetch", json!({"arguments": {"url": url}}))
        .await;
    (status, body)
}

#[tokio::test]
async fn fetches_the_main_content_decodes_charsets_and_caps_the_size() {
    let base = site("127.0.0.1", None).await;
    let gw = Gateway::start_with(|c| {
        c.tools.web_fetch.allow_http = true;
        c.tools.web_fetch.allowed_networks = vec!["127.0.0.1/32".into()];
        c.tools.web_fetch.max_bytes = 10_000;
    })
    .await;
    let (status, body) = fetch(&gw, &format!("{base}/article")).await;
    assert_eq!(status, 200, "{body}");
    let text = body["content"][0]["text"].as_str().expect("text");
    assert!(text.contains("The launch moved to Tuesday"), "{text}");
    assert!(
        !text.contains("Log in") && !text.contains("Copyright"),
        "boilerplate kept: {text}"
    );
    assert_eq!(body["structured"]["title"], "Launch notes");

    let (status, body) = fetch(&gw, &format!("{base}/latin1")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], "café crème");

    let (status, body) = fetch(&gw, &format!("{base}/big")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["structured"]["truncated"], true);
    assert_eq!(body["structured"]["bytes"], 10_000);

    let (status, body) = fetch(&gw, &format!("{base}/image")).await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn private_addresses_are_refused_in_every_disguise() {
    let loopback = site("127.0.0.1", None).await;
    let port = loopback.rsplit(':').next().expect("port").to_owned();
    // A site that is allowed (127.0.0.2) redirects to one that is not (127.0.0.1).
    let relay = site("127.0.0.2", Some(format!("{loopback}/article"))).await;
    let gw = Gateway::start_with(|c| {
        c.tools.web_fetch.allow_http = true;
        c.tools.web_fetch.allowed_networks = vec!["127.0.0.2/32".into()];
    })
    .await;
    for url in [
        format!("http://127.0.0.1:{port}/article"),
        format!("http://[::ffff:127.0.0.1]:{port}/article"),
        format!("http://2130706433:{port}/article"),
        format!("http://0x7f.1:{port}/article"),
        format!("http://localhost:{port}/article"),
        format!("http://[::1]:{port}/article"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://0.0.0.0/".to_owned(),
        format!("{relay}/redirect"),
        "file:///etc/passwd".to_owned(),
    ] {
        let (status, body) = fetch(&gw, &url).await;
        assert_eq!(status, 400, "{url} was not refused: {body}");
        assert_eq!(
            body["type"], "urn:toolgate:error:invalid_arguments",
            "{url}: {body}"
        );
    }
    // The allowed site itself is reachable.
    let (status, body) = fetch(&gw, &format!("{relay}/article")).await;
    assert_eq!(status, 200, "{body}");

    // Without allow_http, plain HTTP is refused whatever the address.
    let strict = Gateway::start_with(|c| {
        c.tools.web_fetch.allowed_networks = vec!["127.0.0.2/32".into()];
    })
    .await;
    let (status, body) = fetch(&strict, &format!("{relay}/article")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("plain HTTP"),
        "{body}"
    );
}

#[tokio::test]
async fn web_search_queries_the_configured_searxng_api_and_is_absent_otherwise() {
    let base = site("127.0.0.1", None).await;
    let gw = Gateway::start_with(|c| c.tools.web_search.url = Some(format!("{base}/search"))).await;
    let (status, _, body) = gw
        .invoke(
            "web_search",
            json!({"arguments": {"query": "tool gateways", "count": 1}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["structured"]["results"],
        json!([{"title": "Toolgate", "url": "https://example.org/toolgate", "snippet": "about tool gateways"}])
    );
    let plain = Gateway::start().await;
    let (status, _, _) = plain.get("/v1/tools/web_search").await;
    assert_eq!(status, 404);
}
