//! Agents and runs as resources: validation, scopes, cancelling, toolsets, quotas and
//! paged steps (runs resumed after their gateway stops are in `resumption.rs`).

use super::*;

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
            json!({"name": "Bad Name", "provider": "nope", "model": "", "max_turns": 0,
                   "tools": (0..257).map(|i| format!("t{i}*")).collect::<Vec<_>>()}),
        )
        .await;
    assert_eq!(status, 400, "{problem}");
    let pointers: Vec<&str> = problem["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["pointer"].as_str().expect("pointer"))
        .collect();
    for p in ["/name", "/model", "/max_turns", "/provider", "/tools"] {
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

/// A run's steps show the tool calls' secret arguments masked, over REST and in the step
/// stream, as the audit keeps them; the journal keeps them whole for a resumed run, and
/// the tool got them whole. (Before: the steps showed the key the model was given to every
/// holder of `agents:run`.)
#[tokio::test]
async fn a_runs_steps_mask_secret_arguments() {
    let args = r#"{"path":"notes.txt","api_key":"sk-run-4242"}"#;
    let mock = MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[("c1", "read_file", args)])),
            Reply::ok(says::openai_text("done")),
        ],
    )
    .await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "keyed", "provider": "llm", "model": "gpt-test", "tools": ["read_file"]}),
    )
    .await;
    let (run_id, stream) = follow(&gw, &agent, "Read the notes").await;
    assert!(stream.contains("event: tool_call_started"), "{stream}");
    assert!(!stream.contains("sk-run-4242"), "{stream}");
    let (status, _, run) = gw.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, 200, "{run}");
    assert!(!run.to_string().contains("sk-run-4242"), "{run}");
    let masked = json!({"path": "notes.txt", "api_key": "***"});
    assert_eq!(
        steps(&run, "tool_call_started")[0]["arguments"],
        masked,
        "{run}"
    );
    assert_eq!(
        steps(&run, "model_message")[0]["message"]["tool_calls"][0]["arguments"],
        masked,
        "{run}"
    );
    let (_, _, audit) = gw.get(&format!("/v1/audit?run_id={run_id}")).await;
    assert_eq!(audit["entries"][0]["arguments"], masked, "{audit}");
    // The journal itself keeps the call as the model made it.
    let stored: Vec<u8> = ["toolgate.db", "toolgate.db-wal"]
        .iter()
        .filter_map(|f| std::fs::read(gw.data.path().join(f)).ok())
        .flatten()
        .collect();
    assert!(
        stored.windows(11).any(|w| w == b"sk-run-4242"),
        "the journal keeps the arguments whole"
    );
}

