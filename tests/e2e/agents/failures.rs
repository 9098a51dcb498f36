//! What goes wrong with a model: rate limits, timeouts, loops, turn and spend limits, answers off their schema.

use super::*;

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
