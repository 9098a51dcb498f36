//! Runs resumed after their gateway stops (on SQLite and on Postgres) or is killed.

use super::*;

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
        auth: serde_json::from_value(json!({
            "tenant": tenant.id, "tenant_name": "default",
            "principal": {"id": uuid::Uuid::now_v7(), "kind": "user", "name": "someone"},
            "roles": ["admin"], "scopes": ["tools:invoke", "agents:run"]
        }))
        .expect("an auth context"),
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
