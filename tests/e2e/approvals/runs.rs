//! Agent runs paused for approval: resumed on another gateway process or after a restart, and two runs holding the same call decided apart.

use super::*;

#[tokio::test]
async fn an_agent_run_pauses_for_approval_and_resumes_on_another_gateway_process() {
    let db = PgDb::create().await;
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "call_1",
                "execute_command",
                r#"{"command":"echo deployed"}"#,
            )])),
            Reply::ok(says::openai_text("Deployed.")),
            Reply::ok(says::openai_calls(&[(
                "call_2",
                "execute_command",
                r#"{"command":"rm -rf build"}"#,
            )])),
            Reply::ok(says::openai_text("I was not allowed to clean the build.")),
        ],
    )
    .await;
    let dirs = tempfile::tempdir().expect("temp");
    let first = spawn_gateway(&dirs.path().join("a"), &db.url, &mock.base);
    let key = std::fs::read_to_string(dirs.path().join("a/admin-api-key"))
        .expect("admin key")
        .trim()
        .to_owned();
    let second = spawn_gateway(&dirs.path().join("b"), &db.url, &mock.base);
    let admin = client_with_key(&key);
    put_policy(&first.base, &admin, json!({"level": 5})).await;
    let reviewer = principal(
        &first.base,
        &admin,
        "reviewer",
        &["approvals:decide", "audit:read"],
    )
    .await;
    let (status, _, agent) = read(
        admin
            .post(format!("{}/v1/agents", first.base))
            .json(&json!({"name": "deployer", "provider": "llm", "model": "gpt-test", "tools": ["execute_command"]}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let agent = agent["id"].as_str().expect("id").to_owned();
    let start = |input: &'static str| {
        let admin = admin.clone();
        let url = format!("{}/v1/agents/{agent}/runs", first.base);
        async move {
            let (status, _, run) = read(
                admin
                    .post(url)
                    .json(&json!({"input": input, "wait_secs": 30}))
                    .send()
                    .await
                    .expect("request"),
            )
            .await;
            assert_eq!(status, 201, "{run}");
            run
        }
    };

    // The run pauses at execute_command (high risk at level 5), on the first process.
    let run = start("Deploy it.").await;
    assert_eq!(run["status"], "awaiting_approval", "{run:#}");
    let run_id = run["id"].as_str().expect("id").to_owned();
    let held = steps(&run, "approval_requested");
    assert_eq!(held.len(), 1, "{run:#}");
    assert_eq!(steps(&run, "run_paused").len(), 1);
    let approval = held[0]["approval_id"]
        .as_str()
        .expect("approval")
        .to_owned();

    // Approved on the second process: it takes the run over and finishes it.
    let (status, list) = get(&second.base, &reviewer, "/v1/approvals").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["approvals"][0]["adapter"], "agent");
    assert_eq!(list["approvals"][0]["run_id"], run_id.as_str());
    assert_eq!(list["approvals"][0]["agent"], "deployer");
    let (status, body) = decide(&second.base, &admin, &approval, "approve", "self").await;
    assert_eq!(status, 403, "the requester may not approve: {body}");
    let (status, body) = decide(&second.base, &reviewer, &approval, "approve", "ship it").await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for_status(&first.base, &admin, &run_id, "completed").await;
    assert_eq!(done["output"], "Deployed.");
    let finished = steps(&done, "tool_call_finished");
    let content = finished[0]["result"]["content"].as_str().expect("content");
    assert!(
        content.contains("deployed") && content.contains("[exit code 0]"),
        "{content}"
    );

    // Denied: the model is told why and goes on.
    let run = start("Clean the build.").await;
    assert_eq!(run["status"], "awaiting_approval", "{run:#}");
    let denied_run = run["id"].as_str().expect("id").to_owned();
    let denied_approval = steps(&run, "approval_requested")[0]["approval_id"]
        .as_str()
        .expect("approval")
        .to_owned();
    let (status, body) = decide(
        &second.base,
        &reviewer,
        &denied_approval,
        "deny",
        "not during the freeze",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for_status(&first.base, &admin, &denied_run, "completed").await;
    assert_eq!(done["output"], "I was not allowed to clean the build.");
    let result: Value = serde_json::from_str(
        steps(&done, "tool_call_finished")[0]["result"]["content"]
            .as_str()
            .expect("content"),
    )
    .expect("JSON result");
    assert_eq!(result["status"], "denied", "{result}");
    assert_eq!(result["reason"], "not during the freeze");
    let told = &mock.requests()[3].body;
    assert!(told.to_string().contains("not during the freeze"), "{told}");

    // Both decisions, and the calls they released or refused, are in the audit log.
    let rows = audit_of(&first.base, &reviewer, &approval).await;
    assert_eq!(
        summary(&rows),
        [
            ("agent".into(), "approval_required".into()),
            ("approval".into(), "ok".into()),
            ("agent".into(), "ok".into()),
        ],
        "{rows:#?}"
    );
    let rows = audit_of(&first.base, &reviewer, &denied_approval).await;
    assert_eq!(
        summary(&rows),
        [
            ("agent".into(), "approval_required".into()),
            ("approval".into(), "denied".into()),
            ("agent".into(), "denied".into()),
        ],
        "{rows:#?}"
    );
    assert_eq!(rows[1]["error"], "not during the freeze");
    drop(first);
    drop(second);
    db.drop_db().await;
}

#[tokio::test]
async fn a_paused_run_resumes_after_a_restart_and_decisions_stream_as_events() {
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "c1",
                "write_file",
                r#"{"path":"out.txt","content":"hi"}"#,
            )])),
            Reply::ok(says::openai_text("Written.")),
        ],
    )
    .await;
    let data = tempfile::tempdir().expect("data dir");
    let dir = data.path().to_path_buf();
    let llm = mock.base.clone();
    let configure = move |c: &mut toolgate_server::Config| {
        c.data_dir = dir.clone();
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &llm));
    };
    let first = Gateway::start_with(configure.clone()).await;
    put_policy(&first.base, &first.http, json!({"level": 5})).await;
    let reviewer = principal(&first.base, &first.http, "reviewer", &["approvals:decide"]).await;
    let (status, _, agent) = first
        .post(
            "/v1/agents",
            json!({"name": "writer", "provider": "llm", "model": "gpt-test", "tools": ["write_file"]}),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let (status, _, run) = first
        .post(
            &format!("/v1/agents/{}/runs", agent["id"].as_str().expect("id")),
            json!({"input": "write it", "wait_secs": 30}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "awaiting_approval", "{run:#}");
    let run_id = run["id"].as_str().expect("id").to_owned();
    let key = first.admin_key.clone();
    first.stop().await;

    // A new gateway on the same store; the decision reaches it, and it resumes the run.
    let second = Gateway::start_with(configure).await;
    let admin = client_with_key(&key);
    let events = reviewer
        .get(format!("{}/v1/approvals/events", second.base))
        .send()
        .await
        .expect("sse");
    assert_eq!(events.headers()["content-type"], "text/event-stream");
    let (_, list) = get(&second.base, &reviewer, "/v1/approvals").await;
    let approval = list["approvals"][0]["id"]
        .as_str()
        .expect("pending approval")
        .to_owned();
    let (status, body) = decide(&second.base, &reviewer, &approval, "approve", "fine").await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for_status(&second.base, &admin, &run_id, "completed").await;
    assert_eq!(done["output"], "Written.");
    assert_eq!(
        std::fs::read_to_string(data.path().join("workspace/default/out.txt")).expect("written"),
        "hi"
    );

    // The stream told of the decision.
    let mut stream = events.bytes_stream();
    let mut seen = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !seen.contains("event: approval_decided") && tokio::time::Instant::now() < deadline {
        use futures::StreamExt;
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(chunk))) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    assert!(seen.contains("event: approval_decided"), "{seen}");
    assert!(seen.contains(&format!("id: {approval}:approved")), "{seen}");
    second.stop().await;
}

