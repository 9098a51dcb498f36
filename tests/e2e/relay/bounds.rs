//! What a chatty upstream may ask of a call's client: relayed at a bounded rate, and at
//! most eight requests waiting on the client at once.

use super::*;

/// What an upstream says during a call reaches the caller at a bounded rate: at most
/// 100 log messages and 20 progress reports a call a second, the dropped log messages
/// counted in one warning before the result, and the newest progress report always
/// sent. Before, one call's progress reached its client at 54,000 a second.
#[tokio::test]
async fn a_call_relays_what_its_upstream_says_at_a_bounded_rate() {
    let gw = chatter().await;
    const SAID: u64 = 1000;
    let started = std::time::Instant::now();
    let messages = post_stateless(
        &gw,
        "stateless",
        1,
        "tools/call",
        json!({"name": "chatter__chatter", "arguments": {"logs": SAID},
               "_meta": {"progressToken": "p-1",
                         "io.modelcontextprotocol/logLevel": "debug"}}),
    )
    .await;
    // The call's seconds, each with its own budget.
    let seconds = started.elapsed().as_secs() + 1;
    let (result, before) = messages.split_last().expect("a response");
    assert_eq!(
        result["result"]["content"][0]["text"],
        format!("said {SAID}"),
        "{result}"
    );
    let relayed = before
        .iter()
        .filter(|m| m["method"] == "notifications/message" && m["params"]["logger"].is_null())
        .count() as u64;
    assert!(
        relayed <= 100 * seconds && relayed > 0,
        "{relayed} log messages relayed in {seconds} s"
    );
    let warned: Vec<&Value> = before
        .iter()
        .filter(|m| m["params"]["logger"] == "toolgate")
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert_eq!(
        warned[0]["params"]["data"],
        format!(
            "toolgate did not relay {} log messages of this call: it relays at most 100 a second, and queues at most 64 for a client that is behind",
            SAID - relayed
        )
    );
    let progress: Vec<f64> = before
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .filter_map(|m| m["params"]["progress"].as_f64())
        .collect();
    assert!(
        progress.len() as u64 <= 20 * seconds + 1,
        "{} progress reports in {seconds} s",
        progress.len()
    );
    assert!(progress.is_sorted(), "{progress:?}");
    assert_eq!(progress.last(), Some(&(SAID as f64)), "the newest went out");
    gw.stop().await;
}

/// An upstream asking its caller's client for many samplings at once has at most 8 of
/// them waiting on the client; the rest are refused at once. Before, every one went to
/// the client, each a task waiting on a person or a model.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_has_at_most_eight_requests_waiting_on_its_client() {
    let gw = chatter().await;
    let (alice, _) = client(&gw, "alice", Duration::from_millis(300)).await;
    let done = alice
        .call_tool(call("chatter__chatter", json!({"samples": 50})))
        .await
        .expect("call");
    let said = text(&done);
    let counts: Vec<u32> = said
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .collect();
    let [answered, refused] = counts[..] else {
        panic!("{said}");
    };
    assert!(answered > 0 && answered <= 8, "{said}");
    assert_eq!(answered + refused, 50, "{said}");
    alice.cancel().await.expect("close");
    gw.stop().await;
}

/// A gateway relaying to its one call in flight what `tests/clients/chatter_server.py`
/// says, once that upstream's tool is listed.
async fn chatter() -> Gateway {
    let dir = sdk_clients();
    let gw = Gateway::start_with(|c| {
        c.upstreams = vec![
            serde_json::from_value(json!({
                "name": "chatter",
                "command": "python3",
                "args": [dir.join("chatter_server.py")],
                "relay_unattributed": true,
            }))
            .expect("an upstream entry"),
        ];
    })
    .await;
    listed_once(&gw, "chatter__chatter").await;
    gw
}
