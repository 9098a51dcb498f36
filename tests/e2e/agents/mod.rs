//! Agents end to end: runs over REST against scripted provider servers speaking each
//! wire format, with the real tools, the real store and the audit log.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_e2e::llm::{MockLlm, Reply, Wire, error_body, says};
use toolgate_e2e::{Gateway, client_with_key, read};
use toolgate_server::config::ProviderEntry;

mod failures;
mod lifecycle;
mod resumption;
mod streaming;
mod wires;

pub(crate) fn provider(kind: Wire, base: &str) -> ProviderEntry {
    let kind = match kind {
        Wire::Openai => "openai",
        Wire::Anthropic => "anthropic",
        Wire::Gemini => "gemini",
        Wire::Ollama => "ollama",
    };
    let entry = json!({
        "kind": kind, "base_url": base, "api_key": "test-secret-key",
        "timeout_secs": 5, "max_retries": 2, "retry_base_ms": 10, "retry_max_secs": 2
    });
    serde_json::from_value(entry).expect("provider entry")
}

/// A gateway whose provider `llm` is `mock`, with `notes.txt` in the workspace.
async fn gateway(mock: &MockLlm, wire: Wire) -> Gateway {
    let base = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers.insert("llm".into(), provider(wire, &base));
    })
    .await;
    std::fs::write(
        gw.workspace().join("notes.txt"),
        "the launch is on tuesday\n",
    )
    .expect("write");
    gw
}

pub(crate) async fn create_agent(gw: &Gateway, body: Value) -> String {
    let (status, _, agent) = gw.post("/v1/agents", body).await;
    assert_eq!(status, 201, "{agent}");
    agent["id"].as_str().expect("id").to_owned()
}

/// Starts a run and waits for its end.
async fn run(gw: &Gateway, agent: &str, input: &str) -> Value {
    let (status, _, run) = gw
        .post(
            &format!("/v1/agents/{agent}/runs"),
            json!({"input": input, "wait_secs": 60}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    run
}

/// A model name the fake of `wire` answers to (Gemini's is in its path).
fn model_for(wire: Wire) -> &'static str {
    if wire == Wire::Gemini {
        "gemini-test"
    } else {
        "m"
    }
}

/// Starts a run without waiting and follows it over SSE to its end: (run id, the stream).
async fn follow(gw: &Gateway, agent: &str, input: &str) -> (String, String) {
    let (status, _, started) = gw
        .post(&format!("/v1/agents/{agent}/runs"), json!({"input": input}))
        .await;
    assert_eq!(status, 201, "{started}");
    let run_id = started["id"].as_str().expect("run id").to_owned();
    let sse = gw
        .http
        .get(gw.url(&format!("/v1/runs/{run_id}/events")))
        .send()
        .await
        .expect("sse");
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let text = tokio::time::timeout(Duration::from_secs(30), sse.text())
        .await
        .expect("the stream ends after run_finished")
        .expect("body");
    (run_id, text)
}

/// A run's steps stream resumed after step `after`, to its end.
async fn steps_after(gw: &Gateway, run_id: &str, after: i64) -> String {
    gw.http
        .get(gw.url(&format!("/v1/runs/{run_id}/events")))
        .header("last-event-id", after.to_string())
        .send()
        .await
        .expect("sse")
        .text()
        .await
        .expect("body")
}

/// The `id`s of an SSE stream's events, in order.
fn event_ids(text: &str) -> Vec<i64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|i| i.parse().expect("numeric id"))
        .collect()
}

fn steps<'a>(run: &'a Value, kind: &str) -> Vec<&'a Value> {
    run["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["type"] == kind)
        .collect()
}
