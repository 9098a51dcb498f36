//! Upstreams' resources and prompts over MCP: a tenant's own upstream (the conformance
//! fixture on the official Python SDK, over Streamable HTTP) is listed, read, subscribed
//! to, asked for prompts and for argument completions by that tenant's callers holding
//! `tools:invoke`, and by no one else; subscriptions are shared upstream and end with the
//! sessions that hold them.

use rmcp::ServiceError;
use rmcp::model::{
    ArgumentInfo, CompleteRequestParams, CompleteResult, CompletionContext, ErrorCode,
    GetPromptRequestParams, ProtocolVersion, ReadResourceRequestParams, Reference,
};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use toolgate_e2e::{Gateway, sdk_clients};

use crate::mcp::connect;
use crate::tenant_upstreams::loopback;

type Client = RunningService<RoleClient, rmcp::model::ClientConfig>;

mod subscriptions;

const WATCHED: &str = "test://watched-resource";

/// What `client` is shown: resource URIs, template URIs and prompt names.
async fn shown(client: &Client) -> (Vec<String>, Vec<String>, Vec<String>) {
    let resources = client.list_all_resources().await.expect("resources/list");
    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    let prompts = client.list_all_prompts().await.expect("prompts/list");
    (
        resources.into_iter().map(|r| r.uri).collect(),
        templates.into_iter().map(|t| t.uri_template).collect(),
        prompts.into_iter().map(|p| p.name).collect(),
    )
}

