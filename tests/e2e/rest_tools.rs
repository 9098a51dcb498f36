//! Listing, describing and invoking tools over REST.

use serde_json::{Value, json};
use toolgate_e2e::Gateway;

fn names(list: &Value) -> Vec<&str> {
    list["tools"]
        .as_array()
        .expect("tools array")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect()
}

/// Every built-in with the default configuration, sorted.
const BUILTINS: [&str; 12] = [
    "create_directory",
    "echo",
    "edit_file",
    "execute_command",
    "git_status",
    "list_files",
    "read_file",
    "search_files",
    "sleep",
    "web_fetch",
    "workspace_tree",
    "write_file",
];

const WORKSPACE: [&str; 8] = [
    "create_directory",
    "edit_file",
    "git_status",
    "list_files",
    "read_file",
    "search_files",
    "workspace_tree",
    "write_file",
];

#[tokio::test]
async fn lists_tools_sorted_paginated_and_by_category() {
    let gw = Gateway::start().await;
    let (status, _, all) = gw.get("/v1/tools").await;
    assert_eq!(status, 200);
    assert_eq!(names(&all), BUILTINS);
    assert!(all.get("next_cursor").is_none());

    let (_, _, first) = gw.get("/v1/tools?limit=2").await;
    assert_eq!(names(&first), BUILTINS[..2]);
    let cursor = first["next_cursor"].as_str().expect("cursor");
    let (_, _, second) = gw.get(&format!("/v1/tools?limit=2&cursor={cursor}")).await;
    assert_eq!(names(&second), BUILTINS[2..4]);

    let (_, _, workspace) = gw.get("/v1/tools?category=workspace").await;
    assert_eq!(names(&workspace), WORKSPACE);

    let (status, content_type, problem) = gw.get("/v1/tools?limit=0").await;
    assert_eq!(
        (status, content_type.as_str()),
        (400, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:toolgate:error:malformed_request");
    let (status, _, _) = gw.get("/v1/tools?format=cobol").await;
    assert_eq!(status, 400);
}

/// The declaration in `list` whose name (at `name_of`) is `name`.
fn declaration<'a>(list: &'a Value, name: &str, name_of: &str) -> &'a Value {
    list.as_array()
        .expect("declarations")
        .iter()
        .find(|d| d.pointer(name_of) == Some(&json!(name)))
        .unwrap_or_else(|| panic!("{name} missing from {list}"))
}

#[tokio::test]
async fn lists_tools_as_each_providers_declarations() {
    let gw = Gateway::start().await;
    let (_, _, openai) = gw.get("/v1/tools?format=openai&category=workspace").await;
    assert_eq!(openai.as_array().map(Vec::len), Some(WORKSPACE.len()));
    assert_eq!(openai[0]["type"], "function");
    assert_eq!(openai[0]["function"]["name"], WORKSPACE[0]);
    assert_eq!(
        declaration(&openai, "read_file", "/function/name")["function"]["parameters"]["required"],
        json!(["path"])
    );

    let (_, _, anthropic) = gw.get("/v1/tools?format=anthropic").await;
    assert!(
        declaration(&anthropic, "read_file", "/name")["input_schema"]["properties"]["path"]
            .is_object()
    );

    let (_, _, gemini) = gw.get("/v1/tools?format=gemini").await;
    let decls = gemini[0]["functionDeclarations"]
        .as_array()
        .expect("declarations");
    assert_eq!(decls.len(), BUILTINS.len());
    assert!(
        decls
            .iter()
            .all(|d| d["parameters"].get("additionalProperties").is_none())
    );

    let (_, _, mcp) = gw.get("/v1/tools?format=mcp").await;
    let read = declaration(&mcp, "read_file", "/name");
    assert_eq!(read["annotations"]["readOnlyHint"], true);
    assert!(read["outputSchema"].is_object());
    let command = declaration(&mcp, "execute_command", "/name");
    assert_eq!(command["annotations"]["destructiveHint"], true);
    let fetch = declaration(&mcp, "web_fetch", "/name");
    assert_eq!(fetch["annotations"]["openWorldHint"], true);
}

#[tokio::test]
async fn describes_one_tool_and_404s_unknown_ones() {
    let gw = Gateway::start().await;
    let (status, _, tool) = gw.get("/v1/tools/read_file").await;
    assert_eq!(status, 200);
    assert_eq!(tool["category"], "workspace");
    assert_eq!(tool["risk"], "low");
    assert_eq!(tool["effects"]["writes"], false);
    assert_eq!(tool["default_timeout_ms"], 30000);

    let (status, content_type, problem) = gw.get("/v1/tools/nope").await;
    assert_eq!(
        (status, content_type.as_str()),
        (404, "application/problem+json")
    );
    assert_eq!(problem["type"], "urn:toolgate:error:not_found");
}

