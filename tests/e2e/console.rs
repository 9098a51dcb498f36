//! The console (`/console`) in a real browser: Debian's Chromium driven by playwright-core
//! (`tests/clients/console.mjs`), as a reviewer, an admin and a member would use it, each
//! with their own key. Screenshots of each page go to
//! `target/screenshots/console-*` for a person to look at.

use std::time::Duration;

use serde_json::json;
use toolgate_e2e::llm::{MockLlm, Reply, Wire, says};
use toolgate_e2e::{Gateway, read, run_browser, screenshots};

/// Creates a principal with `scopes` and a key for it; answers (secret, key id).
async fn principal_key(gw: &Gateway, name: &str, scopes: &[&str]) -> (String, String) {
    let (status, _, who) = gw
        .post("/v1/principals", json!({"name": name, "scopes": scopes}))
        .await;
    assert_eq!(status, 201, "{who}");
    let (status, _, key) = gw
        .post("/v1/keys", json!({"name": name, "principal_id": who["id"]}))
        .await;
    assert_eq!(status, 201, "{key}");
    (
        key["secret"].as_str().expect("secret").to_owned(),
        key["id"].as_str().expect("id").to_owned(),
    )
}

/// A model that calls echo, then answers, each reply `delay` after its request.
async fn greeting_model(delay: Duration) -> MockLlm {
    MockLlm::start(
        Wire::Openai,
        vec![
            Reply::ok(says::openai_calls(&[(
                "call_1",
                "echo",
                r#"{"message":"hello"}"#,
            )]))
            .delayed(delay),
            Reply::ok(says::openai_text("I said hello.")).delayed(delay),
        ],
    )
    .await
}

/// The agent `greeter` (provider `llm`, tool `echo`, its replies streamed): its id.
async fn greeter(gw: &Gateway) -> String {
    let (status, _, agent) = gw
        .post(
            "/v1/agents",
            json!({"name": "greeter", "provider": "llm", "model": "gpt-test", "tools": ["echo"],
                   "stream": true}),
        )
        .await;
    assert_eq!(status, 201, "{agent}");
    agent["id"].as_str().expect("agent id").to_owned()
}

