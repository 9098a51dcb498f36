//! REST and MCP calls held for approval: decided by someone else, waited on, denied, expired, retried, elicited.

use super::*;

#[tokio::test]
async fn a_rest_call_waits_for_someone_else_to_approve_then_runs_once() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 5})).await;
    let reviewer = principal(
        &base,
        &gw.http,
        "reviewer",
        &["approvals:decide", "audit:read"],
    )
    .await;

    // Low risk runs; high risk waits: 202, the approval id, a status URL.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "hi"}}))
        .await;
    assert_eq!(status, 200);
    let command = json!({"arguments": {"command": "echo ran >> log.txt; cat log.txt"}});
    let response = gw
        .http
        .post(gw.url("/v1/tools/execute_command/invoke"))
        .json(&command)
        .send()
        .await
        .expect("request");
    let location = response.headers()["location"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let (status, _, held) = read(response).await;
    assert_eq!(status, 202, "{held}");
    assert_eq!(held["status"], "awaiting_approval");
    assert_eq!(location, held["status_url"]);
    let approval = held["approval_id"]
        .as_str()
        .expect("approval id")
        .to_owned();
    assert!(
        !gw.workspace().join("log.txt").exists(),
        "ran before approval"
    );

    // Listed for the reviewer, arguments shown; the requester cannot decide its own call.
    let (status, list) = get(&base, &reviewer, "/v1/approvals").await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["approvals"][0]["id"], approval.as_str());
    assert_eq!(list["approvals"][0]["tool"], "execute_command");
    assert_eq!(list["approvals"][0]["risk"], "high");
    assert_eq!(list["approvals"][0]["adapter"], "rest");
    let (status, body) = decide(&base, &gw.http, &approval, "approve", "mine").await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap_or("")
            .contains("someone else"),
        "{body}"
    );

    // Another tenant neither sees nor decides it.
    let other = client_with_key(&gw.create_tenant("other").await);
    let (status, _) = get(&base, &other, &format!("/v1/approvals/{approval}")).await;
    assert_eq!(status, 404);
    let (status, list) = get(&base, &other, "/v1/approvals").await;
    assert_eq!(
        (status, list["approvals"].as_array().map(Vec::len)),
        (200, Some(0))
    );
    let (status, _) = decide(&base, &other, &approval, "approve", "sure").await;
    assert_eq!(status, 404);
    let (status, _) = get(&base, &other, &location).await;
    assert_eq!(status, 404);

    // Approved: the call runs once, its outcome at the status URL.
    let (status, decided) = decide(&base, &reviewer, &approval, "approve", "looks safe").await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "approved");
    let (status, body) = decide(&base, &reviewer, &approval, "deny", "changed my mind").await;
    assert_eq!(status, 409, "decided once: {body}");
    let mut call = Value::Null;
    for _ in 0..100 {
        let (status, body) = get(&base, &gw.http, &location).await;
        assert_eq!(status, 200, "{body}");
        if body["status"] == "completed" {
            call = body;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(call["result"]["status"], 200, "{call}");
    let text = call["result"]["body"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with("ran\n"), "{text}");
    assert_eq!(
        std::fs::read_to_string(gw.workspace().join("log.txt")).expect("ran"),
        "ran\n"
    );

    // The audit log: the held call, the decision, the call that ran.
    let rows = audit_of(&base, &reviewer, &approval).await;
    assert_eq!(
        summary(&rows),
        [
            ("rest".into(), "approval_required".into()),
            ("approval".into(), "ok".into()),
            ("rest".into(), "ok".into()),
        ],
        "{rows:#?}"
    );
    assert_eq!(rows[0]["principal_id"], rows[2]["principal_id"]);
    assert_ne!(rows[0]["principal_id"], rows[1]["principal_id"]);
}

#[tokio::test]
async fn prefer_wait_answers_with_the_outcome_and_a_denial_is_a_403_with_the_reason() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let approve_next = |decision: &'static str, reason: &'static str| {
        let reviewer = reviewer.clone();
        let base = base.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                let (_, list) = get(&base, &reviewer, "/v1/approvals").await;
                if let Some(id) = list["approvals"][0]["id"].as_str() {
                    let (status, body) = decide(&base, &reviewer, id, decision, reason).await;
                    assert_eq!(status, 200, "{body}");
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("no approval appeared");
        })
    };
    let waiting = |message: &'static str| {
        gw.http
            .post(gw.url("/v1/tools/echo/invoke"))
            .header("prefer", "wait=20")
            .json(&json!({"arguments": {"message": message}}))
            .send()
    };

    let decider = approve_next("approve", "ok");
    let (status, _, body) = read(waiting("first").await.expect("request")).await;
    decider.await.expect("decider");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["structured"]["message"], "first");

    let decider = approve_next("deny", "not this one");
    let (status, content_type, problem) = read(waiting("second").await.expect("request")).await;
    decider.await.expect("decider");
    assert_eq!(
        (status, content_type.as_str()),
        (403, "application/problem+json"),
        "{problem}"
    );
    assert_eq!(problem["type"], "urn:toolgate:error:denied");
    assert_eq!(problem["details"]["reason"], "not this one");
}

