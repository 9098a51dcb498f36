//! Work that outlives its request stops standing with the API key it was asked with:
//! a call waiting for approval is not approved once the key is revoked, and an agent run
//! started with it is cancelled, saying why. (Before: revoking a key stopped its
//! requests and streams, but an approver could still release its held call, and its runs
//! went on calling tools for as long as they ran.)

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_e2e::llm::{MockLlm, Reply, Wire, says};
use toolgate_e2e::{Gateway, client_with_key, read};

/// A gateway whose provider `llm` is `mock`, holding every call for approval, with a
/// `worker` key (whose calls are held) and a `reviewer` client.
async fn gateway(mock: &MockLlm) -> (Gateway, (String, reqwest::Client), reqwest::Client) {
    let base = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        let mut llm = crate::agents::provider(Wire::Openai, &base);
        // A slow reply is waited for, not retried: a run ends only when it is cancelled.
        llm.timeout_secs = 60;
        c.providers.insert("llm".into(), llm);
    })
    .await;
    gw.put_policy(json!({"level": 9})).await;
    let (worker, secret) = gw
        .create_key("worker", &["tools:invoke", "agents:run"])
        .await;
    let (_, reviewer) = gw.create_key("reviewer", &["approvals:decide"]).await;
    (
        gw,
        (worker, client_with_key(&secret)),
        client_with_key(&reviewer),
    )
}

async fn decide(
    gw: &Gateway,
    reviewer: &reqwest::Client,
    approval: &str,
    decision: &str,
) -> (u16, Value) {
    let (status, _, body) = read(
        reviewer
            .post(gw.url(&format!("/v1/approvals/{approval}")))
            .json(&json!({"decision": decision, "reason": "checked"}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    (status, body)
}

/// Creates agent `agent` as the admin and starts a run of it as `worker`: the run's id.
async fn start_run(gw: &Gateway, worker: &reqwest::Client, agent: Value, input: &str) -> String {
    let (status, _, agent) = gw.post("/v1/agents", agent).await;
    assert_eq!(status, 201, "{agent}");
    let (status, _, run) = read(
        worker
            .post(gw.url(&format!(
                "/v1/agents/{}/runs",
                agent["id"].as_str().expect("id")
            )))
            .json(&json!({"input": input}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    run["id"].as_str().expect("run").to_owned()
}

fn cancelled_as_revoked(run: &Value) {
    assert_eq!(run["status"], "cancelled", "{run}");
    let error = run["error"].as_str().unwrap_or("");
    assert!(error.contains("was revoked"), "{run}");
}

/// The run's view once its status is none of `passing`.
async fn run_past(gw: &Gateway, run: &str, passing: &[&str], tries: usize) -> Value {
    let mut view = Value::Null;
    for _ in 0..tries {
        view = gw.get(&format!("/v1/runs/{run}")).await.2;
        if !passing.iter().any(|p| view["status"] == *p) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    view
}

#[tokio::test]
async fn a_held_call_or_paused_run_of_a_revoked_key_is_not_released() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![Reply::ok(says::openai_calls(&[(
            "c1",
            "echo",
            r#"{"message":"from the run"}"#,
        )]))],
    )
    .await;
    let (gw, (key, worker), reviewer) = gateway(&mock).await;
    let (status, _, held) = read(
        worker
            .post(gw.url("/v1/tools/echo/invoke"))
            .json(&json!({"arguments": {"message": "held"}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 202, "{held}");
    let call = held["approval_id"].as_str().expect("approval").to_owned();
    let run = start_run(
        &gw,
        &worker,
        json!({"name": "echoer", "provider": "llm", "model": "m", "tools": ["echo"]}),
        "echo something",
    )
    .await;
    let paused = run_past(&gw, &run, &["running"], 100).await;
    assert_eq!(paused["status"], "awaiting_approval", "{paused}");
    let asked = paused["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .find(|s| s["type"] == "approval_requested")
        .expect("an approval step")["approval_id"]
        .as_str()
        .expect("id")
        .to_owned();

    gw.revoke_key(&key).await;
    for approval in [&call, &asked] {
        let (status, problem) = decide(&gw, &reviewer, approval, "approve").await;
        assert_eq!(status, 403, "{problem}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap_or("")
                .contains("was revoked"),
            "{problem}"
        );
    }
    // Denying is still allowed; the run it lets go on ends at once, cancelled, saying
    // why, without asking the model again.
    let (status, body) = decide(&gw, &reviewer, &asked, "deny").await;
    assert_eq!(status, 200, "{body}");
    let ended = run_past(&gw, &run, &["awaiting_approval", "running"], 100).await;
    cancelled_as_revoked(&ended);
    assert_eq!(mock.requests().len(), 1, "the model was asked again");
}

/// A run going when its key is revoked is cancelled within one lease renewal (10 s).
#[tokio::test]
async fn a_run_going_when_its_key_is_revoked_is_cancelled() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![Reply::ok(says::openai_text("too late")).delayed(Duration::from_secs(30))],
    )
    .await;
    let (gw, (key, worker), _) = gateway(&mock).await;
    let run = start_run(
        &gw,
        &worker,
        json!({"name": "slow", "provider": "llm", "model": "m"}),
        "take your time",
    )
    .await;
    gw.revoke_key(&key).await;
    let ended = run_past(&gw, &run, &["running"], 250).await;
    cancelled_as_revoked(&ended);
}
