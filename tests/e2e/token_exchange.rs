//! Token exchange (RFC 8693, issue 29): an operator's upstream that must see each caller
//! as itself is called with a token its authorization server (a real OpenID Provider,
//! panva's oidc-provider, `tests/clients/oidc_provider.mjs`) issued for that upstream in
//! exchange for the caller's own — never with the caller's token, never with the
//! gateway's.

use serde_json::{Value, json};
use toolgate_e2e::{Gateway, client_with_key, read};

use crate::tenant_upstreams::until_tools;

/// An access token for machine client `id` from the provider (client credentials): a
/// JWT for the gateway (`urn:toolgate`) whose subject is `id`.
async fn token_for(issuer: &str, id: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{issuer}/token"))
        .basic_auth(id, Some(format!("{id}-secret")))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials&scope=tools%3Ainvoke&resource=urn%3Atoolgate")
        .send()
        .await
        .expect("token request");
    let (status, _, body) = read(response).await;
    assert_eq!(status, 200, "{body}");
    body["access_token"].as_str().expect("token").to_owned()
}

fn jwt_config(issuer: &str, audience: &str) -> toolgate_server::jwt::JwtConfig {
    serde_json::from_value(json!({
        "issuer": issuer,
        "audience": audience,
        "jwks_url": format!("{issuer}/jwks"),
    }))
    .expect("jwt config")
}

#[tokio::test]
async fn each_caller_reaches_the_upstream_with_a_token_exchanged_for_its_own() {
    let idp_port = toolgate_e2e::free_port();
    let issuer = format!("http://127.0.0.1:{idp_port}");
    let _idp = toolgate_e2e::oidc_provider(idp_port, "http://127.0.0.1:9/unused").await;
    // The upstream: another gateway, taking only tokens minted for it (`urn:upstream`).
    let upstream = {
        let issuer = issuer.clone();
        Gateway::start_with(move |c| c.auth.jwt = Some(jwt_config(&issuer, "urn:upstream"))).await
    };
    let gw = {
        let (issuer, url, lister) = (
            issuer.clone(),
            upstream.url("/mcp"),
            upstream.admin_key.clone(),
        );
        Gateway::start_with(move |c| {
            c.auth.jwt = Some(jwt_config(&issuer, "urn:toolgate"));
            c.upstreams.push(
                serde_json::from_value(json!({
                    "name": "peer",
                    "url": url,
                    // Lists the tools; calls go with each caller's exchanged token.
                    "bearer": lister,
                    "token_exchange": {
                        "token_url": format!("{issuer}/token"),
                        "client_id": "toolgate-gateway",
                        "client_secret": "gateway-secret",
                        "audience": "urn:upstream",
                        "scope": "tools:invoke",
                    },
                }))
                .expect("upstream entry"),
            );
        })
        .await
    };
    until_tools(&gw.http, &gw, "peer's tools are listed", |n| {
        n.contains(&"peer__echo".to_owned())
    })
    .await;

    let ann_token = token_for(&issuer, "ann-agent").await;
    let bob_token = token_for(&issuer, "bob-agent").await;
    let call = |token: &str, message: &str| {
        let client = client_with_key(token);
        let url = gw.url("/v1/tools/peer__echo/invoke");
        let body = json!({"arguments": {"message": message}});
        async move { read(client.post(url).json(&body).send().await.expect("call")).await }
    };
    for (token, message) in [
        (&ann_token, "from ann"),
        (&bob_token, "from bob"),
        (&ann_token, "from ann again"),
    ] {
        let (status, _, body) = call(token, message).await;
        assert_eq!(status, 200, "{message}: {body}");
    }
    // An API key has no token to exchange: refused, saying why; the gateway's own
    // credential is never used for the call instead.
    let (status, _, refused) = gw
        .invoke(
            "peer__echo",
            json!({"arguments": {"message": "from a key"}}),
        )
        .await;
    assert_eq!(status, 502, "{refused}");
    assert!(
        refused["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("sign in with a token from the identity provider"),
        "{refused}"
    );

    // The upstream saw each call as its caller (its subject, from the exchanged token),
    // and no call as the gateway's lister key.
    let (_, _, audit) = upstream.get("/v1/audit?tool=echo").await;
    let by_message: Vec<(String, Value)> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| {
            (
                e["arguments"]["message"].as_str().unwrap_or("").to_owned(),
                e["principal_id"].clone(),
            )
        })
        .collect();
    let principal = |message: &str| {
        by_message
            .iter()
            .find(|(m, _)| m == message)
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| panic!("{message:?} not at the upstream: {by_message:?}"))
    };
    let (ann, bob) = (principal("from ann"), principal("from bob"));
    assert_ne!(ann, bob, "{by_message:?}");
    assert_eq!(principal("from ann again"), ann, "{by_message:?}");
    assert!(
        !by_message.iter().any(|(m, _)| m == "from a key"),
        "{by_message:?}"
    );
    let (_, _, me) = upstream.get("/v1/me").await;
    assert!(
        me["principal_id"] != ann && me["principal_id"] != bob,
        "{me}"
    );

    // No token in the gateway's audit.
    let (_, _, own) = gw.get("/v1/audit?tool=peer__echo").await;
    let own = own.to_string();
    for token in [&ann_token, &bob_token] {
        assert!(
            !own.contains(token.as_str()),
            "a caller's token in the audit"
        );
    }
    assert!(!own.contains("eyJ"), "a token in the audit: {own}");
    gw.stop().await;
    upstream.stop().await;
}