#[tokio::test]
async fn invokes_read_file_within_the_workspace() {
    let gw = Gateway::start().await;
    std::fs::write(
        gw.workspace().join("hello.txt"),
        "line one\nline two\nline three\n",
    )
    .expect("write");
    let (status, _, body) = gw
        .invoke(
            "read_file",
            json!({"arguments": {"path": "hello.txt", "offset": 2, "limit": 1}}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["content"],
        json!([{"type": "text", "text": "line two\n"}])
    );
    assert_eq!(body["structured"]["total_lines"], 3);
    assert_eq!(body["truncated"], false);
    assert!(body["call_id"].as_str().is_some_and(|id| id.len() == 36));
    assert!(body["duration_ms"].as_f64().is_some());
}

#[tokio::test]
async fn escapes_from_the_workspace_are_400_problems() {
    let gw = Gateway::start().await;
    std::fs::write(gw.data.path().join("secret.txt"), "s3cret").expect("write");
    std::os::unix::fs::symlink("/etc/passwd", gw.workspace().join("passwd")).expect("symlink");
    std::os::unix::fs::symlink("../secret.txt", gw.workspace().join("up")).expect("symlink");
    for path in [
        "../../etc/passwd",
        "/etc/passwd",
        "passwd",
        "up",
        "a/../../secret.txt",
        "bad\u{0}path",
    ] {
        let (status, content_type, problem) = gw
            .invoke("read_file", json!({"arguments": {"path": path}}))
            .await;
        assert_eq!(
            (status, content_type.as_str()),
            (400, "application/problem+json"),
            "{path}: {problem}"
        );
        assert_eq!(
            problem["type"], "urn:toolgate:error:invalid_arguments",
            "{path}"
        );
        assert!(!problem.to_string().contains("s3cret"), "{path}");
        assert!(!problem.to_string().contains("root:"), "{path}");
    }
}

#[tokio::test]
async fn search_and_list_work_over_rest() {
    let gw = Gateway::start().await;
    std::fs::create_dir(gw.workspace().join("src")).expect("mkdir");
    std::fs::write(gw.workspace().join("src/a.rs"), "fn needle() {}\n").expect("write");
    let (status, _, body) = gw
        .invoke("search_files", json!({"arguments": {"pattern": "needle"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["structured"]["matches"],
        json!([{"path": "src/a.rs", "line": 1, "text": "fn needle() {}"}])
    );
    let (status, _, body) = gw.invoke("list_files", json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], "src/\n");
}

#[tokio::test]
async fn output_beyond_the_limit_is_truncated_with_a_marker() {
    let gw = Gateway::start_with(|c| c.tools.max_output_chars = 10).await;
    let (status, _, body) = gw
        .invoke(
            "echo",
            json!({"arguments": {"message": "abcdefghijklmnop"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["truncated"], true);
    let text = body["content"][0]["text"].as_str().expect("text");
    assert!(
        text.starts_with("abcdefghij\n\n[output truncated: showing 10 of 16 characters]"),
        "{text}"
    );
}

#[tokio::test]
async fn a_tool_past_its_deadline_is_504_and_the_gateway_keeps_serving() {
    let gw = Gateway::start().await;
    let (status, content_type, problem) = gw
        .invoke(
            "sleep",
            json!({"arguments": {"seconds": 30}, "timeout_ms": 200}),
        )
        .await;
    assert_eq!(
        (status, content_type.as_str()),
        (504, "application/problem+json"),
        "{problem}"
    );
    assert_eq!(problem["type"], "urn:toolgate:error:timeout");
    assert_eq!(problem["details"]["timeout_ms"], 200);
    let (status, _, _) = gw.get("/healthz").await;
    assert_eq!(status, 200);
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "still here"}}))
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn diagnostics_can_be_switched_off() {
    let gw = Gateway::start_with(|c| c.tools.diagnostics = false).await;
    let (_, _, all) = gw.get("/v1/tools").await;
    let expected: Vec<&str> = BUILTINS
        .into_iter()
        .filter(|n| !matches!(*n, "echo" | "sleep"))
        .collect();
    assert_eq!(names(&all), expected);
    let (status, _, _) = gw
        .invoke("echo", json!({"arguments": {"message": "x"}}))
        .await;
    assert_eq!(status, 404);
}
