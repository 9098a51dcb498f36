//! Model replies streamed to a run's SSE followers, broken streams retried, and a fast model routing what needs tools.

use super::*;

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
