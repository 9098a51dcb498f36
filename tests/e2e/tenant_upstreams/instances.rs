//! Gateway instances on one Postgres following each other's upstream changes.

use super::*;

/// Two instances on one Postgres: an upstream added through one is served by the other
/// within the sync period, and its removal reaches both.
#[tokio::test]
async fn instances_on_one_postgres_follow_each_others_changes() {
    let upstream = Gateway::start().await;
    let db = PgDb::create().await;
    let url = db.url.clone();
    let first = Gateway::start_with(|c| {
        loopback(c);
        c.database.url = Some(Secret::new(url.clone()));
    })
    .await;
    let key_file = first.data.path().join("admin-api-key");
    let second = Gateway::start_with(|c| {
        loopback(c);
        c.database.url = Some(Secret::new(url.clone()));
        c.auth.admin_key_file = Some(key_file);
    })
    .await;
    let (status, body) = send(
        &first.http,
        reqwest::Method::POST,
        first.url("/v1/upstreams"),
        Some(json!({"name": "peer", "url": upstream.url("/mcp"), "bearer": upstream.admin_key})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    until_tools(
        &second.http,
        &second,
        "the second instance serves it",
        |n| n.iter().any(|t| t == "peer__echo"),
    )
    .await;
    let (status, _, done) = second
        .invoke("peer__echo", json!({"arguments": {"message": "elsewhere"}}))
        .await;
    assert_eq!(status, 200, "{done}");

    let (status, body) = send(
        &second.http,
        reqwest::Method::DELETE,
        second.url("/v1/upstreams/peer"),
        None,
    )
    .await;
    assert_eq!(status, 204, "{body}");
    until_tools(&first.http, &first, "the first instance drops it", |n| {
        !n.iter().any(|t| t.starts_with("peer__"))
    })
    .await;
    first.stop().await;
    second.stop().await;
    upstream.stop().await;
    db.drop_db().await;
}