/// Approval level 5: the tenant's high- and medium-risk calls wait for a person.
async fn hold_risky_calls(gw: &Gateway) {
    let (status, _, body) = read(
        gw.http
            .put(gw.url("/v1/policy"))
            .json(&json!({"level": 5}))
            .send()
            .await
            .expect("policy"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn console_pages_and_assets_are_served_with_a_strict_policy() {
    let gw = Gateway::start().await;
    for (path, content_type) in [
        ("/console", "text/html; charset=utf-8"),
        ("/console/app.js", "text/javascript; charset=utf-8"),
        ("/console/app.css", "text/css; charset=utf-8"),
    ] {
        let response = reqwest::get(gw.url(path)).await.expect("request");
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(response.headers()["content-type"], content_type);
        let policy = response.headers()["content-security-policy"]
            .to_str()
            .expect("ascii");
        assert!(policy.contains("default-src 'self'"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        let body = response.text().await.expect("body");
        for remote in ["src=\"http", "href=\"http", "url(http", "from \"http"] {
            assert!(!body.contains(remote), "nothing from elsewhere: {path}");
        }
    }
}

#[tokio::test]
async fn a_reviewer_follows_calls_verifies_the_audit_and_approves_in_the_browser() {
    // A model that calls echo, then answers, a little slowly: a run to follow live.
    let mock = greeting_model(Duration::from_millis(800)).await;
    // An upstream MCP server (the official Python SDK's) for the admin to add.
    let (_fixture, fixture_port) = toolgate_e2e::python_server("fixture_server.py").await;
    let llm = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &llm));
        crate::tenant_upstreams::loopback(c);
    })
    .await;
    let agent = greeter(&gw).await;
    hold_risky_calls(&gw).await;
    let (reviewer, reviewer_id) =
        principal_key(&gw, "reviewer", &["approvals:decide", "audit:read"]).await;
    let (member, _) = principal_key(&gw, "member", &["tools:invoke"]).await;
    // Another tenant, with one call of its own.
    let other = gw.create_tenant("globex").await;
    let (status, _, body) = read(
        toolgate_e2e::client_with_key(&other)
            .post(gw.url("/v1/tools/echo/invoke"))
            .json(&json!({"arguments": {"message": "globex's own"}}))
            .send()
            .await
            .expect("globex call"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let shots = screenshots();
    let seen = run_browser(
        "console.mjs",
        &[
            &gw.base,
            &gw.admin_key,
            &reviewer,
            &reviewer_id,
            &member,
            &agent,
            &format!("http://127.0.0.1:{fixture_port}/mcp"),
            shots.to_str().expect("utf-8"),
            &other,
        ],
    )
    .await;
    let live = seen["live"].as_str().expect("live row");
    assert!(live.contains("echo") && live.contains("rest"), "{live}");
    assert_eq!(seen["detail"]["arguments"]["message"], "seen live");
    assert!(
        seen["chart"]
            .as_str()
            .is_some_and(|c| c.starts_with("Last hour: ") && !c.contains(": 0 calls")),
        "{seen}"
    );
    assert!(
        seen["verified"]
            .as_str()
            .is_some_and(|v| v.starts_with("Chain verified")),
        "{seen}"
    );
    assert!(
        seen["card"]
            .as_str()
            .is_some_and(|c| c.contains("execute_command") && c.contains("high risk")),
        "{seen}"
    );
    assert_eq!(seen["released"]["status"], "completed", "{seen}");
    assert_eq!(seen["released"]["result"]["status"], 200, "{seen}");
    let steps: Vec<&str> = seen["runSteps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s.as_str())
        .collect();
    for step in [
        "run_started",
        "model_message",
        "tool_call_finished",
        "run_finished",
    ] {
        assert!(steps.contains(&step), "{step} in {steps:?}");
    }
    // The streamed reply showed as a growing line, which gave way to the whole message.
    assert_eq!(seen["sawTyping"], true, "{seen}");
    assert_eq!(
        seen["runListedAs"],
        json!({"failed": 0, "completed": 1}),
        "the runs list filters by status: {seen}"
    );
    assert!(!steps.contains(&"model_delta"), "{steps:?}");
    assert!(
        seen["runAnswer"]
            .as_str()
            .is_some_and(|a| a.contains("I said hello.")),
        "{seen}"
    );
    assert!(
        seen["secret"].as_str().is_some_and(|s| s.len() > 20),
        "{seen}"
    );
    assert_eq!(
        seen["memberLinks"],
        json!(["Tools"]),
        "no admin page for a member"
    );
    assert_eq!(seen["memberUpstreams"], false, "{seen}");
    assert!(
        seen["waitingDefinition"]
            .as_str()
            .unwrap_or_default()
            .contains("ignore previous instructions"),
        "the console showed the rug pull waiting: {seen}"
    );
    assert!(
        seen["upstream"]
            .as_str()
            .is_some_and(|u| u.contains("connected") && u.contains("add")),
        "{seen}"
    );
    assert_eq!(seen["memberRows"], 0, "nothing of the reviewer's left");
    // Edited in the page to allow one tool, its credentials' form reset after.
    assert_eq!(seen["editedTools"], json!(["fx__add"]), "{seen}");
    assert_eq!(seen["editButton"], "Add upstream", "{seen}");
    // The other tenant's admin: its own call (newest first) and the record of its
    // making only, none of this tenant's runs, keys, upstreams or tools.
    let other = &seen["otherTenant"];
    let audit_rows = other["audit"].as_array().expect("audit rows");
    assert_eq!(audit_rows.len(), 2, "{other}");
    assert!(
        audit_rows[0]
            .as_str()
            .is_some_and(|r| r.contains("\techo\trest")),
        "{other}"
    );
    assert!(
        audit_rows[1]
            .as_str()
            .is_some_and(|r| r.contains("\ttenants.create\tadmin")),
        "{other}"
    );
    assert!(!other.to_string().contains("seen live"), "{other}");
    assert_eq!(other["runs"], 0, "{other}");
    assert_eq!(other["upstreams"], 0, "{other}");
    assert_eq!(other["fxTools"], 0, "{other}");
    assert_eq!(
        other["editing"],
        json!([]),
        "the form adds, as it did: {other}"
    );
    let keys = other["keys"].as_array().expect("keys");
    assert!(
        keys.iter().all(|k| !k
            .as_str()
            .unwrap_or_default()
            .contains("made-in-the-console")
            && !k.as_str().unwrap_or_default().contains("reviewer")),
        "{other}"
    );
    assert_eq!(seen["revoked"], true);
    assert_eq!(seen["phoneOverflow"], false, "fits a phone's width");
    assert_eq!(seen["errors"], json!([]), "{seen}");
    // The decision made in the page is in the audit.
    let (_, _, audit) = gw.get("/v1/audit?adapter=approval").await;
    let decision = &audit["entries"][0];
    assert_eq!(decision["outcome"], "ok", "{audit}");
    // The principal made in the page is a member; the key made for it is its, and live.
    assert!(
        seen["keyFor"]
            .as_str()
            .unwrap_or_default()
            .starts_with("console-made"),
        "{seen}"
    );
    let (_, _, principals) = gw.get("/v1/principals").await;
    let made = principals
        .as_array()
        .expect("principals")
        .iter()
        .find(|p| p["name"] == "console-made")
        .unwrap_or_else(|| panic!("{principals}"));
    assert_eq!(made["roles"], json!(["member"]), "{made}");
    let (_, _, keys) = gw.get("/v1/keys").await;
    assert!(
        keys.as_array()
            .expect("keys")
            .iter()
            .any(|k| k["name"] == "made-in-the-console"
                && k["principal_id"] == made["id"]
                && k["revoked_at"].is_null()),
        "{keys}"
    );
    for page in [
        "login",
        "calls",
        "audit",
        "approvals",
        "runs",
        "keys",
        "member",
        "revoked",
        "other-tenant",
        "upstream-edit",
        "phone",
    ] {
        assert!(shots.join(format!("console-{page}.png")).exists(), "{page}");
    }
}

/// Every page of the console passes axe-core's WCAG 2.1 A/AA rules (no violation at all,
/// whatever its impact), and the console works from the keyboard: the key field takes
/// the first Tab, Enter signs in, Tab walks the header's links in order, and Enter on a
/// link opens its page. Screenshots in `target/screenshots/a11y-*`.
#[tokio::test]
async fn every_console_page_passes_axe_and_works_from_the_keyboard() {
    let mock = greeting_model(Duration::ZERO).await;
    let llm = mock.base.clone();
    let gw = Gateway::start_with(move |c| {
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &llm));
    })
    .await;
    // Something on every page: calls, a held call, a finished run.
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "for the audit"}}))
        .await;
    assert_eq!(status, 200);
    let agent = greeter(&gw).await;
    let (status, _, run) = gw
        .post(
            &format!("/v1/agents/{agent}/runs"),
            json!({"input": "say hello", "wait_secs": 30}),
        )
        .await;
    assert_eq!(status, 201, "{run}");
    hold_risky_calls(&gw).await;
    let (status, _, held) = gw
        .invoke("execute_command", json!({"arguments": {"command": "ls"}}))
        .await;
    assert_eq!(status, 202, "{held}");

    let shots = screenshots();
    let seen = run_browser(
        "a11y.mjs",
        &[
            &gw.base,
            &gw.admin_key,
            run["id"].as_str().expect("run id"),
            shots.to_str().expect("utf-8"),
        ],
    )
    .await;
    for page in [
        "login",
        "calls",
        "audit",
        "approvals",
        "runs",
        "tools",
        "keys",
    ] {
        assert_eq!(
            seen["pages"][page],
            json!([]),
            "{page}: axe found violations: {:#}",
            seen["pages"][page]
        );
        assert!(shots.join(format!("a11y-{page}.png")).exists(), "{page}");
    }
    assert_eq!(seen["firstFocus"], "key", "{seen}");
    let tabs: Vec<&str> = seen["tabs"]
        .as_array()
        .expect("tabs")
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    let links = ["Live calls", "Audit", "Approvals", "Runs", "Tools", "Keys"];
    let reached: Vec<&str> = tabs.iter().copied().filter(|t| links.contains(t)).collect();
    assert_eq!(reached, links, "Tab walks the header in order: {tabs:?}");
    assert_eq!(seen["auditByKeyboard"], true, "{seen}");
    assert_eq!(seen["errors"], json!([]), "{seen}");
    gw.stop().await;
}