#[tokio::test]
async fn an_expired_approval_cannot_be_decided_and_counts_as_denied() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9, "approval_ttl_secs": 1})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let (status, _, held) = gw
        .invoke("echo", json!({"arguments": {"message": "late"}}))
        .await;
    assert_eq!(status, 202, "{held}");
    let approval = held["approval_id"].as_str().expect("id").to_owned();
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, body) = decide(&base, &reviewer, &approval, "approve", "too late").await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("expired"),
        "{body}"
    );
    let (status, view) = get(&base, &reviewer, &format!("/v1/approvals/{approval}")).await;
    assert_eq!(
        (status, view["status"].as_str()),
        (200, Some("expired")),
        "{view}"
    );
    let (_, call) = get(
        &base,
        &gw.http,
        &format!("/v1/calls/{}", held["call_id"].as_str().expect("id")),
    )
    .await;
    assert_eq!(call["status"], "expired", "{call}");
    let (status, list) = get(&base, &reviewer, "/v1/approvals?status=expired").await;
    assert_eq!(
        (status, list["approvals"].as_array().map(Vec::len)),
        (200, Some(1))
    );

    // Bad policies are refused, each problem named.
    let (status, _, problem) = read(
        gw.http
            .put(gw.url("/v1/policy"))
            .json(&json!({"level": 11, "approval_ttl_secs": 0, "rules": [{"action": "deny"}]}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 400, "{problem}");
    let pointers: Vec<&str> = problem["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["pointer"].as_str())
        .collect();
    assert_eq!(pointers, ["/level", "/approval_ttl_secs", "/rules/0"]);
}

#[tokio::test]
async fn an_mcp_call_gets_an_error_result_naming_the_approval_and_runs_when_retried() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(
        &base,
        &gw.http,
        json!({"level": 9, "rules": [{"tool": "list_files", "action": "deny"}]}),
    )
    .await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let client = crate::mcp::connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    let call = || {
        let Value::Object(args) = json!({"message": "via mcp"}) else {
            unreachable!()
        };
        CallToolRequestParams::new("echo").with_arguments(args)
    };
    let held = client.call_tool(call()).await.expect("tools/call");
    let approval = held_for(&held);
    // Retrying before a decision waits on the same approval.
    let again = client.call_tool(call()).await.expect("tools/call");
    assert!(
        again.content[0]
            .as_text()
            .expect("text")
            .text
            .contains(&approval)
    );

    let (status, body) = decide(&base, &reviewer, &approval, "approve", "fine").await;
    assert_eq!(status, 200, "{body}");
    let ran = client.call_tool(call()).await.expect("tools/call");
    assert_eq!(ran.is_error, Some(false), "{ran:?}");
    assert_eq!(ran.structured_content, Some(json!({"message": "via mcp"})));
    // Used once: the next identical call asks again.
    let next = client.call_tool(call()).await.expect("tools/call");
    assert_eq!(next.is_error, Some(true), "{next:?}");

    // A rule that denies outright needs no person.
    let Value::Object(args) = json!({}) else {
        unreachable!()
    };
    let denied = client
        .call_tool(CallToolRequestParams::new("list_files").with_arguments(args))
        .await
        .expect("tools/call");
    let text = denied.content[0].as_text().expect("text").text.clone();
    assert!(text.contains("\"denied\""), "{text}");
    client.cancel().await.expect("close");
}

/// The approval an MCP call's error result says it waits for.
fn held_for(result: &rmcp::model::CallToolResult) -> String {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let text = &result.content[0].as_text().expect("text").text;
    let error: Value = serde_json::from_str(text).expect("JSON");
    assert_eq!(error["error"]["kind"], "approval_required", "{text}");
    let approval = error["error"]["details"]["approval_id"]
        .as_str()
        .expect("id")
        .to_owned();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains(&approval)
    );
    approval
}