/// A tenant starts at most `limits.tenant_runs` runs going at once on an instance: the
/// next start is refused with 429 and `Retry-After`, another tenant's is not, and once
/// a run ends the tenant starts again. (Before: any number; each holds a task, its
/// history and the provider's rate for every tenant.)
#[tokio::test]
async fn a_tenant_starts_at_most_its_share_of_runs_at_once() {
    let slow = || Reply::ok(says::openai_text("done")).delayed(Duration::from_millis(1500));
    let mock = MockLlm::start(Wire::Openai, vec![slow(), slow(), slow(), slow()]).await;
    let base = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers
            .insert("llm".into(), provider(Wire::Openai, &base));
        c.limits.tenant_runs = 2;
    })
    .await;
    let agent = json!({"name": "slow", "provider": "llm", "model": "gpt-test"});
    let mine = create_agent(&gw, agent.clone()).await;
    let start = |client: &reqwest::Client, agent: &str| {
        client
            .post(gw.url(&format!("/v1/agents/{agent}/runs")))
            .json(&json!({"input": "go"}))
            .send()
    };
    let mut going = Vec::new();
    for _ in 0..2 {
        let (status, _, run) = read(start(&gw.http, &mine).await.expect("request")).await;
        assert_eq!(status, 201, "{run}");
        going.push(run["id"].as_str().expect("id").to_owned());
    }
    let refused = start(&gw.http, &mine).await.expect("request");
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "5");
    let (_, _, problem) = read(refused).await;
    assert_eq!(
        problem["type"], "urn:toolgate:error:rate_limited",
        "{problem}"
    );
    assert!(
        problem["detail"]
            .as_str()
            .unwrap_or("")
            .contains("2 agent runs going"),
        "{problem}"
    );
    assert_eq!(gw.rejections("tenant_runs").await, 1.0);

    // Another tenant is not held to this one's count.
    let theirs = client_with_key(&gw.create_tenant("other").await);
    let (status, _, agent) = read(
        theirs
            .post(gw.url("/v1/agents"))
            .json(&agent)
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 201, "{agent}");
    let (status, _, run) = read(
        start(&theirs, agent["id"].as_str().expect("id"))
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 201, "{run}");

    // Once its runs end, the tenant starts again.
    for run in &going {
        let mut view = Value::Null;
        for _ in 0..100 {
            view = gw.get(&format!("/v1/runs/{run}")).await.2;
            if view["status"] != "running" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(view["status"], "completed", "{view}");
    }
    // (Its slot is given back as its task ends, a moment after the run's end is stored.)
    let mut answer = (0, Value::Null);
    for _ in 0..50 {
        let (status, _, run) = read(start(&gw.http, &mine).await.expect("request")).await;
        answer = (status, run);
        if status != 429 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(answer.0, 201, "{}", answer.1);
}

/// A start that waits for its run's end (`wait_secs`) holds its connection as long as a
/// stream: it counts against the same caps, and past them the run is answered at once,
/// still going. (Before: any number of five-minute waits, each reading the run every
/// second.)
#[tokio::test]
async fn a_start_waiting_for_its_run_counts_against_the_stream_caps() {
    let slow = || Reply::ok(says::openai_text("done")).delayed(Duration::from_secs(5));
    let mock = MockLlm::start(Wire::Openai, vec![slow(), slow()]).await;
    let base = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers
            .insert("llm".into(), provider(Wire::Openai, &base));
        c.http.max_streams_per_principal = 1;
    })
    .await;
    let agent = create_agent(
        &gw,
        json!({"name": "slow", "provider": "llm", "model": "gpt-test"}),
    )
    .await;
    let start = || {
        gw.http
            .post(gw.url(&format!("/v1/agents/{agent}/runs")))
            .json(&json!({"input": "go", "wait_secs": 60}))
            .send()
    };
    let waiting = tokio::spawn(start());
    // The first wait has begun once its run is listed.
    for _ in 0..100 {
        let (_, _, runs) = gw.get("/v1/runs").await;
        if runs["runs"].as_array().map(Vec::len) == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second = tokio::time::timeout(Duration::from_millis(2500), start())
        .await
        .expect("the second start was waited, past the cap")
        .expect("request");
    let (status, _, run) = read(second).await;
    assert_eq!(status, 201, "{run}");
    assert_eq!(run["status"], "running", "{run}");
    assert!(
        !waiting.is_finished(),
        "the wait within the cap ended early"
    );
    waiting.abort();
}

