//! Tools from an HTTP API's OpenAPI document (issue 31): a tenant admin registers the
//! document of a loopback API served over TLS by a test CA the gateway trusts; its
//! operations become that tenant's tools, called with the sealed credentials through the
//! tenant upstreams' guard (no redirects followed), invisible to another tenant, and gone
//! with the document. A gateway not told of the CA refuses the API's certificate.

use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::{Value, json};
use toolgate_e2e::tls::{TlsServer, serve_tls};
use toolgate_e2e::{Gateway, client_with_key, read};

use crate::tenant_upstreams::{loopback, names};

/// What the API saw: (method and path, Authorization header).
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

fn authorization(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

async fn pets_api() -> (TlsServer, Seen) {
    let seen: Seen = Arc::default();
    let router = axum::Router::new()
        .route(
            "/api/pets/{id}",
            get(
                |State(seen): State<Seen>, Path(id): Path<String>, headers: HeaderMap| async move {
                    let auth = authorization(&headers);
                    seen.lock()
                        .expect("lock")
                        .push((format!("GET /api/pets/{id}"), auth.clone()));
                    if auth.as_deref() != Some("Bearer pets-token") {
                        return (StatusCode::UNAUTHORIZED, "no token").into_response();
                    }
                    Json(json!({"id": id, "name": "Rex", "tag": headers
                        .get("x-tag").and_then(|v| v.to_str().ok())}))
                    .into_response()
                },
            ),
        )
        .route(
            "/api/pets",
            post(
                |State(seen): State<Seen>, headers: HeaderMap, Json(pet): Json<Value>| async move {
                    seen.lock()
                        .expect("lock")
                        .push(("POST /api/pets".into(), authorization(&headers)));
                    (StatusCode::CREATED, Json(json!({"id": "8", "pet": pet})))
                },
            ),
        )
        .route(
            "/api/moved",
            get(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [("location", "https://example.com/elsewhere")],
                )
            }),
        )
        .with_state(seen.clone());
    (serve_tls(router).await, seen)
}

fn document() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "Pets", "version": "1"},
        "servers": [{"url": "https://pets.example.com/api"}],
        "paths": {
            "/pets/{petId}": {
                "get": {
                    "operationId": "getPet",
                    "summary": "Find a pet by id",
                    "parameters": [
                        {"name": "petId", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "X-Tag", "in": "header", "schema": {"type": "string"}}
                    ]
                }
            },
            "/pets": {
                "post": {
                    "operationId": "addPet",
                    "requestBody": {"required": true, "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/NewPet"}}}}
                }
            },
            "/moved": {"get": {"operationId": "moved"}}
        },
        "components": {"schemas": {"NewPet": {
            "type": "object", "required": ["name"],
            "properties": {"name": {"type": "string", "minLength": 1}}
        }}}
    })
}