fn code(result: Result<impl std::fmt::Debug, ServiceError>) -> ErrorCode {
    match result {
        Err(ServiceError::McpError(err)) => err.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
#[allow(deprecated)] // resources/subscribe: what clients before 2026-07-28 use
async fn a_tenants_upstream_resources_and_prompts_reach_that_tenant_only() {
    let (_fixture, port) = toolgate_e2e::python_server("conformance_fixture.py").await;
    let gw = Gateway::start_with(loopback).await;
    let b_key = gw.create_tenant("globex").await;
    crate::tenant_upstreams::add_fixture(&gw, port, "test_simple_text").await;

    // A sees the upstream's resources as they are, its prompts under the upstream's prefix.
    let a = connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    let (resources, templates, prompts) = shown(&a).await;
    assert!(
        resources.contains(&"test://static-text".to_owned()),
        "{resources:?}"
    );
    assert_eq!(templates, ["test://template/{id}/data"]);
    assert!(
        prompts.contains(&"fx__test_prompt_with_arguments".to_owned()),
        "{prompts:?}"
    );
    assert!(
        !prompts.contains(&"test_simple_prompt".to_owned()),
        "{prompts:?}"
    );

    // Reads go to the upstream that listed the URI, or whose template matches it.
    let read = |uri: &str| ReadResourceRequestParams::new(uri);
    let text = a
        .read_resource(read("test://static-text"))
        .await
        .expect("read");
    let text = serde_json::to_value(&text).expect("json");
    assert_eq!(
        text["contents"][0]["text"], "This is the content of the static text resource.",
        "{text}"
    );
    let data = a
        .read_resource(read("test://template/42/data"))
        .await
        .expect("read through a template");
    let data = serde_json::to_value(&data).expect("json");
    let data: Value = serde_json::from_str(data["contents"][0]["text"].as_str().expect("text"))
        .expect("the template's JSON");
    assert_eq!(data["id"], "42", "{data}");
    assert_eq!(
        code(a.read_resource(read("test://nowhere")).await),
        ErrorCode::RESOURCE_NOT_FOUND
    );

    // Prompts go to the upstream under its own name, with the arguments as given.
    let mut args = serde_json::Map::new();
    args.insert("arg1".into(), json!("hello"));
    args.insert("arg2".into(), json!("world"));
    let got = a
        .get_prompt(
            GetPromptRequestParams::new("fx__test_prompt_with_arguments").with_arguments(args),
        )
        .await
        .expect("prompts/get");
    let got = serde_json::to_value(&got).expect("json").to_string();
    assert!(got.contains("arg1='hello', arg2='world'"), "{got}");

    // Argument completion goes to the upstream too: a prompt's under its own name (with the
    // context of arguments already given), a template's by the template.
    assert!(
        a.peer_info()
            .is_some_and(|info| info.capabilities.completions.is_some()),
        "the gateway offers completion"
    );
    let prompt_ref = || Reference::for_prompt("fx__test_prompt_with_arguments");
    let completed = |result: Result<CompleteResult, ServiceError>| {
        result.expect("completion/complete").completion.values
    };
    assert_eq!(
        completed(
            a.complete(CompleteRequestParams::new(
                prompt_ref(),
                ArgumentInfo::new("arg1", "hel")
            ))
            .await
        ),
        ["hello", "help"]
    );
    let mut given = CompleteRequestParams::new(prompt_ref(), ArgumentInfo::new("arg2", ""));
    given.context = Some(CompletionContext::with_arguments(
        [("arg1".to_owned(), "world".to_owned())].into(),
    ));
    assert_eq!(
        completed(a.complete(given).await),
        ["world-again", "world-once"]
    );
    let template_ref = || Reference::for_resource("test://template/{id}/data");
    assert_eq!(
        completed(
            a.complete(CompleteRequestParams::new(
                template_ref(),
                ArgumentInfo::new("id", "42")
            ))
            .await
        ),
        ["42", "420"]
    );
    assert_eq!(
        code(
            a.complete(CompleteRequestParams::new(
                Reference::for_prompt("test_prompt_with_arguments"),
                ArgumentInfo::new("arg1", "")
            ))
            .await
        ),
        ErrorCode::INVALID_PARAMS,
        "a prompt is completed only under the gateway's name"
    );

    // Tenant B sees none of it and reaches none of it, by URI or by name.
    let b = connect(&gw, &b_key, ProtocolVersion::V_2025_11_25).await;
    assert_eq!(shown(&b).await, (vec![], vec![], vec![]));
    assert_eq!(
        code(b.read_resource(read("test://static-text")).await),
        ErrorCode::RESOURCE_NOT_FOUND
    );
    assert_eq!(
        code(b.read_resource(read("test://template/42/data")).await),
        ErrorCode::RESOURCE_NOT_FOUND
    );
    assert_eq!(
        code(
            b.subscribe(rmcp::model::SubscribeRequestParams::new(
                "test://watched-resource"
            ))
            .await
        ),
        ErrorCode::RESOURCE_NOT_FOUND
    );
    assert_eq!(
        code(
            b.get_prompt(GetPromptRequestParams::new("fx__test_simple_prompt"))
                .await
        ),
        ErrorCode::INVALID_PARAMS
    );
    for reference in [prompt_ref(), template_ref()] {
        assert_eq!(
            code(
                b.complete(CompleteRequestParams::new(
                    reference,
                    ArgumentInfo::new("arg1", "")
                ))
                .await
            ),
            ErrorCode::INVALID_PARAMS
        );
    }

    // Nor does a principal of A without `tools:invoke`.
    let (status, _, viewer) = gw
        .post(
            "/v1/principals",
            json!({"name": "viewer", "scopes": ["audit:read"]}),
        )
        .await;
    assert_eq!(status, 201, "{viewer}");
    let (status, _, key) = gw
        .post(
            "/v1/keys",
            json!({"name": "viewer", "principal_id": viewer["id"]}),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let viewer = connect(
        &gw,
        key["secret"].as_str().expect("secret"),
        ProtocolVersion::V_2025_11_25,
    )
    .await;
    assert_eq!(shown(&viewer).await, (vec![], vec![], vec![]));
    assert_eq!(
        code(viewer.read_resource(read("test://static-text")).await),
        ErrorCode::RESOURCE_NOT_FOUND
    );

    // A change to A's upstream's resources is news to A's sessions only.
    let (a_session, mut a_heard) = subscriber(&gw, &gw.admin_key).await;
    let (b_session, mut b_heard) = subscriber(&gw, &b_key).await;
    let (status, _, done) = gw
        .invoke(
            "fx__test_add_resource",
            json!({"arguments": {"uri": "test://added"}}),
        )
        .await;
    assert_eq!(status, 200, "{done}");
    assert_eq!(
        heard_within(&mut a_heard, 5000).await.as_deref(),
        Some("resources/list_changed")
    );
    assert_eq!(heard_within(&mut b_heard, 500).await, None);

    for client in [a, b, viewer] {
        let _ = client.cancel().await;
    }
    let _ = a_session.cancel().await;
    let _ = b_session.cancel().await;
    gw.stop().await;
}

/// Hears the `notifications/resources/updated` a session receives.
struct Updates(tokio::sync::mpsc::UnboundedSender<String>);

impl rmcp::ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send(params.uri);
    }

    async fn on_resource_list_changed(
        &self,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let _ = self.0.send("resources/list_changed".into());
    }

    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("e2e-subscriber", "1"),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

type Subscriber = (
    RunningService<RoleClient, Updates>,
    tokio::sync::mpsc::UnboundedReceiver<String>,
);

async fn subscriber(gw: &Gateway, key: &str) -> Subscriber {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    let (tx, heard) = tokio::sync::mpsc::unbounded_channel();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(gw.url("/mcp")).auth_header(key),
    );
    (Updates(tx).serve(transport).await.expect("connect"), heard)
}

/// Asks the fixture to announce a change to `uri`; returns how many of its own
/// connections it told (the gateway holds one subscription upstream however many of its
/// sessions watch the URI).
async fn touch(gw: &Gateway, uri: &str) -> String {
    let (status, _, done) = gw
        .invoke("test_update_resource", json!({"arguments": {"uri": uri}}))
        .await;
    assert_eq!(status, 200, "{done}");
    done.to_string()
}

/// Announces a change to the watched resource until the fixture says it told `what`
/// (`"1 subscriber"`, or `"1 subscriber(s) told by process 42"`), failing after 10 s;
/// calls may fail meanwhile (a reconnecting upstream).
async fn until_told(gw: &Gateway, what: &str) -> String {
    until_told_of(gw, WATCHED, what).await
}

/// [`until_told`] for resource `uri`.
async fn until_told_of(gw: &Gateway, uri: &str, what: &str) -> String {
    let mut told = String::new();
    for _ in 0..200 {
        let (status, _, done) = gw
            .invoke("test_update_resource", json!({"arguments": {"uri": uri}}))
            .await;
        told = done.to_string();
        if status == 200 && told.contains(what) {
            return told;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the fixture never told {what}: {told}");
}

/// The fixture process that answered `told` (a `test_update_resource` result).
fn process_of(told: &str) -> &str {
    let after = told.split("by process ").nth(1).unwrap_or_default();
    &after[..after
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(after.len())]
}

async fn heard_within(
    heard: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    ms: u64,
) -> Option<String> {
    tokio::time::timeout(std::time::Duration::from_millis(ms), heard.recv())
        .await
        .ok()
        .flatten()
}

/// Relayed requests go through the executor (issue 28): each `resources/read`,
/// `prompts/get` and `completion/complete` leaves an audit row (its `tool` the method,
/// its `arguments` what it named), and the tenant's policy may deny one.
#[tokio::test]
async fn relayed_reads_prompts_and_completions_are_audited_and_follow_the_policy() {
    let (_fixture, port) = toolgate_e2e::python_server("conformance_fixture.py").await;
    let gw = Gateway::start_with(loopback).await;
    crate::tenant_upstreams::add_fixture(&gw, port, "test_simple_text").await;
    let a = connect(&gw, &gw.admin_key, ProtocolVersion::V_2025_11_25).await;
    a.read_resource(ReadResourceRequestParams::new("test://static-text"))
        .await
        .expect("read");
    a.get_prompt(GetPromptRequestParams::new("fx__test_simple_prompt"))
        .await
        .expect("prompt");
    a.complete(CompleteRequestParams::new(
        Reference::for_prompt("fx__test_prompt_with_arguments"),
        ArgumentInfo::new("arg1", "pa"),
    ))
    .await
    .expect("completion");
    let row = |method: &'static str| {
        let gw = &gw;
        async move {
            let (status, _, page) = gw
                .get(&format!("/v1/audit?tool={}", method.replace('/', "%2F")))
                .await;
            assert_eq!(status, 200, "{page}");
            page["entries"][0].clone()
        }
    };
    let read = row("resources/read").await;
    assert_eq!(
        (
            &read["adapter"],
            &read["outcome"],
            &read["arguments"]["uri"]
        ),
        (&json!("mcp"), &json!("ok"), &json!("test://static-text")),
        "{read}"
    );
    let prompt = row("prompts/get").await;
    assert_eq!(
        prompt["arguments"]["name"], "fx__test_simple_prompt",
        "{prompt}"
    );
    let completion = row("completion/complete").await;
    assert_eq!(completion["arguments"]["argument"], "arg1", "{completion}");

    // The tenant denies resource reads: refused, and the refusal is audited.
    let put = gw
        .http
        .put(gw.url("/v1/policy"))
        .json(&json!({"rules": [{"tool": "resources/read", "action": "deny"}]}))
        .send()
        .await
        .expect("policy");
    assert_eq!(put.status(), 200);
    assert_eq!(
        code(
            a.read_resource(ReadResourceRequestParams::new("test://static-text"))
                .await
        ),
        ErrorCode::INVALID_REQUEST
    );
    assert_eq!(row("resources/read").await["outcome"], "denied");
    let (_, _, verified) = gw.post("/v1/audit/verify", json!({})).await;
    assert_eq!(verified["verified"], true, "{verified}");
    gw.stop().await;
}
