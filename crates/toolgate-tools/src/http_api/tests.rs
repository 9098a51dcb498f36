use super::*;

fn api(prefix: &str) -> Arc<HttpApi> {
    Arc::new(HttpApi {
        base: url::Url::parse("https://api.example.com/v1/").expect("url"),
        headers: HeaderMap::new(),
        client: reqwest::Client::new(),
        prefix: prefix.into(),
        default_timeout: Duration::from_secs(30),
        max_timeout: Duration::from_secs(60),
    })
}

fn petstore() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "pets", "version": "1"},
        "paths": {
            "/pets/{petId}": {
                "parameters": [{"name": "petId", "in": "path", "required": true,
                                "schema": {"type": "string"}}],
                "get": {"operationId": "getPet", "summary": "One pet",
                        "parameters": [{"$ref": "#/components/parameters/Verbose"},
                                       {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
                                       {"name": "Authorization", "in": "header", "schema": {"type": "string"}}]},
                "delete": {"summary": "Remove a pet"}
            },
            "/pets": {
                "post": {"operationId": "add pet!", "requestBody": {"required": true,
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Pet"}}}}},
                "put": {"operationId": "upload", "requestBody": {
                    "content": {"multipart/form-data": {"schema": {}}}}}
            }
        },
        "components": {
            "parameters": {"Verbose": {"name": "verbose", "in": "query", "schema": {"type": "boolean"}}},
            "schemas": {"Pet": {"type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}, "tag": {"$ref": "#/components/schemas/Tag"}}},
                "Tag": {"type": "string"}}
        }
    })
}

fn by_name(parsed: &Parsed) -> BTreeMap<String, &HttpTool> {
    parsed
        .tools
        .iter()
        .map(|t| (t.spec.name.clone(), t))
        .collect()
}

#[test]
fn operations_become_tools_with_names_schemas_and_risk() {
    let parsed = tools(&petstore(), api("pets__"), &|_| true).expect("valid");
    let tools = by_name(&parsed);
    assert_eq!(
        tools.keys().collect::<Vec<_>>(),
        ["pets__add_pet", "pets__delete_pets_petId", "pets__getPet"]
    );
    let get = tools["pets__getPet"];
    assert_eq!(get.spec.description, "One pet");
    assert_eq!(get.spec.risk, Risk::Low);
    assert!(toolgate_core::cache::cacheable(&get.spec.effects));
    assert_eq!(
        get.spec.input_schema,
        json!({"type": "object", "additionalProperties": false, "required": ["petId"],
               "properties": {"petId": {"type": "string"}, "verbose": {"type": "boolean"},
                              "X-Trace": {"type": "string"}}}),
        "the gateway's own headers are not parameters"
    );
    let add = tools["pets__add_pet"];
    assert_eq!(add.spec.risk, Risk::Medium);
    assert_eq!(add.spec.input_schema["required"], json!(["body"]));
    assert_eq!(
        add.spec.input_schema["properties"]["body"]["$ref"],
        "#/$defs/Pet"
    );
    assert_eq!(
        add.spec.input_schema["$defs"]["Pet"]["properties"]["tag"]["$ref"],
        "#/$defs/Tag"
    );
    assert_eq!(tools["pets__delete_pets_petId"].spec.risk, Risk::High);
    assert_eq!(parsed.notes.len(), 1, "{:?}", parsed.notes);
    assert!(parsed.notes[0].contains("PUT /pets"), "{:?}", parsed.notes);
    // Every schema compiles, references included.
    for tool in parsed.tools {
        toolgate_core::Registry::new()
            .register(tool.into_tool())
            .expect("registers");
    }
}

#[test]
fn long_names_are_shortened_with_a_hash_and_clashes_refused() {
    let long = "x".repeat(80);
    let doc = json!({"openapi": "3.1.0", "paths": {
        "/a": {"get": {"operationId": format!("{long}1")}},
        "/b": {"get": {"operationId": format!("{long}2")}},
    }});
    let parsed = tools(&doc, api("p__"), &|_| true).expect("valid");
    let names: Vec<String> = parsed.tools.iter().map(|t| t.spec.name.clone()).collect();
    assert_eq!(names.len(), 2);
    assert_ne!(names[0], names[1]);
    for name in &names {
        assert_eq!(name.len(), 64, "{name}");
        assert!(is_valid_tool_name(name));
    }
    let clash = json!({"openapi": "3.1.0", "paths": {
        "/a": {"get": {"operationId": "same"}},
        "/b": {"get": {"operationId": "same"}},
    }});
    let Err(Invalid(problems)) = tools(&clash, api(""), &|_| true) else {
        panic!("a clash is refused")
    };
    assert!(problems[0].1.contains("\"same\""), "{problems:?}");
    let Err(Invalid(problems)) = tools(&json!({"swagger": "2.0"}), api(""), &|_| true) else {
        panic!("not OpenAPI 3")
    };
    assert_eq!(problems[0].0, "/openapi");
}

#[test]
fn requests_escape_path_values_and_carry_query_headers_and_body() {
    let parsed = tools(&petstore(), api(""), &|_| true).expect("valid");
    let tools = by_name(&parsed);
    let request = tools["getPet"]
        .request(&json!({"petId": "../admin?x=1", "verbose": true, "X-Trace": "t1"}))
        .expect("request")
        .build()
        .expect("built");
    assert_eq!(
        request.url().as_str(),
        "https://api.example.com/v1/pets/%2E%2E%2Fadmin%3Fx%3D1?verbose=true"
    );
    assert_eq!(request.headers()["x-trace"], "t1");
    let request = tools["add_pet"]
        .request(&json!({"body": {"name": "Rex"}}))
        .expect("request")
        .build()
        .expect("built");
    assert_eq!(request.method(), reqwest::Method::POST);
    assert_eq!(request.url().as_str(), "https://api.example.com/v1/pets");
    let body = request.body().and_then(|b| b.as_bytes()).expect("body");
    assert_eq!(
        serde_json::from_slice::<Value>(body).expect("json"),
        json!({"name": "Rex"})
    );
}

#[test]
fn an_endpoint_is_a_one_operation_document() {
    let schema = json!({"type": "object", "required": ["city"],
                        "properties": {"city": {"type": "string"}}});
    let doc = endpoint_document("weather", "GET", "The weather in a city", &schema);
    let parsed = tools(&doc, api("w__"), &|_| true).expect("valid");
    let tool = &parsed.tools[0];
    assert_eq!(tool.spec.name, "w__weather");
    assert_eq!(tool.spec.input_schema["required"], json!(["city"]));
    let request = tool
        .request(&json!({"city": "Oslo"}))
        .expect("request")
        .build()
        .expect("built");
    assert_eq!(
        request.url().as_str(),
        "https://api.example.com/v1?city=Oslo"
    );
    let doc = endpoint_document("report", "POST", "File a report", &schema);
    let parsed = tools(&doc, api(""), &|_| true).expect("valid");
    assert_eq!(
        parsed.tools[0].spec.input_schema["required"],
        json!(["body"])
    );
}
