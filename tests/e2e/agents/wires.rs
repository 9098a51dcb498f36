//! Each provider's wire format end to end: tool calls, parallel calls, the text protocol, cut-off replies.

use super::*;

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
    let ids = event_ids(&text);
    assert_eq!(ids, (1..=8).collect::<Vec<_>>());

    // Resuming after step 5 gives the rest only.
    let resumed = steps_after(&gw, &run_id, 5).await;
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