#[tokio::test]
async fn an_approved_mcp_call_not_made_in_time_lapses_and_asks_again() {
    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9, "approval_ttl_secs": 2})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let client = crate::mcp::connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    let call = || {
        let Value::Object(args) = json!({"message": "much later"}) else {
            unreachable!()
        };
        CallToolRequestParams::new("echo").with_arguments(args)
    };
    let approval = held_for(&client.call_tool(call()).await.expect("tools/call"));
    let (status, body) = decide(&base, &reviewer, &approval, "approve", "now, not later").await;
    assert_eq!(status, 200, "{body}");
    let (_, listed) = get(&base, &reviewer, "/v1/approvals?status=approved").await;
    assert_eq!(listed["approvals"][0]["id"], approval.as_str(), "{listed}");

    // The client comes back after the tenant's approval time: the yes has lapsed, so
    // the call asks anew instead of running on an old decision.
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let late = client.call_tool(call()).await.expect("tools/call");
    assert_ne!(
        late.is_error,
        Some(false),
        "a lapsed approval let the call run: {late:?}"
    );
    let again = held_for(&late);
    assert_ne!(again, approval);
    let (status, view) = get(&base, &reviewer, &format!("/v1/approvals/{approval}")).await;
    assert_eq!(
        (status, view["status"].as_str()),
        (200, Some("expired")),
        "{view}"
    );
    assert!(
        view["reason"].as_str().unwrap_or("").contains("lapsed"),
        "{view}"
    );
    let (_, listed) = get(&base, &reviewer, "/v1/approvals?status=approved").await;
    assert_eq!(listed["approvals"], json!([]), "{listed}");
    client.cancel().await.expect("close");
}

#[tokio::test]
async fn an_mcp_client_that_can_elicit_lets_its_user_decide_when_the_tenant_allows_it() {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let gw = Gateway::start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9, "self_approval": true})).await;
    let call = |message: &str| {
        let Value::Object(args) = json!({"message": message}) else {
            unreachable!()
        };
        CallToolRequestParams::new("echo").with_arguments(args)
    };
    for approve in [true, false] {
        let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
                .auth_header(gw.admin_key.clone()),
        );
        let client = User {
            approve,
            reason: "asked in the client".into(),
            asked: asked.clone(),
        }
        .serve(transport)
        .await
        .expect("connect");
        let result = client
            .call_tool(call(&format!("approve={approve}")))
            .await
            .expect("tools/call");
        let prompts = asked.lock().expect("lock").clone();
        assert_eq!(prompts.len(), 1, "{prompts:?}");
        assert!(prompts[0].contains("echo"), "{prompts:?}");
        if approve {
            assert_eq!(result.is_error, Some(false), "{result:?}");
            assert_eq!(
                result.structured_content,
                Some(json!({"message": "approve=true"}))
            );
        } else {
            assert_eq!(result.is_error, Some(true), "{result:?}");
            let text = result.content[0].as_text().expect("text").text.clone();
            assert!(
                text.contains("\"denied\"") && text.contains("asked in the client"),
                "{text}"
            );
        }
        client.cancel().await.expect("close");
    }
    // Without self-approval the client is not asked: the call stays held.
    put_policy(&base, &gw.http, json!({"level": 9})).await;
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
            .auth_header(gw.admin_key.clone()),
    );
    let client = User {
        approve: true,
        reason: "asked in the client".into(),
        asked: asked.clone(),
    }
    .serve(transport)
    .await
    .expect("connect");
    let held = client.call_tool(call("held")).await.expect("tools/call");
    assert_eq!(held.is_error, Some(true));
    assert!(
        held.content[0]
            .as_text()
            .expect("text")
            .text
            .contains("approval_required")
    );
    assert!(asked.lock().expect("lock").is_empty());
    client.cancel().await.expect("close");

    // A decision through the client follows the rules a REST one does: a reason longer
    // than 2,000 characters is refused there, and here too (it was taken): the call
    // stays held, its approval pending.
    put_policy(&base, &gw.http, json!({"level": 9, "self_approval": true})).await;
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp"))
            .auth_header(gw.admin_key.clone()),
    );
    let client = User {
        approve: true,
        reason: "x".repeat(2001),
        asked: asked.clone(),
    }
    .serve(transport)
    .await
    .expect("connect");
    let held = client
        .call_tool(call("long reason"))
        .await
        .expect("tools/call");
    assert_eq!(held.is_error, Some(true), "{held:?}");
    assert_eq!(asked.lock().expect("lock").len(), 1, "the user was asked");
    let (_, _, pending) = gw.get("/v1/approvals?status=pending").await;
    assert!(
        pending.to_string().contains("long reason"),
        "still pending: {pending}"
    );
    client.cancel().await.expect("close");
}