#[tokio::test]
async fn a_run_of_large_steps_is_read_a_page_at_a_time() {
    // Eight turns of three echo calls of 90,000 characters each (each call its own, or
    // the loop would stop a repetition): the arguments in the model's message and in
    // each call's start, the output in each call's end, about 700 kB a turn and 5.5 MB
    // in all.
    let mut replies: Vec<Reply> = (0..8)
        .map(|t| {
            let calls: Vec<(String, String)> = (0..3)
                .map(|i| {
                    let message = format!("{t}-{i} {}", "y".repeat(90_000));
                    (format!("c{t}-{i}"), json!({"message": message}).to_string())
                })
                .collect();
            let calls: Vec<(&str, &str, &str)> = calls
                .iter()
                .map(|(id, args)| (id.as_str(), "echo", args.as_str()))
                .collect();
            Reply::ok(says::openai_calls(&calls))
        })
        .collect();
    replies.push(Reply::ok(says::openai_text("done")));
    let mock = MockLlm::start(Wire::Openai, replies).await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "loud", "provider": "llm", "model": "gpt-test", "tools": ["echo"], "max_turns": 20}),
    )
    .await;
    let started = run(&gw, &agent, "Echo it all").await;
    assert_eq!(started["status"], "completed", "{}", started["error"]);
    assert!(
        started["more_steps"] == true,
        "the run's answer holds only its first steps"
    );
    let run_id = started["id"].as_str().expect("id");

    // GET pages through the journal with `after`; each page stays near 4 MiB.
    let (mut after, mut seqs, mut pages) = (0_i64, Vec::new(), 0);
    loop {
        let response = gw
            .http
            .get(gw.url(&format!("/v1/runs/{run_id}?after={after}")))
            .send()
            .await
            .expect("get");
        assert_eq!(response.status(), 200);
        let body = response.bytes().await.expect("body");
        assert!(body.len() < 5 << 20, "a page of {} bytes", body.len());
        let page: Value = serde_json::from_slice(&body).expect("json");
        let steps = page["steps"].as_array().expect("steps");
        assert!(!steps.is_empty(), "{page}");
        seqs.extend(steps.iter().map(|s| s["seq"].as_i64().expect("seq")));
        after = *seqs.last().expect("seq");
        pages += 1;
        if page["more_steps"] == false {
            assert_eq!(steps.last().expect("step")["type"], "run_finished");
            break;
        }
        assert!(pages < 10, "the pages do not end");
    }
    assert!(pages >= 2, "{pages} pages");
    assert_eq!(
        seqs,
        (1..=after).collect::<Vec<_>>(),
        "every step once, in order"
    );

    // The stream sends every step after the one asked for, across its reads.
    let from = after / 3;
    let text = steps_after(&gw, run_id, from).await;
    let ids = event_ids(&text);
    assert_eq!(ids, (from + 1..=after).collect::<Vec<_>>());

    let (status, _, refused) = gw.get(&format!("/v1/runs/{run_id}?after=-1")).await;
    assert_eq!(status, 400, "{refused}");
}

