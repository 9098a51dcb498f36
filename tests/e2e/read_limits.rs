//! REST reads per principal (`limits.principal_reads_per_minute`): a principal past its
//! reads is refused with 429 and `Retry-After` and counted; another principal of the
//! same tenant reads on, its calls are apart, and a credential that does not hold is
//! still refused as one.

use serde_json::json;
use toolgate_e2e::{Gateway, client_with_key};

use crate::rate_limits::{metrics, rate_limited, total};

#[tokio::test]
async fn a_principal_past_its_reads_is_refused_and_counted_and_nobody_else_is() {
    let gw = Gateway::start_with(|c| c.limits.principal_reads_per_minute = Some(5)).await;
    let (_, reader) = gw.create_key("reader", &["tools:invoke"]).await;
    let (_, other) = gw.create_key("other", &["tools:invoke"]).await;
    let (reader, other) = (client_with_key(&reader), client_with_key(&other));
    let tools = |client: &reqwest::Client| client.get(gw.url("/v1/tools")).send();
    for _ in 0..5 {
        assert_eq!(tools(&reader).await.expect("request").status(), 200);
    }
    let (wait, _) = rate_limited(tools(&reader).await.expect("request")).await;
    assert!((1..=12).contains(&wait), "one read every 12 s: {wait}");

    // Another principal of the tenant reads on; the reader's calls are not reads.
    assert_eq!(tools(&other).await.expect("request").status(), 200);
    let called = reader
        .post(gw.url("/v1/tools/echo/invoke"))
        .json(&json!({"arguments": {"message": "still calling"}}))
        .send()
        .await
        .expect("request");
    assert_eq!(called.status(), 200);
    // A key that does not hold is refused as such, not counted as a read.
    let unknown = client_with_key("tg_not_a_key_of_anyone_0000000000000000");
    assert_eq!(tools(&unknown).await.expect("request").status(), 401);

    let exposition = metrics(&gw).await;
    assert_eq!(
        total(
            &exposition,
            "toolgate_admission_rejections_total",
            &[("toolgate_limit", "reads"), ("toolgate_adapter", "rest")]
        ),
        1.0,
        "{exposition}"
    );
    gw.stop().await;
}
