//! Agents end to end: runs over REST against scripted provider servers speaking each
//! wire format, with the real tools, the real store and the audit log.

use std::time::Duration;

use serde_json::{Value, json};
use toolgate_e2e::llm::{MockLlm, Reply, Wire, error_body, says};
use toolgate_e2e::{Gateway, client_with_key, read};
use toolgate_server::config::ProviderEntry;

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

async fn create_agent(gw: &Gateway, body: Value) -> String {
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

fn steps<'a>(run: &'a Value, kind: &str) -> Vec<&'a Value> {
    run["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter(|s| s["type"] == kind)
        .collect()
}

#[tokio::test]
async fn an_openai_run_calls_a_tool_answers_and_is_in_the_store_audit_and_sse() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "call_a",
                "read_file",
                r#"{"path":"notes.txt"}"#,
            )])),
            Reply::ok(says::openai_text("The launch is on Tuesday.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "reader", "provider": "llm", "model": "gpt-test", "system_prompt": "Be brief.", "tools": ["read_file"]}),
    )
    .await;
    // Started without waiting, followed live over SSE.
    let (run_id, text) = follow(&gw, &agent, "When is the launch?").await;
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "turn_started",
            "model_message",
            "tool_call_started",
            "tool_call_finished",
            "turn_started",
            "model_message",
            "run_finished"
        ],
        "{text}"
    );
    let ids: Vec<i64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .map(|i| i.parse().expect("numeric id"))
        .collect();
    assert_eq!(ids, (1..=8).collect::<Vec<_>>());

    // Resuming after step 5 gives the rest only.
    let resumed = gw
        .http
        .get(gw.url(&format!("/v1/runs/{run_id}/events")))
        .header("last-event-id", "5")
        .send()
        .await
        .expect("sse")
        .text()
        .await
        .expect("body");
    assert_eq!(resumed.matches("event: ").count(), 3, "{resumed}");

    let (_, _, run) = gw.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "The launch is on Tuesday.");
    assert_eq!(run["best_effort"], false);
    assert_eq!(run["usage"]["input_tokens"], 30);
    assert_eq!(run["usage"]["output_tokens"], 13);
    let finished = steps(&run, "tool_call_finished");
    assert!(
        finished[0]["result"]["content"]
            .as_str()
            .expect("content")
            .contains("tuesday")
    );
    assert_eq!(finished[0]["result"]["is_error"], false);

    // The wire: tools declared, credentials sent, the result paired with its call id.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].headers["authorization"],
        "Bearer test-secret-key"
    );
    assert_eq!(
        requests[0].body["tools"][0]["function"]["name"],
        "read_file"
    );
    assert_eq!(
        requests[0].body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(requests[0].body["parallel_tool_calls"], true);
    let second = requests[1].body["messages"].as_array().expect("messages");
    let tool_msg = second
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool message");
    assert_eq!(tool_msg["tool_call_id"], "call_a");
    assert!(
        tool_msg["content"]
            .as_str()
            .expect("content")
            .contains("tuesday")
    );

    // One audit row, adapter agent, with the run id and turn.
    let (_, _, audit) = gw.get(&format!("/v1/audit?run_id={run_id}")).await;
    let rows = audit["entries"].as_array().expect("audit rows");
    assert_eq!(rows.len(), 1, "{audit}");
    // The run's calls share one W3C trace: the run id's hex.
    assert_eq!(rows[0]["trace_id"], run_id.replace('-', ""), "{audit}");
    assert_eq!(rows[0]["adapter"], "agent");
    assert_eq!(rows[0]["tool"], "read_file");
    assert_eq!(rows[0]["outcome"], "ok");
    assert_eq!(rows[0]["step"], 1);
    // The provider's key never reaches the run record.
    assert!(!run.to_string().contains("test-secret-key"));
}

#[tokio::test]
async fn anthropic_parallel_calls_get_one_user_message_of_results_with_errors_flagged() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::ok(says::anthropic_calls(
                "Reading both.",
                &[
                    ("toolu_1", "read_file", json!({"path": "notes.txt"})),
                    ("toolu_2", "read_file", json!({"path": "missing.txt"})),
                ],
            )),
            Reply::ok(says::anthropic_text("Tuesday; the other file is missing.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Anthropic).await;
    let agent = create_agent(
        &gw,
        json!({"name": "reader", "provider": "llm", "model": "claude-test", "tools": ["read_file"]}),
    )
    .await;
    let run = run(&gw, &agent, "Read both files").await;
    assert_eq!(run["status"], "completed", "{run}");
    let message = &steps(&run, "model_message")[0]["message"];
    assert_eq!(message["reasoning"], "I should look.");

    let requests = mock.requests();
    assert_eq!(requests[0].headers["x-api-key"], "test-secret-key");
    assert_eq!(requests[0].headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        requests[0].body["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": false})
    );
    let messages = requests[1].body["messages"].as_array().expect("messages");
    // The assistant turn echoed as received (thinking block and signature included).
    assert_eq!(messages[1]["content"][0]["signature"], "sig-abc");
    let results = messages[2]["content"].as_array().expect("results");
    assert_eq!(results[0]["tool_use_id"], "toolu_1");
    assert!(results[0].get("is_error").is_none());
    assert_eq!(results[1]["tool_use_id"], "toolu_2");
    assert_eq!(results[1]["is_error"], true);
    let error: Value =
        serde_json::from_str(results[1]["content"].as_str().expect("text")).expect("JSON error");
    assert_eq!(error["status"], "error");
    assert_eq!(error["category"], "not_found");
    assert_eq!(run["usage"]["cached_input_tokens"], 10);
}