#[tokio::test]
async fn an_openapi_document_becomes_the_tenants_tools_over_tls_and_goes_with_it() {
    let (api, seen) = pets_api().await;
    let ca_file = api.ca_file.clone();
    let gw = Gateway::start_with(|c| {
        loopback(c);
        c.tenant_upstreams.ca_file = Some(ca_file);
    })
    .await;
    let body = json!({"name": "pets", "url": api.url("/api"), "bearer": "pets-token",
                      "openapi": document()});
    let (status, _, created) = gw.post("/v1/upstreams", body).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["kind"], "http", "{created}");
    assert_eq!(created["status"]["state"], "ready", "{created}");
    assert_eq!(
        created["status"]["tools"],
        json!(["pets__addPet", "pets__getPet", "pets__moved"]),
        "{created}"
    );
    assert!(!created.to_string().contains("pets-token"), "{created}");

    // Tenant A calls them: the API sees the sealed bearer, the path value, the header.
    let (status, _, got) = gw
        .invoke(
            "pets__getPet",
            json!({"arguments": {"petId": "7", "X-Tag": "good"}}),
        )
        .await;
    assert_eq!(status, 200, "{got}");
    let text: Value =
        serde_json::from_str(got["content"][0]["text"].as_str().expect("text")).expect("json");
    assert_eq!(text, json!({"id": "7", "name": "Rex", "tag": "good"}));
    let (status, _, added) = gw
        .invoke(
            "pets__addPet",
            json!({"arguments": {"body": {"name": "Tom"}}}),
        )
        .await;
    assert_eq!(status, 200, "{added}");
    assert!(
        added["content"][0]["text"]
            .as_str()
            .expect("text")
            .contains("\"Tom\"")
    );
    // The document's schema (a reference into components) is enforced before any request.
    let (status, _, invalid) = gw
        .invoke("pets__addPet", json!({"arguments": {"body": {"name": ""}}}))
        .await;
    assert_eq!(status, 400, "{invalid}");
    // Redirects are not followed.
    let (status, _, moved) = gw.invoke("pets__moved", json!({"arguments": {}})).await;
    assert_eq!(status, 502, "{moved}");
    assert!(
        moved["detail"].as_str().expect("detail").contains("307"),
        "{moved}"
    );
    assert_eq!(
        seen.lock().expect("lock").clone(),
        [
            (
                "GET /api/pets/7".to_owned(),
                Some("Bearer pets-token".to_owned())
            ),
            (
                "POST /api/pets".to_owned(),
                Some("Bearer pets-token".to_owned())
            ),
        ]
    );
    // Neither the upstream nor the audit shows the token.
    let (_, _, listed) = gw.get("/v1/upstreams/pets").await;
    assert_eq!(listed["bearer"], true, "{listed}");
    assert!(!listed.to_string().contains("pets-token"));
    let (_, _, audit) = gw.get("/v1/audit?limit=100").await;
    assert!(!audit.to_string().contains("pets-token"));

    // Tenant B neither sees nor calls them.
    let b = client_with_key(&gw.create_tenant("globex").await);
    assert!(
        !names(&b, &gw).await.iter().any(|n| n.starts_with("pets__")),
        "tenant B sees A's HTTP tools"
    );
    let (status, _, body) = read(
        b.post(gw.url("/v1/tools/pets__getPet/invoke"))
            .json(&json!({"arguments": {"petId": "7"}}))
            .send()
            .await
            .expect("b call"),
    )
    .await;
    assert_eq!(status, 404, "{body}");

    // A document that cannot work is refused with where: two operations, one name; and
    // an API off the allowed networks is refused like any upstream.
    let mut clash = document();
    clash["paths"]["/other"] = json!({"get": {"operationId": "getPet"}});
    let (status, _, refused) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "bad", "url": api.url("/api"), "openapi": clash}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    let problem = &refused["errors"][0];
    assert!(
        problem["message"]
            .as_str()
            .expect("message")
            .contains("GET /other"),
        "{refused}"
    );
    assert!(
        problem["pointer"]
            .as_str()
            .expect("pointer")
            .starts_with("/openapi/paths/~1"),
        "{refused}"
    );
    let (status, _, refused) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "private", "url": "https://10.0.0.8/api", "openapi": document()}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    // So is a schema with a pattern that would backtrack (here a backreference): every
    // call is checked against it, and only in time linear in the caller's input.
    let (status, _, refused) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "slow", "url": api.url("/api/pets"),
                   "endpoint": {"tool": "add", "method": "POST", "description": "Add a pet",
                                "input_schema": {"type": "object", "properties": {
                                    "name": {"type": "string", "pattern": "^((a|aa)+)\\1c"}}}}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused.to_string().contains("backreferences or lookaround"),
        "{refused}"
    );

    // One endpoint with a JSON Schema is one tool.
    let (status, _, one) = gw
        .post(
            "/v1/upstreams",
            json!({"name": "one", "url": api.url("/api/pets"), "bearer": "pets-token",
                   "endpoint": {"tool": "add", "method": "POST", "description": "Add a pet",
                                "input_schema": {"type": "object", "required": ["name"],
                                                 "properties": {"name": {"type": "string"}}}}}),
        )
        .await;
    assert_eq!(status, 201, "{one}");
    assert_eq!(one["status"]["tools"], json!(["one__add"]), "{one}");
    let (status, _, added) = gw
        .invoke("one__add", json!({"arguments": {"body": {"name": "Kit"}}}))
        .await;
    assert_eq!(status, 200, "{added}");

    // Removing the document removes its tools.
    let deleted = gw
        .http
        .delete(gw.url("/v1/upstreams/pets"))
        .send()
        .await
        .expect("delete");
    assert_eq!(deleted.status(), 204);
    assert!(
        !names(&gw.http, &gw)
            .await
            .iter()
            .any(|n| n.starts_with("pets__"))
    );
    let (status, _, gone) = gw
        .invoke("pets__getPet", json!({"arguments": {"petId": "7"}}))
        .await;
    assert_eq!(status, 404, "{gone}");
    gw.stop().await;

    // A gateway that does not trust the test CA cannot reach the API.
    let untrusting = Gateway::start_with(loopback).await;
    let (status, _, created) = untrusting
        .post(
            "/v1/upstreams",
            json!({"name": "pets", "url": api.url("/api"), "openapi": document()}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, _, failed) = untrusting
        .invoke("pets__getPet", json!({"arguments": {"petId": "7"}}))
        .await;
    assert_eq!(status, 502, "{failed}");
    assert_eq!(
        seen.lock().expect("lock").len(),
        3,
        "no request got through"
    );
    untrusting.stop().await;
}