/// Single sign-on (`[console.oidc]`) with a real OpenID Provider (panva's oidc-provider,
/// `tests/clients/oidc_provider.mjs`, on loopback): a person signs in through the
/// provider's own login and consent pages, the console gets an access token by the
/// authorization code flow with PKCE, and the gateway takes it as a JWT of its tenant; a
/// person of a tenant the gateway does not know is turned away.
#[tokio::test]
async fn a_person_signs_in_to_the_console_with_the_organisations_openid_provider() {
    let idp_port = toolgate_e2e::free_port();
    let issuer = format!("http://127.0.0.1:{idp_port}");
    let gw = {
        let issuer = issuer.clone();
        Gateway::start_with(move |c| {
            c.auth.jwt = Some(
                serde_json::from_value(json!({
                    "issuer": issuer,
                    "audience": "urn:toolgate",
                    "jwks_url": format!("{issuer}/jwks"),
                }))
                .expect("jwt config"),
            );
            c.console.oidc = Some(
                serde_json::from_value(json!({
                    "issuer": issuer,
                    "client_id": "toolgate-console",
                    "scope": "openid tools:invoke audit:read",
                    "resource": "urn:toolgate",
                }))
                .expect("oidc config"),
            );
        })
        .await
    };
    // The page may reach the provider, and learns of it before sign-in.
    let page = gw.http.get(gw.url("/console")).send().await.expect("page");
    let policy = page
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(
        policy.contains(&format!("connect-src 'self' {issuer};")),
        "{policy}"
    );
    let (status, _, settings) = read(
        reqwest::Client::new()
            .get(gw.url("/console/config.json"))
            .send()
            .await
            .expect("settings"),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        settings["oidc"]["client_id"], "toolgate-console",
        "{settings}"
    );

    let _idp = toolgate_e2e::oidc_provider(idp_port, &gw.url("/console/")).await;

    // One call for the audit page to show.
    let (status, _, body) = gw
        .invoke("echo", json!({"arguments": {"message": "before sign-on"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    let seen = run_browser(
        "console_sso.mjs",
        &[&gw.base, screenshots().to_str().expect("utf-8 path")],
    )
    .await;
    assert!(
        seen["who"].as_str().unwrap_or_default().contains("default"),
        "{seen}"
    );
    assert_eq!(seen["token_parts"], 3, "a JWT, not a key: {seen}");
    assert!(seen["audit_rows"].as_u64().unwrap_or(0) >= 1, "{seen}");
    assert_eq!(
        seen["nav"],
        json!(["Live calls", "Audit", "Tools"]),
        "{seen}"
    );
    assert!(
        seen["refused"]
            .as_str()
            .unwrap_or_default()
            .contains("did not accept"),
        "{seen}"
    );
    assert_eq!(seen["refused_nav_hidden"], true, "{seen}");
    assert_eq!(seen["refused_token"], serde_json::Value::Null, "{seen}");
    gw.stop().await;
}