#[tokio::test]
async fn a_tool_outside_the_agents_toolset_is_an_error_result_not_a_call() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[("c1", "list_files", "{}")])),
            Reply::ok(says::openai_text("I cannot list files.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "narrow", "provider": "llm", "model": "gpt-test", "tools": ["read_file"]}),
    )
    .await;
    let run = run(&gw, &agent, "List the files").await;
    assert_eq!(run["status"], "completed", "{run}");
    // Only read_file was declared.
    let first = mock.requests()[0].body.clone();
    let declared: Vec<&str> = first["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name"))
        .collect();
    assert_eq!(declared, ["read_file"]);
    let finished = steps(&run, "tool_call_finished");
    assert_eq!(finished[0]["category"], "not_found");
    // A mistake the model can fix (an unknown tool) does not take its tools away: it
    // hears the error and may call again.
    assert!(steps(&run, "note").is_empty(), "{run}");
    let second = mock.requests()[1].body.clone();
    assert_ne!(second["tool_choice"], "none", "{second}");
    assert_eq!(
        second["messages"]
            .as_array()
            .expect("messages")
            .last()
            .expect("last")["role"],
        "tool"
    );
    let content: Value =
        serde_json::from_str(finished[0]["result"]["content"].as_str().expect("content"))
            .expect("json");
    assert!(
        content["suggestion"]
            .as_str()
            .expect("suggestion")
            .contains("read_file"),
        "{content}"
    );
    // Nothing was listed: the workspace tool never ran (its audit row says not_found).
    let run_id = run["id"].as_str().expect("id");
    let (_, _, audit) = gw.get(&format!("/v1/audit?run_id={run_id}")).await;
    let rows = audit["entries"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{audit}");
    assert_eq!(rows[0]["outcome"], "not_found");

    // An agent with no tools declares none at all.
    let bare = create_agent(
        &gw,
        json!({"name": "bare", "provider": "llm", "model": "gpt-test"}),
    )
    .await;
    let _ = self::run(&gw, &bare, "hi").await;
    let last = mock.requests().pop().expect("request");
    assert!(last.body.get("tools").is_none(), "{}", last.body);
}

#[tokio::test]
async fn a_react_text_protocol_run_works_with_a_model_that_only_emits_text() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_text(
                "THOUGHT: read it\nTOOL_CALL: read_file\nARGUMENTS: ```json\n{\"path\": \"notes.txt\"}\n```\nOBSERVATION: (made up)",
            )),
            Reply::ok(says::openai_text("FINAL_ANSWER: Tuesday.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "texty", "provider": "llm", "model": "gpt-test", "tools": ["read_file"], "protocol": "react"}),
    )
    .await;
    let run = run(&gw, &agent, "When is the launch?").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Tuesday.");
    let requests = mock.requests();
    assert!(
        requests[0].body.get("tools").is_none(),
        "no native tools: {}",
        requests[0].body
    );
    let system = requests[0].body["messages"][0]["content"]
        .as_str()
        .expect("system");
    assert!(
        system.contains("TOOL_CALL:") && system.contains("## read_file"),
        "{system}"
    );
    let last = requests[1].body["messages"]
        .as_array()
        .expect("messages")
        .last()
        .cloned()
        .expect("last");
    assert_eq!(last["role"], "user");
    assert!(
        last["content"]
            .as_str()
            .expect("text")
            .starts_with("TOOL_RESULT read_file"),
        "{last}"
    );
    assert!(last["content"].as_str().expect("text").contains("tuesday"));
}

#[tokio::test]
async fn rate_limits_are_retried_after_retry_after_and_a_500_storm_fails_the_run() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::status(429, error_body(Wire::Anthropic, 429, "slow down"))
                .header("retry-after", "1"),
            Reply::ok(says::anthropic_text("Hello.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Anthropic).await;
    let agent = create_agent(
        &gw,
        json!({"name": "a", "provider": "llm", "model": "claude-test"}),
    )
    .await;
    let run = run(&gw, &agent, "hi").await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(
        requests[1].at - requests[0].at >= Duration::from_millis(950),
        "Retry-After honoured"
    );
    assert_eq!(steps(&run, "model_message").len(), 1);

    let storm = MockLlm::start(
        Wire::Openai,
        vec![Reply::status(500, error_body(Wire::Openai, 500, "boom"))],
    )
    .await;
    let gw = gateway(&storm, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "a", "provider": "llm", "model": "gpt-test"}),
    )
    .await;
    let run = self::run(&gw, &agent, "hi").await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"].as_str().expect("error").contains("boom"),
        "{run}"
    );
    // max_retries = 2: three attempts.
    assert_eq!(storm.requests().len(), 3);
}

