//! Tool-definition pinning, the rug-pull defence (issue 29): a tenant's upstream (the
//! official Python SDK's fixture, over Streamable HTTP) changes a tool's description and
//! schema after it was pinned, and adds a look-alike of it. The changed tool is withheld
//! (quarantined, the tenant's default), the change is in the audit with its diff and
//! what reads as written at the model, the look-alike is refused; once a tenant admin
//! approves the new definition, the tool is offered and called as it now is.

use serde_json::{Value, json};
use toolgate_e2e::Gateway;

use crate::tenant_upstreams::{loopback, names, until_tools};

async fn definitions(gw: &Gateway) -> Vec<Value> {
    let (status, _, body) = gw.get("/v1/tool-definitions").await;
    assert_eq!(status, 200, "{body}");
    body["definitions"].as_array().expect("definitions").clone()
}

/// The notes in upstream `fx`'s status once `check` holds for them (fails after 10 s).
async fn notes_until(gw: &Gateway, check: impl Fn(&[String]) -> bool) -> Vec<String> {
    let mut seen = Vec::new();
    for _ in 0..100 {
        let (status, _, body) = gw.get("/v1/upstreams/fx").await;
        assert_eq!(status, 200, "{body}");
        seen = serde_json::from_value(body["status"]["notes"].clone()).unwrap_or_default();
        if check(&seen) {
            return seen;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("upstream fx's notes are {seen:?}");
}

#[tokio::test]
async fn a_changed_tool_definition_is_withheld_until_a_tenant_admin_approves_it() {
    let (_fixture, port) = toolgate_e2e::python_server("fixture_server.py").await;
    let gw = Gateway::start_with(loopback).await;
    crate::tenant_upstreams::add_fixture(&gw, port, "add").await;
    let (status, _, sum) = gw
        .invoke("fx__add", json!({"arguments": {"a": 2, "b": 3}}))
        .await;
    assert_eq!(status, 200, "{sum}");

    // First sight pins every tool, quietly.
    let pinned = definitions(&gw).await;
    let add = pinned
        .iter()
        .find(|d| d["tool"] == "add")
        .unwrap_or_else(|| panic!("{pinned:?}"));
    assert_eq!(add["status"], "pinned", "{add}");
    assert_eq!(add["exported"], "fx__add");
    let first_hash = add["pinned_hash"].clone();

    // The rug pull: `add` changes, a look-alike `ADD` appears.
    let (status, _, pulled) = gw.invoke("fx__rug_pull", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{pulled}");
    until_tools(&gw.http, &gw, "the changed add is withheld", |n| {
        !n.contains(&"fx__add".to_owned())
    })
    .await;
    let listed = names(&gw.http, &gw).await;
    assert!(
        !listed.iter().any(|n| n.eq_ignore_ascii_case("fx__add")),
        "neither the changed tool nor its look-alike is offered: {listed:?}"
    );
    let (status, _, refused) = gw
        .invoke("fx__add", json!({"arguments": {"a": 2, "b": 3, "c": 4}}))
        .await;
    assert_eq!(status, 404, "{refused}");
    // The upstream's status says why each is missing.
    let notes = notes_until(&gw, |n| n.len() == 2).await;
    assert!(
        notes.contains(&r#""fx__add" not offered: its definition awaits approval"#.to_owned()),
        "{notes:?}"
    );
    assert!(
        notes.contains(&r#""fx__ADD" not offered: its name could pass for fx__add"#.to_owned()),
        "{notes:?}"
    );

    let waiting = definitions(&gw).await;
    let add = &waiting[0];
    assert_eq!(
        (&add["tool"], &add["status"]),
        (&json!("add"), &json!("quarantined")),
        "{waiting:?}"
    );
    assert_eq!(add["pinned_hash"], first_hash);
    let diff = add["diff"].as_object().expect("diff");
    assert!(diff.contains_key("description"), "{add}");
    assert!(diff.contains_key("input_schema"), "{add}");
    let findings = add["findings"].to_string();
    assert!(
        findings.contains("ignore previous instructions"),
        "{findings}"
    );
    assert!(findings.contains("do not tell the user"), "{findings}");

    // A page at a time, in the same order; or only those waiting.
    let (_, _, only) = gw.get("/v1/tool-definitions?status=quarantined").await;
    assert_eq!(
        only["definitions"].as_array().map(Vec::len),
        Some(1),
        "{only}"
    );
    assert_eq!(only["definitions"][0]["tool"], "add", "{only}");
    assert!(only.get("next_cursor").is_none(), "{only}");
    let (_, _, pinned) = gw
        .get("/v1/tool-definitions?status=pinned&upstream=fx")
        .await;
    assert_eq!(
        pinned["definitions"].as_array().map(Vec::len),
        Some(waiting.len() - 1),
        "{pinned}"
    );
    let mut paged = Vec::new();
    let mut path = "/v1/tool-definitions?limit=1".to_owned();
    loop {
        let (status, _, page) = gw.get(&path).await;
        assert_eq!(status, 200, "{page}");
        paged.extend(
            page["definitions"]
                .as_array()
                .expect("page")
                .iter()
                .cloned(),
        );
        match page["next_cursor"].as_str() {
            Some(next) => path = format!("/v1/tool-definitions?limit=1&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(paged, waiting, "pages of one");
    for bad in [
        "status=waiting",
        "cursor=zz",
        "limit=0",
        "limit=501",
        "owner=nobody",
    ] {
        let (status, _, body) = gw.get(&format!("/v1/tool-definitions?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (_, _, none) = gw.get("/v1/tool-definitions?upstream=elsewhere").await;
    assert_eq!(none["definitions"], json!([]), "{none}");

    // The audit holds the change, with its diff, in the tenant's chain.
    let (_, _, audit) = gw.get("/v1/audit?adapter=definition").await;
    let row = &audit["entries"][0];
    assert_eq!(row["tool"], "fx__add", "{audit}");
    assert_eq!(row["outcome"], "approval_required", "{row}");
    assert_eq!(row["arguments"]["event"], "changed", "{row}");
    assert!(
        row["arguments"]["diff"]["description"]["after"]
            .as_str()
            .unwrap_or_default()
            .contains("<IMPORTANT>"),
        "{row}"
    );

    // A member may not approve; a tenant admin approves what it looked at.
    let member = {
        let (_, _, who) = gw
            .post(
                "/v1/principals",
                json!({"name": "mia", "roles": ["member"]}),
            )
            .await;
        let (_, _, key) = gw
            .post(
                "/v1/keys",
                json!({"name": "mia", "principal_id": who["id"]}),
            )
            .await;
        toolgate_e2e::client_with_key(key["secret"].as_str().expect("secret"))
    };
    let approve = gw.url("/v1/tool-definitions/fx/add/approve");
    let hash = add["pending_hash"].clone();
    let forbidden = member
        .post(&approve)
        .json(&json!({"hash": hash}))
        .send()
        .await
        .expect("member");
    assert_eq!(forbidden.status(), 403);
    let stale = gw
        .http
        .post(&approve)
        .json(&json!({"hash": first_hash}))
        .send()
        .await
        .expect("stale");
    assert_eq!(
        stale.status(),
        404,
        "only the waiting definition is approved"
    );
    let (status, _, approved) = toolgate_e2e::read(
        gw.http
            .post(&approve)
            .json(&json!({"hash": hash}))
            .send()
            .await
            .expect("approve"),
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(approved["status"], "pinned", "{approved}");
    until_tools(&gw.http, &gw, "the approved add is offered", |n| {
        n.contains(&"fx__add".to_owned())
    })
    .await;
    let (status, _, sum) = gw
        .invoke("fx__add", json!({"arguments": {"a": 2, "b": 3, "c": 4}}))
        .await;
    assert_eq!(status, 200, "{sum}");
    assert_eq!(sum["content"][0]["text"], "9", "{sum}");
    assert!(
        !names(&gw.http, &gw).await.contains(&"fx__ADD".to_owned()),
        "the look-alike stays refused"
    );
    let notes = notes_until(&gw, |n| n.len() == 1).await;
    assert!(
        notes[0].starts_with(r#""fx__ADD" not offered"#),
        "{notes:?}"
    );
    let (_, _, audit) = gw.get("/v1/audit?adapter=definition").await;
    assert_eq!(
        audit["entries"][0]["arguments"]["event"], "approved",
        "{audit}"
    );
    assert_eq!(audit["entries"][0]["outcome"], "ok");
    gw.stop().await;
}

/// An operator's upstream (quarantining) changes a tool: the change is in every
/// tenant's chain, not only the operator's (each tenant is offered the operator's
/// tools), and so is the operator's approval, named by the operator's principal.
#[tokio::test]
async fn an_operator_upstreams_changed_definition_is_audited_in_every_tenants_chain() {
    let (_fixture, port) = toolgate_e2e::python_server("fixture_server.py").await;
    let entry: toolgate_server::config::UpstreamEntry = serde_json::from_value(json!({
        "name": "fx",
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "pin": "quarantine",
    }))
    .expect("an upstream entry");
    let gw = Gateway::start_with(|c| c.upstreams = vec![entry]).await;
    until_tools(&gw.http, &gw, "fx connects", |n| {
        n.contains(&"fx__add".to_owned())
    })
    .await;
    let other = toolgate_e2e::client_with_key(&gw.create_tenant("other").await);
    let definition_rows = |http: reqwest::Client| {
        let url = gw.url("/v1/audit?adapter=definition");
        async move {
            let (status, _, audit) =
                toolgate_e2e::read(http.get(url).send().await.expect("audit")).await;
            assert_eq!(status, 200, "{audit}");
            audit["entries"].as_array().expect("entries").clone()
        }
    };

    let (status, _, pulled) = gw.invoke("fx__rug_pull", json!({"arguments": {}})).await;
    assert_eq!(status, 200, "{pulled}");
    until_tools(
        &other,
        &gw,
        "the changed add is withheld from the other tenant",
        |n| !n.contains(&"fx__add".to_owned()),
    )
    .await;
    for (who, http) in [
        ("operator's tenant", gw.http.clone()),
        ("other", other.clone()),
    ] {
        let rows = definition_rows(http).await;
        let changed = rows
            .iter()
            .find(|r| r["tool"] == "fx__add" && r["arguments"]["event"] == "changed")
            .unwrap_or_else(|| panic!("{who}: no change row in {rows:?}"));
        assert_eq!(changed["outcome"], "approval_required", "{who}: {changed}");
        assert!(
            changed["arguments"]["diff"]["description"]["after"]
                .as_str()
                .unwrap_or_default()
                .contains("<IMPORTANT>"),
            "{who}: {changed}"
        );
    }

    let (_, _, waiting) = gw.get("/v1/tool-definitions?owner=operator").await;
    let add = waiting["definitions"]
        .as_array()
        .expect("definitions")
        .iter()
        .find(|d| d["tool"] == "add")
        .unwrap_or_else(|| panic!("{waiting}"))
        .clone();
    assert_eq!(add["status"], "quarantined", "{add}");
    let (status, _, approved) = gw
        .post(
            "/v1/tool-definitions/fx/add/approve?owner=operator",
            json!({"hash": add["pending_hash"]}),
        )
        .await;
    assert_eq!(status, 200, "{approved}");
    until_tools(
        &other,
        &gw,
        "the approved add is offered to the other tenant",
        |n| n.contains(&"fx__add".to_owned()),
    )
    .await;
    let (_, _, me) = gw.get("/v1/me").await;
    for (who, http) in [
        ("operator's tenant", gw.http.clone()),
        ("other", other.clone()),
    ] {
        let rows = definition_rows(http).await;
        let approval = rows
            .iter()
            .find(|r| r["tool"] == "fx__add" && r["arguments"]["event"] == "approved")
            .unwrap_or_else(|| panic!("{who}: no approval row in {rows:?}"));
        assert_eq!(approval["outcome"], "ok", "{who}: {approval}");
        assert_eq!(
            approval["principal_id"], me["principal_id"],
            "{who}: the operator approved: {approval}"
        );
    }
    gw.stop().await;
}

/// Tool overrides (issue 29): a tenant's upstream tool renamed, described anew, with an
/// argument fixed by the gateway: callers see and call it by its new name, its schema
/// lacks the fixed argument, and a caller cannot set it. A name too long once prefixed
/// is refused, not cut short.
#[tokio::test]
async fn an_overridden_tool_is_called_by_its_new_name_with_its_fixed_argument() {
    let (_fixture, port) = toolgate_e2e::python_server("fixture_server.py").await;
    let gw = Gateway::start_with(loopback).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (status, _, refused) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "fx", "url": url,
                   "overrides": {"add": {"name": "x".repeat(62)}}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["errors"][0]["pointer"], "/overrides/add/name",
        "{refused}"
    );
    let (status, _, created) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "fx", "url": url, "overrides": {"add": {
                "name": "plus_ten", "description": "Adds ten to a number.", "fixed": {"b": 10}}}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    until_tools(&gw.http, &gw, "fx connects", |n| {
        n.contains(&"fx__plus_ten".to_owned())
    })
    .await;
    assert!(!names(&gw.http, &gw).await.contains(&"fx__add".to_owned()));
    let (status, _, tool) = gw.get("/v1/tools/fx__plus_ten").await;
    assert_eq!(status, 200, "{tool}");
    assert_eq!(tool["description"], "Adds ten to a number.", "{tool}");
    let schema = &tool["input_schema"];
    assert!(schema["properties"].get("b").is_none(), "{schema}");
    assert_eq!(schema["required"], json!(["a"]), "{schema}");
    let (status, _, sum) = gw
        .invoke("fx__plus_ten", json!({"arguments": {"a": 1}}))
        .await;
    assert_eq!(status, 200, "{sum}");
    assert_eq!(sum["content"][0]["text"], "11", "{sum}");
    let (status, _, refused) = gw
        .invoke("fx__plus_ten", json!({"arguments": {"a": 1, "b": 5}}))
        .await;
    assert_eq!(status, 400, "{refused}");
    let said = refused.to_string();
    assert!(
        said.contains("set by the gateway") || said.contains("\"pointer\":\"/b\""),
        "{refused}"
    );
    gw.stop().await;
}