/// Two runs hold the same call: each gets its own approval. Approving one resumes that run
/// alone; cancelling the other expires its approval, which leaves the inbox.
#[tokio::test]
async fn two_runs_holding_the_same_call_are_approved_and_cancelled_apart() {
    let call = || {
        Reply::ok(says::openai_calls(&[(
            "c1",
            "write_file",
            r#"{"path":"out.txt","content":"hi"}"#,
        )]))
    };
    // Both runs ask first; the one approved then hears the tool's result and answers.
    let mock = MockLlm::start(
        Wire::Openai,
        vec![call(), call(), Reply::ok(says::openai_text("Written."))],
    )
    .await;
    let llm = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &llm));
    })
    .await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 5})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let (status, _, agent) = gw
        .post(
            "/v1/agents",
            json!({"name": "writer", "provider": "llm", "model": "gpt-test", "tools": ["write_file"]}),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (status, _, run) = gw
            .post(
                &format!("/v1/agents/{}/runs", agent["id"].as_str().expect("id")),
                json!({"input": "write it", "wait_secs": 30}),
            )
            .await;
        assert_eq!(
            (status, run["status"].as_str()),
            (201, Some("awaiting_approval")),
            "{run}"
        );
        runs.push(run["id"].as_str().expect("id").to_owned());
    }
    let (_, list) = get(&base, &reviewer, "/v1/approvals").await;
    let pending = list["approvals"].as_array().expect("approvals").clone();
    assert_eq!(pending.len(), 2, "one approval per run: {list:#}");
    let of_run = |run: &str| {
        pending
            .iter()
            .find(|a| a["run_id"] == run)
            .and_then(|a| a["id"].as_str())
            .unwrap_or_else(|| panic!("an approval for run {run}: {pending:#?}"))
            .to_owned()
    };
    let (first, second) = (of_run(&runs[0]), of_run(&runs[1]));
    let (status, body) = decide(&base, &reviewer, &first, "approve", "fine").await;
    assert_eq!(status, 200, "{body}");
    wait_for_status(&base, &gw.http, &runs[0], "completed").await;
    let (_, other) = get(&base, &gw.http, &format!("/v1/runs/{}", runs[1])).await;
    assert_eq!(other["status"], "awaiting_approval", "{other:#}");

    let (status, _, _) = gw
        .post(&format!("/v1/runs/{}/cancel", runs[1]), json!({}))
        .await;
    assert_eq!(status, 202);
    wait_for_status(&base, &gw.http, &runs[1], "cancelled").await;
    let (_, held) = get(&base, &reviewer, &format!("/v1/approvals/{second}")).await;
    assert_eq!(held["status"], "expired", "{held:#}");
    let (_, list) = get(&base, &reviewer, "/v1/approvals").await;
    assert_eq!(list["approvals"], json!([]), "{list:#}");
    gw.stop().await;
}