#[tokio::test]
async fn a_slow_provider_times_out_and_malformed_arguments_go_back_to_the_model() {
    let slow = MockLlm::start(
        Wire::Openai,
        vec![Reply::ok(says::openai_text("late")).delayed(Duration::from_secs(8))],
    )
    .await;
    let gw = gateway(&slow, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "a", "provider": "llm", "model": "gpt-test"}),
    )
    .await;
    let run = run(&gw, &agent, "hi").await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["error"].as_str().expect("error").contains("in time"),
        "{run}"
    );

    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[("c1", "read_file", r#"{"path": "#)])),
            Reply::ok(says::openai_text("Sorry.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "a", "provider": "llm", "model": "gpt-test", "tools": ["read_file"]}),
    )
    .await;
    let run = self::run(&gw, &agent, "read").await;
    assert_eq!(run["status"], "completed", "{run}");
    let finished = steps(&run, "tool_call_finished");
    assert_eq!(finished[0]["category"], "invalid_arguments");
    // The raw arguments went back verbatim in the assistant message, and the error after.
    let messages = mock.requests()[1].body["messages"].clone();
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["arguments"],
        r#"{"path": "#
    );
    assert!(
        messages[2]["content"]
            .as_str()
            .expect("content")
            .contains("not valid JSON")
    );
}

#[tokio::test]
async fn repeated_identical_calls_are_refused_then_end_the_run_with_a_best_effort_answer() {
    let same = Reply::ok(says::openai_calls(&[(
        "c",
        "read_file",
        r#"{"path":"notes.txt"}"#,
    )]));
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            same.clone(),
            same.clone(),
            same.clone(),
            same.clone(),
            same,
            Reply::ok(says::openai_text("It is Tuesday (as far as I got).")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "loopy", "provider": "llm", "model": "gpt-test", "tools": ["read_file"]}),
    )
    .await;
    let run = run(&gw, &agent, "When?").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["best_effort"], true);
    assert_eq!(run["output"], "It is Tuesday (as far as I got).");
    let categories: Vec<Value> = steps(&run, "tool_call_finished")
        .iter()
        .map(|s| s["category"].clone())
        .collect();
    assert_eq!(
        categories,
        [
            Value::Null,
            Value::Null,
            Value::Null,
            json!("repetition"),
            json!("repetition")
        ]
    );
    // repetition_limit (3 by default) real calls, as documented: the fourth is refused.
    let run_id = run["id"].as_str().expect("id");
    let (_, _, audit) = gw.get(&format!("/v1/audit?run_id={run_id}")).await;
    assert_eq!(audit["entries"].as_array().expect("rows").len(), 3);
    let last = mock.requests().pop().expect("request");
    assert_eq!(
        last.body["tool_choice"], "none",
        "the last call disables tools"
    );
}

#[tokio::test]
async fn at_max_turns_the_run_ends_with_a_best_effort_answer() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "c1",
                "read_file",
                r#"{"path":"notes.txt"}"#,
            )])),
            Reply::ok(says::openai_calls(&[("c2", "list_files", "{}")])),
            Reply::ok(says::openai_text("Tuesday, best I can tell.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "short", "provider": "llm", "model": "gpt-test", "tools": ["read_file", "list_files"], "max_turns": 2}),
    )
    .await;
    let run = run(&gw, &agent, "When?").await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["best_effort"], true);
    assert_eq!(run["output"], "Tuesday, best I can tell.");
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[2].body["tool_choice"], "none");
    assert!(
        steps(&run, "note")[0]["text"]
            .as_str()
            .expect("note")
            .contains("turn limit")
    );
}