/// An approved REST call whose instance stopped while making it (here: what a killed
/// gateway leaves, the call started an hour ago and no outcome kept) gets an outcome
/// that says so from the next instance, which a waiting client and the status URL see.
/// (Before: `GET /v1/calls/{id}` answered `running` for good.)
#[tokio::test]
async fn an_approved_call_whose_instance_stopped_mid_call_is_not_running_for_good() {
    use sqlx::Connection;
    let data = tempfile::tempdir().expect("data dir");
    let start = || {
        let dir = data.path().to_path_buf();
        Gateway::start_with(move |c| c.data_dir = dir)
    };
    let gw = start().await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let (status, _, held) = gw
        .invoke("echo", json!({"arguments": {"message": "once"}}))
        .await;
    assert_eq!(status, 202, "{held}");
    let approval = held["approval_id"].as_str().expect("approval").to_owned();
    let status_url = held["status_url"].as_str().expect("status url").to_owned();
    let (status, body) = decide(&base, &reviewer, &approval, "approve", "ok").await;
    assert_eq!(status, 200, "{body}");
    let mut call = Value::Null;
    for _ in 0..100 {
        call = get(&base, &gw.http, &status_url).await.1;
        if call["status"] == "completed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(call["result"]["status"], 200, "{call}");
    gw.stop().await;

    // What a gateway killed while making the call leaves behind.
    let file = format!("sqlite://{}", data.path().join("toolgate.db").display());
    let mut db = sqlx::SqliteConnection::connect(&file).await.expect("open");
    let hour_ago = chrono::Utc::now() - chrono::Duration::hours(1);
    let changed =
        sqlx::query("update approval set result = null, used_at = ? where approval_id = ?")
            .bind(hour_ago)
            .bind(&approval)
            .execute(&mut db)
            .await
            .expect("update");
    assert_eq!(changed.rows_affected(), 1);
    db.close().await.expect("close");

    let gw = start().await;
    for _ in 0..100 {
        call = get(&gw.base, &gw.http, &status_url).await.1;
        if call["status"] != "running" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(call["status"], "completed", "{call}");
    assert_eq!(call["result"]["status"], 503, "{call}");
    let detail = call["result"]["body"]["detail"].as_str().unwrap_or("");
    assert!(
        detail.contains("stopped before its outcome was kept"),
        "{call}"
    );
    assert!(detail.contains("audit log"), "{call}");
}

/// A graceful stop (SIGTERM) waits for the approved REST calls the instance is making:
/// the call's outcome is kept, and its status URL says so on the next instance. (Before:
/// the stopping runtime dropped the call midway, its outcome was never kept, and it said
/// `running` until another instance marked it interrupted, minutes later.)
#[tokio::test]
async fn a_graceful_stop_waits_for_the_approved_calls_it_is_making() {
    let db = PgDb::create().await;
    let dirs = tempfile::tempdir().expect("temp");
    let data = dirs.path().join("a");
    // No provider is asked here.
    let mut first = spawn_gateway(&data, &db.url, "http://127.0.0.1:9");
    let key = std::fs::read_to_string(data.join("admin-api-key"))
        .expect("admin key")
        .trim()
        .to_owned();
    let admin = client_with_key(&key);
    put_policy(&first.base, &admin, json!({"level": 9})).await;
    let reviewer = principal(&first.base, &admin, "reviewer", &["approvals:decide"]).await;
    let (status, _, held) = read(
        admin
            .post(format!("{}/v1/tools/execute_command/invoke", first.base))
            .json(&json!({"arguments": {"command": "sleep 2; echo finished"}}))
            .send()
            .await
            .expect("request"),
    )
    .await;
    assert_eq!(status, 202, "{held}");
    let approval = held["approval_id"].as_str().expect("approval").to_owned();
    let status_url = held["status_url"].as_str().expect("status url").to_owned();
    let (status, body) = decide(&first.base, &reviewer, &approval, "approve", "go").await;
    assert_eq!(status, 200, "{body}");

    // The call is running (its command sleeps): stop the gateway as an orchestrator does.
    let stopped = Command::new("kill")
        .args(["-TERM", &first.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(stopped.success());
    let exited = first.child.wait().expect("wait");
    assert!(exited.success(), "{exited:?}");

    let second = spawn_gateway(&data, &db.url, "http://127.0.0.1:9");
    let (status, call) = get(&second.base, &admin, &status_url).await;
    assert_eq!(status, 200, "{call}");
    assert_eq!(call["status"], "completed", "{call}");
    assert_eq!(call["result"]["status"], 200, "{call}");
    let text = call["result"]["body"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    assert!(text.starts_with("finished"), "{call}");
    drop(second);
    db.drop_db().await;
}

/// Approvals are listed a page at a time: `next_cursor` goes on from each page's last
/// approval, every one comes once, newest first, under `pending` and `all` alike; a
/// cursor the gateway did not make is a 400. (Before: the newest 500 were all a reviewer
/// could list, and `more: true` led nowhere.)
#[tokio::test]
async fn approvals_are_listed_page_after_page() {
    let gw = Gateway::start().await;
    put_policy(&gw.base, &gw.http, json!({"level": 9})).await;
    let mut held = Vec::new();
    for i in 0..5 {
        let (status, _, call) = gw
            .invoke(
                "echo",
                json!({"arguments": {"message": format!("held {i}")}}),
            )
            .await;
        assert_eq!(status, 202, "{call}");
        held.push(call["approval_id"].as_str().expect("approval").to_owned());
    }
    held.reverse();
    for query in ["status=pending", "status=all"] {
        for limit in [1, 2, 5] {
            let seen: Vec<String> = gw
                .pages(
                    &format!("/v1/approvals?{query}&limit={limit}"),
                    "approvals",
                    limit,
                )
                .await
                .iter()
                .map(|a| a["id"].as_str().expect("id").to_owned())
                .collect();
            assert_eq!(seen, held, "{query} {limit}");
        }
    }
    let (_, _, none) = gw.get("/v1/approvals?status=denied").await;
    assert_eq!(none["approvals"], json!([]), "{none}");
    for bad in [
        "cursor=",
        "cursor=x.y",
        "cursor=-1.0123456789abcdef0123456789abcdef0",
    ] {
        let (status, _, problem) = gw.get(&format!("/v1/approvals?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {problem}");
    }
}

/// One principal cannot bury the approvers' queue (nor fill the store with held
/// arguments): past `limits.principal_pending_approvals` waiting calls, the next one is
/// refused with 429 and `Retry-After`, nothing asked for, its refusal audited; a
/// decision makes room.
#[tokio::test]
async fn calls_waiting_for_approval_are_bounded_and_one_more_is_refused_with_a_429() {
    let gw = Gateway::start_with(|c| c.limits.principal_pending_approvals = 2).await;
    let base = gw.base.clone();
    put_policy(&base, &gw.http, json!({"level": 9})).await;
    let reviewer = principal(&base, &gw.http, "reviewer", &["approvals:decide"]).await;
    let call = |n: u32| json!({"arguments": {"message": format!("call {n}")}});
    let mut held = Vec::new();
    for n in 0..2 {
        let (status, _, body) = gw.invoke("echo", call(n)).await;
        assert_eq!(status, 202, "{body}");
        held.push(body["approval_id"].as_str().expect("id").to_owned());
    }
    let response = gw
        .http
        .post(gw.url("/v1/tools/echo/invoke"))
        .json(&call(2))
        .send()
        .await
        .expect("request");
    let retry_after = response.headers().get("retry-after").cloned();
    let (status, _, refused) = read(response).await;
    assert_eq!(status, 429, "{refused}");
    assert_eq!(
        retry_after.as_ref().and_then(|v| v.to_str().ok()),
        Some("60")
    );
    let detail = refused["detail"].as_str().expect("detail");
    assert!(
        detail.contains("limits.principal_pending_approvals"),
        "{refused}"
    );
    assert!(refused["approval_id"].is_null(), "{refused}");
    let (_, list) = get(&base, &reviewer, "/v1/approvals?status=pending").await;
    assert_eq!(
        list["approvals"].as_array().map(Vec::len),
        Some(2),
        "{list}"
    );
    let (_, audit) = get(&base, &gw.http, "/v1/audit?outcome=rate_limited").await;
    let rows = audit["entries"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{audit}");
    assert_eq!(rows[0]["tool"], "echo", "{audit}");

    // A decision makes room.
    let (status, body) = decide(&base, &reviewer, &held[0], "deny", "not now").await;
    assert_eq!(status, 200, "{body}");
    let (status, _, body) = gw.invoke("echo", call(2)).await;
    assert_eq!(status, 202, "{body}");
}
