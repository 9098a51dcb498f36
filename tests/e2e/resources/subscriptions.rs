//! Resource subscriptions shared upstream and ended with their sessions, and a listen stream hearing updates and list changes.

use super::*;

/// A relayed read within the upstream's deadline, and `resources/subscribe` through the
/// gateway: one upstream subscription per URI however many sessions hold it, each update
/// reaching exactly the sessions that hold it, made again on a new upstream connection,
/// given back when the last one unsubscribes or its session ends.
#[tokio::test]
#[allow(deprecated)] // resources/subscribe: what clients before 2026-07-28 use
async fn resource_subscriptions_are_shared_upstream_and_end_with_their_sessions() {
    let dir = sdk_clients();
    let fixture: toolgate_server::config::UpstreamEntry = serde_json::from_value(json!({
        "name": "fixture",
        "prefix": "",
        "command": dir.join(".venv/bin/python"),
        "args": [dir.join("conformance_fixture.py")],
        // Short, for the slow read below; long enough that the fixture's quick tools
        // answer within it on a loaded machine.
        "timeout_secs": 2,
    }))
    .expect("an upstream entry");
    let gw = Gateway::start_with(|c| c.upstreams = vec![fixture]).await;
    crate::upstream::listed_once(&gw, "test_update_resource").await;
    assert!(touch(&gw, WATCHED).await.contains("0 subscriber"));

    let (one, mut one_heard) = subscriber(&gw, &gw.admin_key).await;
    // A relayed read keeps the upstream's deadline (2 s here; the resource takes 5 s).
    let started = std::time::Instant::now();
    let slow = one
        .read_resource(ReadResourceRequestParams::new("test://slow"))
        .await;
    assert!(
        matches!(&slow, Err(ServiceError::McpError(e)) if e.message.contains("within 2 s")),
        "{slow:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_millis(4500));
    let (two, mut two_heard) = subscriber(&gw, &gw.admin_key).await;
    let subscribe = || rmcp::model::SubscribeRequestParams::new(WATCHED);
    one.subscribe(subscribe()).await.expect("one subscribes");
    two.subscribe(subscribe()).await.expect("two subscribes");
    assert!(
        touch(&gw, WATCHED).await.contains("1 subscriber"),
        "one upstream subscription"
    );
    assert_eq!(
        heard_within(&mut one_heard, 5000).await.as_deref(),
        Some(WATCHED)
    );
    assert_eq!(
        heard_within(&mut two_heard, 5000).await.as_deref(),
        Some(WATCHED)
    );

    // One unsubscribes: only the other hears, and the upstream subscription stays.
    one.unsubscribe(rmcp::model::UnsubscribeRequestParams::new(WATCHED))
        .await
        .expect("one unsubscribes");
    let told = touch(&gw, WATCHED).await;
    assert!(told.contains("1 subscriber"), "{told}");
    let process = process_of(&told).to_owned();
    assert_eq!(
        heard_within(&mut two_heard, 5000).await.as_deref(),
        Some(WATCHED)
    );
    assert_eq!(heard_within(&mut one_heard, 300).await, None);

    // The upstream's process ends: on the new connection the gateway subscribes again
    // to what sessions still hold.
    let (status, _, done) = gw.invoke("fixture_exit", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    // The old process answers for another 50 ms: wait for the new one's word.
    loop {
        let told = until_told(&gw, "1 subscriber").await;
        if process_of(&told) != process {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        heard_within(&mut two_heard, 5000).await.as_deref(),
        Some(WATCHED)
    );

    // The last holder's session ends: the gateway unsubscribes upstream.
    let _ = two.cancel().await;
    until_told(&gw, "0 subscriber").await;

    // The upstream's resource list changes: the session hears it, and lists the new one.
    let added = "test://added-later";
    let (status, _, done) = gw
        .invoke("test_add_resource", json!({"arguments": {"uri": added}}))
        .await;
    assert_eq!(status, 200, "{done}");
    // (News of the reconnection's lists may still be queued ahead of it.)
    let mut resources = Vec::new();
    for _ in 0..5 {
        assert_eq!(
            heard_within(&mut one_heard, 5000).await.as_deref(),
            Some("resources/list_changed")
        );
        resources = one.list_all_resources().await.expect("resources/list");
        if resources.iter().any(|r| r.uri == added) {
            break;
        }
    }
    assert!(resources.iter().any(|r| r.uri == added), "{resources:?}");
    let _ = one.cancel().await;
    gw.stop().await;
}

/// The next notification on a listen stream, within 5 s.
async fn next(stream: &mut rmcp::service::Subscription) -> rmcp::model::ServerNotification {
    tokio::time::timeout(std::time::Duration::from_secs(5), stream.next())
        .await
        .expect("a notification within 5 s")
        .expect("the stream")
        .expect("not ended")
}

/// Protocol 2026-07-28: `subscriptions/listen` carries the same resource updates, and tool
/// and resource list changes; the stream's end gives its upstream subscriptions back.
#[tokio::test]
async fn a_listen_stream_hears_resource_updates_and_list_changes() {
    let dir = sdk_clients();
    let python = dir.join(".venv/bin/python");
    let upstreams: Vec<toolgate_server::config::UpstreamEntry> = serde_json::from_value(json!([
        {"name": "fixture", "prefix": "", "command": python, "args": [dir.join("conformance_fixture.py")]},
        {"name": "fx", "command": python, "args": [dir.join("fixture_server.py")]},
    ]))
    .expect("upstream entries");
    let gw = Gateway::start_with(|c| c.upstreams = upstreams).await;
    crate::upstream::listed_once(&gw, "test_update_resource").await;
    crate::upstream::listed_once(&gw, "fx__grow").await;

    let client = gw.mcp_2026(&gw.admin_key).await;
    // The upstream's tools are registered before its resources are filed: a listen in
    // between names URIs no upstream serves yet, subscribed only once they are (the test
    // below), not before the acknowledgement this test counts on. Wait for them too.
    until_listed(&client, WATCHED).await;
    // The watched resource and three from the fixture's template: the upstream is asked
    // for all four before the stream is acknowledged, several at a time.
    let watched: Vec<String> = std::iter::once(WATCHED.to_owned())
        .chain((1..=3).map(|n| format!("test://template/{n}/data")))
        .collect();
    let filter = rmcp::model::SubscriptionFilter::builder()
        .tools_list_changed()
        .resources_list_changed()
        .resource_subscriptions(&watched)
        .build();
    let mut stream = client
        .peer()
        .listen(filter)
        .await
        .expect("subscriptions/listen");
    assert_eq!(
        stream.acknowledged().resource_subscriptions.as_deref(),
        Some(&watched[..])
    );
    let (status, _, most) = gw
        .invoke("test_most_subscribing_at_once", json!({"arguments": {}}))
        .await;
    assert_eq!(status, 200, "{most}");
    let most: u32 = most["content"][0]["text"]
        .as_str()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count: {most}"));
    assert!(
        most >= 2,
        "the upstream was asked one subscription at a time ({most} at most)"
    );
    assert!(touch(&gw, WATCHED).await.contains("1 subscriber"));
    let heard = serde_json::to_value(next(&mut stream).await).expect("json");
    assert_eq!(
        heard["method"], "notifications/resources/updated",
        "{heard}"
    );
    assert_eq!(heard["params"]["uri"], WATCHED, "{heard}");

    let (status, _, done) = gw.invoke("fx__grow", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{done}");
    let heard = serde_json::to_value(next(&mut stream).await).expect("json");
    assert_eq!(
        heard["method"], "notifications/tools/list_changed",
        "{heard}"
    );

    let (status, _, done) = gw
        .invoke(
            "test_add_resource",
            json!({"arguments": {"uri": "test://added"}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    // The upstream's tools are listed again too, unchanged: no news of them.
    let heard = serde_json::to_value(next(&mut stream).await).expect("json");
    assert_eq!(
        heard["method"], "notifications/resources/list_changed",
        "{heard}"
    );

    // The stream ends: the gateway unsubscribes upstream.
    drop(stream);
    until_told(&gw, "0 subscriber").await;
    let _ = client.cancel().await;
    gw.stop().await;
}

/// A listen stream naming a resource no upstream lists yet (an upstream still connecting
/// after a restart, or a resource added later) is subscribed upstream once one lists it,
/// and hears its updates: before, the URI was acknowledged and never updated.
#[tokio::test]
async fn a_listen_stream_subscribes_to_a_resource_once_an_upstream_lists_it() {
    let gw = with_fixture().await;
    let client = gw.mcp_2026(&gw.admin_key).await;
    let late = "test://late";
    let filter = rmcp::model::SubscriptionFilter::builder()
        .resource_subscriptions([late.to_owned()])
        .build();
    let mut stream = client
        .peer()
        .listen(filter)
        .await
        .expect("subscriptions/listen");
    assert!(touch(&gw, late).await.contains("0 subscriber"));

    let (status, _, done) = gw
        .invoke("test_add_resource", json!({"arguments": {"uri": late}}))
        .await;
    assert_eq!(status, 200, "{done}");
    until_told_of(&gw, late, "1 subscriber").await;
    let heard = serde_json::to_value(next(&mut stream).await).expect("json");
    assert_eq!(
        heard["method"], "notifications/resources/updated",
        "{heard}"
    );
    assert_eq!(heard["params"]["uri"], late, "{heard}");

    drop(stream);
    until_told_of(&gw, late, "0 subscriber").await;
    let _ = client.cancel().await;
    gw.stop().await;
}

/// One session, or one listen stream, watches at most 1,000 resources: an upstream's
/// template names URIs without end, and each one watched is an upstream subscription the
/// gateway holds. Past the bound the caller gets a JSON-RPC invalid-params error; a URI
/// already held may be subscribed to again.
#[tokio::test]
#[allow(deprecated)] // resources/subscribe: what clients before 2026-07-28 use
async fn a_session_or_a_listen_stream_watches_at_most_a_thousand_resources() {
    let gw = with_chatter().await;
    let item = |n: usize| format!("chatter://item/{n}");

    let client = gw.mcp_2026(&gw.admin_key).await;
    for _ in 0..300 {
        let templates = client
            .peer()
            .list_all_resource_templates()
            .await
            .expect("templates");
        if !templates.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let listen = |n: usize| {
        rmcp::model::SubscriptionFilter::builder()
            .resource_subscriptions((0..n).map(item))
            .build()
    };
    let refused = client.peer().listen(listen(1001)).await;
    let Err(refused) = refused else {
        panic!("1,001 resources were not refused");
    };
    let refused = format!("{refused:?}");
    assert!(refused.contains("at most 1000 resources"), "{refused}");
    let stream = client
        .peer()
        .listen(listen(1000))
        .await
        .expect("1,000 watched");
    drop(stream);
    let _ = client.cancel().await;

    let (session, _heard) = subscriber(&gw, &gw.admin_key).await;
    let subscribe = |uri: String| session.subscribe(rmcp::model::SubscribeRequestParams::new(uri));
    for n in 0..1000 {
        subscribe(item(n)).await.expect("subscribed");
    }
    let Err(ServiceError::McpError(refused)) = subscribe(item(1000)).await else {
        panic!("the 1,001st subscription was not refused");
    };
    assert_eq!(
        refused.code,
        rmcp::model::ErrorCode::INVALID_PARAMS,
        "{refused:?}"
    );
    assert!(refused.message.contains("at most 1000"), "{refused:?}");
    subscribe(item(7))
        .await
        .expect("one held already may be asked again");
    session
        .unsubscribe(rmcp::model::UnsubscribeRequestParams::new(item(7)))
        .await
        .expect("unsubscribed");
    subscribe(item(1000)).await.expect("a place freed");
    let _ = session.cancel().await;
    gw.stop().await;
}

/// Waits (15 s at most) until `client` is shown resource `uri`: an upstream's tools are
/// registered before its resources are filed.
async fn until_listed(
    client: &rmcp::service::RunningService<rmcp::RoleClient, rmcp::model::ClientConfig>,
    uri: &str,
) {
    for _ in 0..300 {
        let listed = client
            .peer()
            .list_all_resources()
            .await
            .expect("resources/list");
        if listed.iter().any(|r| r.uri == uri) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A gateway federating `tests/clients/conformance_fixture.py` (no prefix), its tools
/// listed.
async fn with_fixture() -> Gateway {
    let dir = sdk_clients();
    let fixture: toolgate_server::config::UpstreamEntry = serde_json::from_value(json!({
        "name": "fixture",
        "prefix": "",
        "command": dir.join(".venv/bin/python"),
        "args": [dir.join("conformance_fixture.py")],
    }))
    .expect("an upstream entry");
    let gw = Gateway::start_with(|c| c.upstreams = vec![fixture]).await;
    crate::upstream::listed_once(&gw, "test_add_resource").await;
    gw
}

/// A gateway federating `tests/clients/chatter_server.py` as `chatter`, its tools listed.
async fn with_chatter() -> Gateway {
    let chatter: toolgate_server::config::UpstreamEntry = serde_json::from_value(json!({
        "name": "chatter",
        "command": "python3",
        "args": [sdk_clients().join("chatter_server.py")],
    }))
    .expect("an upstream entry");
    let gw = Gateway::start_with(|c| c.upstreams = vec![chatter]).await;
    crate::upstream::listed_once(&gw, "chatter__chatter").await;
    gw
}

/// An upstream announcing updates to a held resource without pause reaches the holding
/// session at most 20 times a second, the rest coalesced into the next second: before,
/// every one the gateway read (2,000 a second, its budget for an upstream) went on to
/// the client.
#[tokio::test]
#[allow(deprecated)] // resources/subscribe: what clients before 2026-07-28 use
async fn a_flood_of_updates_to_a_held_resource_reaches_its_holder_at_a_bounded_rate() {
    let gw = with_chatter().await;
    let (session, mut heard) = subscriber(&gw, &gw.admin_key).await;
    session
        .subscribe(rmcp::model::SubscribeRequestParams::new("chatter://hot"))
        .await
        .expect("subscribes");
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), heard.recv())
        .await
        .expect("an update within 10 s");
    assert_eq!(first.as_deref(), Some("chatter://hot"));
    let started = std::time::Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let mut updates = 0;
    while let Ok(uri) = heard.try_recv() {
        assert_eq!(uri, "chatter://hot");
        updates += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let bound = 20.0 * (seconds + 1.0);
    assert!(
        f64::from(updates) <= bound,
        "{updates} updates in {seconds:.1} s (at most {bound})"
    );
    assert!(updates > 0, "the updates stopped");
    let _ = session.cancel().await;
    gw.stop().await;
}

/// A client that gives up on a listen while the `/mcp` edge is still subscribing upstream
/// (the fixture answers `resources/subscribe` in 200 ms) leaves no upstream subscription
/// behind: nobody would ever unsubscribe it.
#[tokio::test]
async fn a_listen_given_up_while_subscribing_leaves_no_upstream_subscription() {
    let gw = with_fixture().await;
    let client = gw.mcp_2026(&gw.admin_key).await;
    until_listed(&client, WATCHED).await;
    let _ = client.cancel().await;
    let listen = json!({
        "jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {
            "notifications": {"resourceSubscriptions": [WATCHED]},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
        },
    });
    let gave_up = gw
        .http
        .post(gw.url("/mcp"))
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .json(&listen)
        .timeout(std::time::Duration::from_millis(60))
        .send()
        .await;
    assert!(gave_up.is_err(), "answered within 60 ms: {gave_up:?}");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let told = touch(&gw, WATCHED).await;
    assert!(
        told.contains("0 subscriber"),
        "an upstream subscription nobody holds: {told}"
    );
    gw.stop().await;
}