#[tokio::test]
async fn gemini_and_ollama_runs_speak_their_own_wire_formats() {
    let gemini = MockLlm::start(
        Wire::Gemini,
        vec![
            Reply::ok(says::gemini_calls(&[
                ("read_file", json!({"path": "notes.txt"})),
                ("list_files", json!({})),
            ])),
            Reply::ok(says::gemini_text("Tuesday.")),
        ],
    )
    .await;
    let gw = gateway(&gemini, Wire::Gemini).await;
    let agent = create_agent(
        &gw,
        json!({"name": "g", "provider": "llm", "model": "gemini-test", "tools": ["read_file", "list_files"], "system_prompt": "Brief."}),
    )
    .await;
    let run = run(&gw, &agent, "When?").await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = gemini.requests();
    assert_eq!(requests[0].headers["x-goog-api-key"], "test-secret-key");
    assert_eq!(
        requests[0].body["systemInstruction"]["parts"][0]["text"],
        "Brief."
    );
    assert_eq!(
        requests[0].body["toolConfig"]["functionCallingConfig"]["mode"],
        "AUTO"
    );
    let contents = requests[1].body["contents"].as_array().expect("contents");
    assert_eq!(contents[1]["role"], "model");
    assert_eq!(
        contents[1]["parts"][0]["thoughtSignature"], "CiQB-signature",
        "echoed unchanged"
    );
    let responses = contents[2]["parts"].as_array().expect("parts");
    assert_eq!(responses.len(), 2, "both results in one user turn");
    assert_eq!(responses[0]["functionResponse"]["name"], "read_file");
    assert!(
        responses[0]["functionResponse"]["response"]["result"]
            .as_str()
            .expect("result")
            .contains("tuesday")
    );
    assert!(
        responses[0]["functionResponse"].get("id").is_none(),
        "no made-up ids on the wire"
    );
    assert_eq!(run["usage"]["reasoning_tokens"], 12);

    let ollama = MockLlm::start(
        Wire::Ollama,
        vec![
            Reply::ok(says::ollama_calls(&[(
                "read_file",
                json!({"path": "notes.txt"}),
            )])),
            Reply::ok(says::ollama_text("Tuesday.")),
        ],
    )
    .await;
    let gw = gateway(&ollama, Wire::Ollama).await;
    let agent = create_agent(&gw, json!({"name": "o", "provider": "llm", "model": "qwen-test", "tools": ["read_file"], "temperature": 0.2})).await;
    let run = self::run(&gw, &agent, "When?").await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = ollama.requests();
    assert_eq!(requests[0].body["options"]["temperature"], json!(0.2f32));
    let tool = requests[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .expect("tool message");
    assert_eq!(tool["tool_name"], "read_file");
    assert_eq!(run["usage"]["input_tokens"], 42);
}

#[tokio::test]
async fn agents_and_runs_are_validated_scoped_and_cancellable() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![Reply::ok(says::openai_text("slow")).delayed(Duration::from_secs(4))],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    // Every problem is named.
    let (status, _, problem) = gw
        .post(
            "/v1/agents",
            json!({"name": "Bad Name", "provider": "nope", "model": "", "max_turns": 0}),
        )
        .await;
    assert_eq!(status, 400, "{problem}");
    let pointers: Vec<&str> = problem["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["pointer"].as_str().expect("pointer"))
        .collect();
    for p in ["/name", "/model", "/max_turns", "/provider"] {
        assert!(pointers.contains(&p), "{p} in {pointers:?}");
    }
    let (status, _, _) = gw
        .post(
            "/v1/agents",
            json!({"name": "x", "provider": "llm", "model": "m", "surprise": 1}),
        )
        .await;
    assert_eq!(status, 400);
    // An agent-level approval policy was accepted and ignored: now refused, naming where
    // such rules go.
    let (status, _, problem) = gw
        .post(
            "/v1/agents",
            json!({"name": "x", "provider": "llm", "model": "m", "approval_policy": "always"}),
        )
        .await;
    assert_eq!(status, 400, "{problem}");
    assert!(problem.to_string().contains("/v1/policy"), "{problem}");
    let agent = create_agent(
        &gw,
        json!({"name": "slow", "provider": "llm", "model": "gpt-test"}),
    )
    .await;
    let (status, _, _) = gw
        .post(
            "/v1/agents",
            json!({"name": "slow", "provider": "llm", "model": "gpt-test"}),
        )
        .await;
    assert_eq!(status, 409);

    let (_, _, started) = gw
        .post(&format!("/v1/agents/{agent}/runs"), json!({"input": "hi"}))
        .await;
    let run_id = started["id"].as_str().expect("id").to_owned();

    // Another tenant sees neither the agent nor the run.
    let other = client_with_key(&gw.create_tenant("other").await);
    for path in [
        format!("/v1/agents/{agent}"),
        format!("/v1/runs/{run_id}"),
        format!("/v1/runs/{run_id}/events"),
    ] {
        let (status, _, _) = read(other.get(gw.url(&path)).send().await.expect("request")).await;
        assert_eq!(status, 404, "{path}");
    }
    let (status, _, _) = read(
        other
            .post(gw.url(&format!("/v1/runs/{run_id}/cancel")))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 404);
    let (_, _, listed) = read(other.get(gw.url("/v1/runs")).send().await.expect("request")).await;
    assert_eq!(listed["runs"], json!([]));

    let (status, _, cancelled) = gw
        .post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 202, "{cancelled}");
    let mut run = Value::Null;
    for _ in 0..100 {
        run = gw.get(&format!("/v1/runs/{run_id}")).await.2;
        if run["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(run["status"], "cancelled", "{run}");
    let (status, _, _) = gw
        .post(&format!("/v1/runs/{run_id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 409, "already ended");
}

#[tokio::test]
async fn a_run_cut_off_by_a_stopping_gateway_resumes_when_the_next_one_starts() {
    resumes_after_a_stop(None).await;
}

#[tokio::test]
async fn a_run_cut_off_by_a_stopping_gateway_resumes_on_postgres() {
    let db = toolgate_e2e::PgDb::create().await;
    resumes_after_a_stop(Some(db.url.clone())).await;
    db.drop_db().await;
}

async fn resumes_after_a_stop(database_url: Option<String>) {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "c1",
                "read_file",
                r#"{"path":"notes.txt"}"#,
            )])),
            // The first instance stops while waiting for this one.
            Reply::ok(says::openai_text("never seen")).delayed(Duration::from_secs(60)),
            Reply::ok(says::openai_text("Tuesday, after a restart.")),
        ],
    )
    .await;
    let data = tempfile::tempdir().expect("data dir");
    let start = || {
        let base = mock.base.clone();
        let dir = data.path().to_path_buf();
        let url = database_url.clone();
        Gateway::start_with(move |c| {
            c.data_dir = dir;
            c.database.url = url.map(toolgate_server::config::Secret::new);
            c.providers
                .insert("llm".into(), provider(Wire::Openai, &base));
        })
    };
    let first = start().await;
    let workspace = data.path().join("workspace").join("default");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::fs::write(workspace.join("notes.txt"), "the launch is on tuesday\n").expect("write");
    let agent = create_agent(
        &first,
        json!({"name": "r", "provider": "llm", "model": "gpt-test", "tools": ["read_file"]}),
    )
    .await;
    let (_, _, started) = first
        .post(
            &format!("/v1/agents/{agent}/runs"),
            json!({"input": "When?"}),
        )
        .await;
    let run_id = started["id"].as_str().expect("id").to_owned();
    // Wait until the second model call is in flight, then stop the gateway.
    for _ in 0..200 {
        if mock.requests().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(mock.requests().len(), 2);
    first.stop().await;

    let second = start().await;
    let mut run = Value::Null;
    for _ in 0..200 {
        run = second.get(&format!("/v1/runs/{run_id}")).await.2;
        if run["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "Tuesday, after a restart.");
    // The tool ran once; the cut-off turn was redone, not skipped or doubled.
    assert_eq!(steps(&run, "tool_call_finished").len(), 1);
    let turns: Vec<i64> = steps(&run, "turn_started")
        .iter()
        .map(|s| s["turn"].as_i64().expect("turn"))
        .collect();
    assert_eq!(turns, [1, 2]);
    // The resumed request carried the whole history, tool result included.
    let third = mock.requests()[2].body.clone();
    assert_eq!(
        third["messages"].as_array().expect("messages").len(),
        3,
        "{third}"
    );
    let seqs: Vec<i64> = run["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| s["seq"].as_i64().expect("seq"))
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as i64).collect::<Vec<_>>());
}

#[tokio::test]
async fn with_parallel_calls_off_the_switch_is_sent_and_extra_calls_are_not_executed() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::ok(says::anthropic_calls(
                "Both at once.",
                &[
                    ("toolu_1", "read_file", json!({"path": "notes.txt"})),
                    ("toolu_2", "list_files", json!({})),
                ],
            )),
            Reply::ok(says::anthropic_text("Tuesday.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Anthropic).await;
    let agent = create_agent(
        &gw,
        json!({"name": "serial", "provider": "llm", "model": "claude-test", "tools": ["read_file", "list_files"], "parallel_tool_calls": false}),
    )
    .await;
    let run = run(&gw, &agent, "When?").await;
    assert_eq!(run["status"], "completed", "{run}");
    let requests = mock.requests();
    assert_eq!(
        requests[0].body["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    let finished = steps(&run, "tool_call_finished");
    assert_eq!(finished[0]["result"]["is_error"], false);
    assert_eq!(finished[1]["category"], "not_executed");
    // Only the first ran; the second still has its result on the wire.
    let run_id = run["id"].as_str().expect("id");
    let (_, _, audit) = gw.get(&format!("/v1/audit?run_id={run_id}")).await;
    assert_eq!(audit["entries"].as_array().expect("rows").len(), 1);
    let results = requests[1].body["messages"][2]["content"]
        .as_array()
        .expect("results")
        .clone();
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["is_error"], true);
}

#[tokio::test]
async fn on_sqlite_a_run_left_by_a_killed_gateway_resumes_at_the_next_start() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![Reply::ok(says::openai_text("Back again."))],
    )
    .await;
    let data = tempfile::tempdir().expect("data dir");
    let start = || {
        let base = mock.base.clone();
        let dir = data.path().to_path_buf();
        Gateway::start_with(move |c| {
            c.data_dir = dir;
            c.providers
                .insert("llm".into(), provider(Wire::Openai, &base));
        })
    };
    start().await.stop().await;
    // What a killed gateway leaves: a running run, leased for a while yet, one step in.
    let store = toolgate_store::Store::open(None, data.path())
        .await
        .expect("store");
    let tenant = store
        .find_tenant("default")
        .await
        .expect("tenant")
        .expect("default");
    let run = toolgate_store::NewRun {
        id: toolgate_core::RunId::new(),
        agent_id: uuid::Uuid::now_v7(),
        agent_name: "r".into(),
        principal: toolgate_core::PrincipalId::new(),
        auth: json!({
            "tenant": tenant.id, "tenant_name": "default",
            "principal": {"id": uuid::Uuid::now_v7(), "kind": "user", "name": "someone"},
            "roles": ["admin"], "scopes": ["tools:invoke", "agents:run"]
        }),
        agent_config: json!({"name": "r", "provider": "llm", "model": "gpt-test"}),
        input: "Still there?".into(),
        owner: "a-killed-instance".into(),
        lease_until: chrono::Utc::now() + chrono::Duration::seconds(25),
        first_event: json!({"type": "run_started", "agent": "r", "input": "Still there?"}),
    };
    toolgate_core::stores::RunStore::create_run(&store, tenant.id, &run)
        .await
        .expect("run");
    drop(store);

    let gw = start().await;
    let mut view = Value::Null;
    for _ in 0..100 {
        view = gw.get(&format!("/v1/runs/{}", run.id)).await.2;
        if view["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(view["status"], "completed", "{view}");
    assert_eq!(view["output"], "Back again.");
}

/// A tool call in a reply cut off at the token limit is never run (its arguments may be
/// incomplete): the model is told so, on OpenAI (`finish_reason: length`) and Anthropic
/// (`stop_reason: max_tokens`) alike.
#[tokio::test]
async fn a_tool_call_cut_off_at_the_token_limit_is_not_executed() {
    for wire in [Wire::Openai, Wire::Anthropic] {
        let mut cut = match wire {
            Wire::Openai => says::openai_calls(&[(
                "call_w",
                "write_file",
                r#"{"path": "out.txt", "content": "half"}"#,
            )]),
            _ => says::anthropic_calls(
                "Writing.",
                &[(
                    "toolu_w",
                    "write_file",
                    json!({"path": "out.txt", "content": "half"}),
                )],
            ),
        };
        let answer = match wire {
            Wire::Openai => {
                cut["choices"][0]["finish_reason"] = json!("length");
                says::openai_text("I ran out of room.")
            }
            _ => {
                cut["stop_reason"] = json!("max_tokens");
                says::anthropic_text("I ran out of room.")
            }
        };
        let mock = MockLlm::start(wire, vec![Reply::ok(cut), Reply::ok(answer)]).await;
        let gw = gateway(&mock, wire).await;
        let agent = create_agent(
            &gw,
            json!({"name": "writer", "provider": "llm", "model": "m", "tools": ["write_file"]}),
        )
        .await;
        let run = run(&gw, &agent, "Write it").await;
        assert_eq!(run["status"], "completed", "{run}");
        assert_eq!(run["output"], "I ran out of room.", "{run}");
        assert!(
            !gw.workspace().join("out.txt").exists(),
            "{wire:?}: the cut-off call ran"
        );
        let finished = steps(&run, "tool_call_finished");
        assert_eq!(finished.len(), 1, "{run}");
        assert_eq!(finished[0]["category"], "truncated", "{run}");
        assert_eq!(finished[0]["result"]["is_error"], true);
        let run_id = run["id"].as_str().expect("id");
        let (_, _, audit) = gw.get(&format!("/v1/audit?run_id={run_id}")).await;
        assert_eq!(audit["entries"], json!([]), "{wire:?}: {audit}");
        // The model heard why, paired with its call.
        let second = mock.requests()[1].body.to_string();
        assert!(
            second.contains("cut off at the output token limit"),
            "{second}"
        );
        gw.stop().await;
    }
}

/// A spend limit reached (OpenAI's 429 `insufficient_quota`, or a 402) fails the run at
/// once: retrying cannot help (it was retried like a rate limit).
#[tokio::test]
async fn a_spend_limit_is_final_not_retried() {
    let quota = json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                                 "type": "insufficient_quota", "param": null, "code": "insufficient_quota"}});
    for reply in [
        Reply::status(429, quota),
        Reply::status(402, error_body(Wire::Openai, 402, "pay up")),
    ] {
        let mock = MockLlm::start(Wire::Openai, vec![reply]).await;
        let gw = gateway(&mock, Wire::Openai).await;
        let agent = create_agent(
            &gw,
            json!({"name": "a", "provider": "llm", "model": "gpt-test"}),
        )
        .await;
        let run = run(&gw, &agent, "hi").await;
        assert_eq!(run["status"], "failed", "{run}");
        assert_eq!(mock.requests().len(), 1, "one attempt: {run}");
        gw.stop().await;
    }
}