/// Every run of `gw`'s tenant matching `query` (`status=…` or empty) as a caller paging
/// `limit` at a time over REST sees them: id and status.
async fn runs_paged(gw: &Gateway, query: &str, limit: usize) -> Vec<(String, String)> {
    gw.pages(&format!("/v1/runs?limit={limit}&{query}"), "runs", limit)
        .await
        .iter()
        .map(|r| {
            (
                r["id"].as_str().expect("id").to_owned(),
                r["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect()
}

/// Runs are listed a page at a time over REST: `next_cursor` goes on from each page's
/// last run, every run comes once, newest first, and `status` holds across pages; a
/// cursor the gateway did not make is a 400. (Before: the newest 500 were all a caller
/// could list, and `more: true` led nowhere.)
#[tokio::test]
async fn runs_are_listed_page_after_page_over_rest() {
    let replies = (0..5)
        .map(|i| {
            if i == 2 {
                Reply::status(402, error_body(Wire::Openai, 402, "pay up"))
            } else {
                Reply::ok(says::openai_text("done"))
            }
        })
        .collect();
    let mock = MockLlm::start(Wire::Openai, replies).await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "pager", "provider": "llm", "model": "gpt-test"}),
    )
    .await;
    let mut made = Vec::new();
    for i in 0..5 {
        let run = run(&gw, &agent, &format!("run {i}")).await;
        made.push((
            run["id"].as_str().expect("id").to_owned(),
            run["status"].as_str().expect("status").to_owned(),
        ));
    }
    made.reverse();
    assert_eq!(made[2].1, "failed", "{made:?}");
    for limit in [1, 2, 5] {
        assert_eq!(runs_paged(&gw, "", limit).await, made, "{limit}");
    }
    let completed: Vec<_> = made
        .iter()
        .filter(|r| r.1 == "completed")
        .cloned()
        .collect();
    assert_eq!(runs_paged(&gw, "status=completed", 3).await, completed);
    assert_eq!(runs_paged(&gw, "status=failed", 1).await, [made[2].clone()]);
    assert!(runs_paged(&gw, "status=running", 2).await.is_empty());
    for bad in [
        "status=done",
        "cursor=12",
        "cursor=abc.def",
        "cursor=1.00000000000000000000000000000000x",
    ] {
        let (status, _, problem) = gw.get(&format!("/v1/runs?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {problem}");
    }
}

/// Within a tenant, a caller sees and cancels the runs it started: a colleague's run is
/// "not found" (its input, its tools' results and its answer are the colleague's) and is
/// left out of the list. `audit:read` sees every run, as it reads every call; cancelling
/// another's run needs `agents:manage`. (Before: any `agents:run` caller read, followed
/// and cancelled every run of the tenant, including what tools it may not call returned
/// to an admin's run.)
#[tokio::test]
async fn a_caller_sees_and_cancels_its_own_runs_and_audit_readers_see_all() {
    use crate::approvals::principal;
    let slow = || Reply::ok(says::openai_text("done")).delayed(Duration::from_secs(30));
    let mock = MockLlm::start(Wire::Openai, vec![slow(), slow(), slow()]).await;
    let gw = gateway(&mock, Wire::Openai).await;
    let agent = create_agent(
        &gw,
        json!({"name": "shared", "provider": "llm", "model": "gpt-test"}),
    )
    .await;
    let (base, admin) = (&gw.base, &gw.http);
    let mia = principal(base, admin, "mia", &["agents:run"]).await;
    let max = principal(base, admin, "max", &["agents:run"]).await;
    let auditor = principal(base, admin, "auditor", &["agents:run", "audit:read"]).await;
    let start = |client: &reqwest::Client| {
        let request = client
            .post(gw.url(&format!("/v1/agents/{agent}/runs")))
            .json(&json!({"input": "go"}))
            .send();
        async move {
            let (status, _, run) = read(request.await.expect("request")).await;
            assert_eq!(status, 201, "{run}");
            run["id"].as_str().expect("id").to_owned()
        }
    };
    let mias = start(&mia).await;
    let maxs = start(&max).await;
    let get = |client: &reqwest::Client, path: String| {
        let request = client.get(gw.url(&path)).send();
        async move { read(request.await.expect("request")).await }
    };
    let listed = |client: &reqwest::Client| {
        let request = client.get(gw.url("/v1/runs")).send();
        async move {
            let (status, _, page) = read(request.await.expect("request")).await;
            assert_eq!(status, 200, "{page}");
            let mut ids: Vec<String> = page["runs"]
                .as_array()
                .expect("runs")
                .iter()
                .map(|r| r["id"].as_str().expect("id").to_owned())
                .collect();
            ids.sort();
            ids
        }
    };
    let sorted = |mut ids: Vec<String>| {
        ids.sort();
        ids
    };

    // Each member: its own run, and nothing of the other's.
    assert_eq!(listed(&mia).await, std::slice::from_ref(&mias));
    assert_eq!(listed(&max).await, std::slice::from_ref(&maxs));
    assert_eq!(get(&mia, format!("/v1/runs/{mias}")).await.0, 200);
    for path in [
        format!("/v1/runs/{maxs}"),
        format!("/v1/runs/{maxs}/events"),
    ] {
        let (status, _, problem) = get(&mia, path.clone()).await;
        assert_eq!(status, 404, "{path}: {problem}");
    }
    let cancel = |client: &reqwest::Client, run: &str| {
        let request = client
            .post(gw.url(&format!("/v1/runs/{run}/cancel")))
            .send();
        async move { read(request.await.expect("request")).await }
    };
    let (status, _, problem) = cancel(&mia, &maxs).await;
    assert_eq!(status, 404, "{problem}");

    // The auditor and the admin see both; the auditor may not cancel another's run, the
    // admin (agents:manage) may.
    assert_eq!(
        listed(&auditor).await,
        sorted(vec![mias.clone(), maxs.clone()])
    );
    assert_eq!(
        listed(admin).await,
        sorted(vec![mias.clone(), maxs.clone()])
    );
    let (status, _, run) = get(&auditor, format!("/v1/runs/{maxs}")).await;
    assert_eq!(
        (status, run["id"].as_str()),
        (200, Some(maxs.as_str())),
        "{run}"
    );
    let (status, _, problem) = cancel(&auditor, &maxs).await;
    assert_eq!(status, 403, "{problem}");
    assert_eq!(
        problem["details"]["required_scope"], "agents:manage",
        "{problem}"
    );
    let (status, _, run) = cancel(admin, &maxs).await;
    assert_eq!(status, 202, "{run}");
    let (status, _, run) = cancel(&mia, &mias).await;
    assert_eq!(status, 202, "{run}");
}