/// The model is offered exactly the tools the run may call: one the caller's scopes
/// forbid (a high-risk tool without `tools:high_risk`) is not declared.
#[tokio::test]
async fn tools_the_caller_may_not_call_are_not_declared() {
    let mock = MockLlm::start(Wire::Openai, vec![Reply::ok(says::openai_text("ok"))]).await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "both", "provider": "llm", "model": "gpt-test",
               "tools": ["read_file", "execute_command"]}),
    )
    .await;
    let (status, _, who) = gw
        .post(
            "/v1/principals",
            json!({"name": "member", "scopes": ["agents:run", "tools:invoke"]}),
        )
        .await;
    assert_eq!(status, 201, "{who}");
    let (status, _, key) = gw
        .post(
            "/v1/keys",
            json!({"name": "member", "principal_id": who["id"]}),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let member = client_with_key(key["secret"].as_str().expect("secret"));
    let (status, _, run) = read(
        member
            .post(gw.url(&format!("/v1/agents/{agent}/runs")))
            .json(&json!({"input": "hi", "wait_secs": 30}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(
        (status, run["status"].as_str()),
        (201, Some("completed")),
        "{run}"
    );
    let declared: Vec<String> = mock.requests()[0].body["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["function"]["name"].as_str().expect("name").to_owned())
        .collect();
    assert_eq!(declared, ["read_file"]);
}

/// Structured output: an answer not matching the agent's `output_schema` goes back to
/// the model with what is wrong; the one that matches ends the run, as `output_json`.
/// Each wire format carries the schema natively where it can alongside tools.
#[tokio::test]
async fn an_answer_must_match_the_output_schema_and_a_mismatch_is_sent_back() {
    let schema = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
    });
    let (wrong, right) = (
        r#"{"city": "Oslo"}"#,
        "```json\n{\"city\": \"Oslo\", \"days\": 3}\n```",
    );
    for wire in [Wire::Openai, Wire::Anthropic, Wire::Gemini, Wire::Ollama] {
        let mock = MockLlm::start(
            wire,
            vec![
                Reply::ok(says::text(wire, wrong)),
                Reply::ok(says::text(wire, right)),
            ],
        )
        .await;
        let gw = gateway(&mock, wire).await;
        let model = model_for(wire);
        let agent = create_agent(
            &gw,
            json!({"name": "planner", "provider": "llm", "model": model,
                   "tools": ["read_file"], "output_schema": schema}),
        )
        .await;
        let run = run(&gw, &agent, "Plan a trip").await;
        assert_eq!(run["status"], "completed", "{wire:?}: {run}");
        assert_eq!(
            run["output_json"],
            json!({"city": "Oslo", "days": 3}),
            "{run}"
        );
        assert_eq!(run["output"], r#"{"city":"Oslo","days":3}"#);
        let notes = steps(&run, "note");
        assert_eq!(notes.len(), 1, "{run}");
        assert_eq!(notes[0]["reason"], "output_invalid");
        assert!(
            notes[0]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("days"),
            "{run}"
        );

        let asked = mock.requests();
        assert_eq!(asked.len(), 2, "{wire:?}");
        let first = &asked[0].body;
        let native = match wire {
            Wire::Openai => first.pointer("/response_format/json_schema/schema"),
            Wire::Anthropic => first.pointer("/output_config/format/schema"),
            Wire::Ollama => first.get("format"),
            // Tools are declared: JSON mode would be refused before Gemini 3.
            Wire::Gemini => None,
        };
        if wire == Wire::Gemini {
            assert!(
                first
                    .pointer("/generationConfig/responseJsonSchema")
                    .is_none()
            );
        } else {
            assert_eq!(native, Some(&schema), "{wire:?}: {first}");
        }
        // The schema is in the instructions on every wire, and the mismatch reached
        // the model with what was wrong.
        assert!(
            first.to_string().contains("only a JSON value that matches"),
            "{first}"
        );
        let second = asked[1].body.to_string();
        assert!(
            second.contains("does not match the output schema"),
            "{second}"
        );
        gw.stop().await;
    }
}

/// Answers that keep missing the schema fail the run once the retries are spent; the
/// last answer is kept, and bad schemas are refused when the agent is made.
#[tokio::test]
async fn answers_that_keep_missing_the_schema_fail_the_run() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![Reply::ok(says::openai_text("Oslo, three days"))],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let (status, _, refused) = gw
        .post(
            "/v1/agents",
            json!({"name": "bad", "provider": "llm", "model": "m",
                   "output_schema": {"type": "string"}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("output_schema"), "{refused}");
    let agent = create_agent(
        &gw,
        json!({"name": "planner", "provider": "llm", "model": "m", "output_retries": 1,
               "output_schema": {"type": "object", "required": ["city"]}}),
    )
    .await;
    let run = run(&gw, &agent, "Plan a trip").await;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["output"], "Oslo, three days");
    assert!(run.get("output_json").is_none(), "{run}");
    assert!(
        run["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not JSON"),
        "{run}"
    );
    assert_eq!(mock.requests().len(), 2, "one answer and one retry");
    gw.stop().await;
}

/// The SSE events of a body: (event, data as JSON).
fn sse_events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|event| {
            let field = |name: &str| {
                event
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(str::to_owned)
            };
            Some((
                field("event: ")?,
                serde_json::from_str(&field("data: ")?).ok()?,
            ))
        })
        .collect()
}

/// A streaming agent: on each wire format the model's reply is read as the provider
/// streams it, its text reaches the run's SSE stream piece by piece before the whole
/// message step, and the folded reply is the one an unstreamed call gives (tool
/// arguments put together, usage kept).
#[tokio::test]
async fn a_streaming_agents_reply_reaches_the_run_stream_piece_by_piece() {
    let answer = "The launch is on Tuesday, says the note.";
    for wire in [Wire::Openai, Wire::Anthropic, Wire::Gemini, Wire::Ollama] {
        let args = json!({"path": "notes.txt"});
        let (call, text) = match wire {
            Wire::Openai => (
                says::openai_calls(&[("call_1", "read_file", &args.to_string())]),
                says::openai_text(answer),
            ),
            Wire::Anthropic => (
                says::anthropic_calls("Looking.", &[("toolu_1", "read_file", args.clone())]),
                says::anthropic_text(answer),
            ),
            Wire::Gemini => (
                says::gemini_calls(&[("read_file", args.clone())]),
                says::gemini_text(answer),
            ),
            Wire::Ollama => (
                says::ollama_calls(&[("read_file", args.clone())]),
                says::ollama_text(answer),
            ),
        };
        // The first reply waits for the test's stream to open.
        let mock = MockLlm::start(
            wire,
            vec![
                Reply::ok(call).delayed(Duration::from_millis(300)),
                Reply::ok(text),
            ],
        )
        .await;
        let gw = gateway(&mock, wire).await;
        let model = model_for(wire);
        let agent = create_agent(
            &gw,
            json!({"name": "reader", "provider": "llm", "model": model,
                   "tools": ["read_file"], "stream": true}),
        )
        .await;
        let (run_id, text) = follow(&gw, &agent, "When is the launch?").await;
        let events = sse_events(&text);
        // Turn 2's pieces: between its start and its whole message, and the answer.
        let second_turn = events
            .iter()
            .position(|(e, d)| e == "turn_started" && d["turn"] == 2)
            .unwrap_or_else(|| panic!("{wire:?}: {text}"));
        let message = events
            .iter()
            .rposition(|(e, _)| e == "model_message")
            .expect("the answer's step");
        let pieces: Vec<&str> = events
            .iter()
            .enumerate()
            .filter(|(_, (e, d))| e == "model_delta" && d["turn"] == 2)
            .map(|(i, (_, d))| {
                assert!(
                    second_turn < i && i < message,
                    "{wire:?}: a piece outside its turn: {text}"
                );
                d["text"].as_str().unwrap_or_default()
            })
            .collect();
        assert!(pieces.len() > 3, "{wire:?}: {pieces:?}");
        assert_eq!(pieces.concat(), answer, "{wire:?}");
        assert_eq!(events.last().map(|(e, _)| e.as_str()), Some("run_finished"));

        let (_, _, run) = gw.get(&format!("/v1/runs/{run_id}")).await;
        assert_eq!(run["status"], "completed", "{wire:?}: {run}");
        assert_eq!(run["output"], answer);
        let finished = steps(&run, "tool_call_finished");
        assert!(
            finished[0]["result"]["content"]
                .as_str()
                .unwrap_or_default()
                .contains("tuesday"),
            "{wire:?}: the streamed arguments were put together: {run}"
        );
        let messages = steps(&run, "model_message");
        assert!(
            messages[1]["usage"]["input_tokens"].as_u64() > Some(0),
            "{wire:?}: usage from the stream: {run}"
        );
        let asked = mock.requests();
        match wire {
            Wire::Gemini => assert!(asked[0].path.ends_with(":streamGenerateContent")),
            _ => assert_eq!(asked[0].body["stream"], true, "{wire:?}"),
        }
        if wire == Wire::Openai {
            assert_eq!(asked[0].body["stream_options"]["include_usage"], true);
        }
        gw.stop().await;
    }
}

/// A stream that breaks off mid-reply (Anthropic's `overloaded_error` event) is retried;
/// watchers hear that the pieces so far are void.
#[tokio::test]
async fn a_stream_broken_mid_reply_is_retried_and_its_pieces_voided() {
    let mock = MockLlm::start(
        Wire::Anthropic,
        vec![
            Reply::ok(says::anthropic_text("A first try that breaks"))
                .delayed(Duration::from_millis(300))
                .broken_after(5),
            Reply::ok(says::anthropic_text("The second try.")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Anthropic).await;
    let agent = create_agent(
        &gw,
        json!({"name": "reader", "provider": "llm", "model": "m", "stream": true}),
    )
    .await;
    let (run_id, text) = follow(&gw, &agent, "Hi").await;
    let deltas: Vec<Value> = sse_events(&text)
        .into_iter()
        .filter(|(e, _)| e == "model_delta")
        .map(|(_, d)| d)
        .collect();
    let restart = deltas
        .iter()
        .position(|d| d["restart"] == true)
        .unwrap_or_else(|| panic!("a restart: {text}"));
    assert!(restart > 0, "pieces came before the break: {text}");
    let after: String = deltas[restart + 1..]
        .iter()
        .filter_map(|d| d["text"].as_str())
        .collect();
    assert_eq!(after, "The second try.");
    let (_, _, run) = gw.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["output"], "The second try.");
    assert_eq!(mock.requests().len(), 2);
    gw.stop().await;
}

/// Model routing: the first turn asks the fast model; a direct answer ends the run there
/// (the main model is never asked), a reply calling tools is routed unrun to the main
/// model, which does the tool-using turns. Each step names the model that answered, and
/// the usage counts both.
#[tokio::test]
async fn a_fast_model_answers_what_needs_no_tools_and_routes_the_rest() {
    for needs_tools in [false, true] {
        let fast = MockLlm::start(
            Wire::Openai,
            vec![Reply::ok(if needs_tools {
                says::openai_calls(&[("f1", "read_file", r#"{"path":"notes.txt"}"#)])
            } else {
                says::openai_text("Hello! Nothing to look up.")
            })],
        )
        .await;
        let main = MockLlm::start(
            Wire::Openai,
            vec![
                Reply::ok(says::openai_calls(&[(
                    "m1",
                    "read_file",
                    r#"{"path":"notes.txt"}"#,
                )])),
                Reply::ok(says::openai_text("The launch is on Tuesday.")),
            ],
        )
        .await;
        let fast_base = fast.base.clone();
        let main_base = main.base.clone();
        let gw = Gateway::start_with(move |c| {
            c.providers
                .insert("llm".into(), provider(Wire::Openai, &main_base));
            c.providers
                .insert("quick".into(), provider(Wire::Openai, &fast_base));
        })
        .await;
        std::fs::write(
            gw.workspace().join("notes.txt"),
            "the launch is on tuesday\n",
        )
        .expect("write");
        let (status, _, refused) = gw
            .post(
                "/v1/agents",
                json!({"name": "bad", "provider": "llm", "model": "big",
                       "fast_model": "small", "fast_provider": "nope"}),
            )
            .await;
        assert_eq!(status, 400, "{refused}");
        let agent = create_agent(
            &gw,
            json!({"name": "router", "provider": "llm", "model": "big",
                   "fast_model": "small", "fast_provider": "quick", "tools": ["read_file"]}),
        )
        .await;
        let run = run(&gw, &agent, "When is the launch?").await;
        assert_eq!(run["status"], "completed", "{run}");
        let answered: Vec<&str> = steps(&run, "model_message")
            .iter()
            .filter_map(|s| s["model"].as_str())
            .collect();
        if needs_tools {
            assert_eq!(run["output"], "The launch is on Tuesday.");
            assert_eq!(answered, ["big", "big"], "{run}");
            let routed = steps(&run, "model_routed");
            assert_eq!(routed.len(), 1, "{run}");
            assert_eq!(routed[0]["model"], "small");
            assert_eq!(main.requests().len(), 2);
            // The fast model's call was not run: one read, the main model's.
            let run_id = run["id"].as_str().expect("id");
            let (_, _, audit) = gw.get(&format!("/v1/audit?run_id={run_id}")).await;
            assert_eq!(
                audit["entries"].as_array().map(Vec::len),
                Some(1),
                "{audit}"
            );
            // Usage: the fast model's routed reply (20 input tokens) and the main
            // model's two replies (20 and 10).
            assert_eq!(run["usage"]["input_tokens"], 20 + 20 + 10, "{run}");
        } else {
            assert_eq!(run["output"], "Hello! Nothing to look up.");
            assert_eq!(answered, ["small"], "{run}");
            assert!(main.requests().is_empty(), "the main model was never asked");
        }
        assert_eq!(fast.requests().len(), 1);
        assert_eq!(fast.requests()[0].body["model"], "small");
        gw.stop().await;
    }
}
