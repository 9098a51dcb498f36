//! # toolgate-tools
//!
//! Built-in tools. Each implements [`toolgate_core::Tool`] and is called only by the
//! executor, which has already validated its arguments against the tool's schema.
//! Depends on `toolgate-core` only (no HTTP framework, no database).
//!
//! # Layout
//!
//! - [`workspace`]: each tenant's workspace (`<root>/<tenant name>`), which every file
//!   tool is confined to. Files are opened
//!   through a `cap_std` directory handle, so absolute paths, `..` escapes and symlinks
//!   that leave the root are refused by the kernel (`openat2(RESOLVE_BENEATH)`), not by
//!   string checks alone.
//! - [`list_files`], [`read_file`], [`search_files`], [`workspace_tree`]: read-only
//!   workspace tools.
//! - [`write_file`]: `write_file`, `edit_file`, `create_directory` (whole-file replace
//!   by rename, never a half-written file).
//! - [`git_status`]: `git status` through the command sandbox, read-only.
//! - [`execute_command`]: shell commands in the workspace, confined by [`sandbox`]
//!   (Landlock, resource limits, a scrubbed environment, process-group kill).
//! - [`resolver`]: `web_fetch`'s host-name lookups, on threads of their own with a
//!   deadline.
//! - [`http_api`]: tools made from an HTTP API's OpenAPI 3.x document (registered by
//!   tenants as upstreams; the server wires them).
//! - [`web_fetch`]: a web page's main content, SSRF-guarded (public addresses only,
//!   pinned connections, redirects re-checked); [`web_search`]: a configured SearXNG API.
//! - [`diagnostics`]: `echo` and `sleep`, for checking a deployment end to end (and
//!   for benchmarks); off with `tools.diagnostics = false`.
//!
//! - [`config`]: `[tools]`, the settings of all of the above, and what is wrong with them.
//!
//! The entry point is [`builtin_tools`].

use std::sync::Arc;

use serde_json::Value;

use toolgate_core::Tool;

pub mod config;
pub mod diagnostics;
pub mod egress;
pub mod execute_command;
pub mod file_tool;
pub mod git_status;
pub mod http_api;
pub mod list_files;
pub mod read_file;
pub mod resolver;
pub mod sandbox;
pub mod search_files;
pub mod web_fetch;
pub mod web_search;
pub mod workspace;
pub mod workspace_tree;
pub mod write_file;

pub use execute_command::CommandOptions;
pub use sandbox::{ResourceLimits, SandboxMode};
pub use workspace::{Workspace, Workspaces};

/// Which built-ins to offer.
#[derive(Clone, Debug)]
pub struct BuiltinOptions {
    /// Register `echo` and `sleep`.
    pub diagnostics: bool,
    /// Register `execute_command` and `git_status`, run this way; `None` leaves them out.
    pub commands: Option<CommandOptions>,
    /// Register `web_fetch`, reaching the web this way; `None` leaves it out.
    pub fetch: Option<web_fetch::FetchOptions>,
    /// Register `web_search` against this search API; `None` leaves it out.
    pub search: Option<web_search::SearchOptions>,
}

/// The built-in tools; file tools work in the caller's tenant's workspace.
pub fn builtin_tools(
    workspaces: Arc<Workspaces>,
    options: &BuiltinOptions,
) -> Result<Vec<Arc<dyn Tool>>, toolgate_core::ToolError> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(list_files::ListFiles::new(workspaces.clone())),
        Arc::new(read_file::ReadFile::new(workspaces.clone())),
        Arc::new(search_files::SearchFiles::new(workspaces.clone())),
        Arc::new(workspace_tree::WorkspaceTree::new(workspaces.clone())),
        Arc::new(write_file::WriteFile::new(workspaces.clone())),
        Arc::new(write_file::EditFile::new(workspaces.clone())),
        Arc::new(write_file::CreateDirectory::new(workspaces.clone())),
    ];
    if let Some(commands) = &options.commands {
        tools.push(Arc::new(git_status::GitStatus::new(
            workspaces.clone(),
            commands.clone(),
        )));
        tools.push(Arc::new(execute_command::ExecuteCommand::new(
            workspaces,
            commands.clone(),
        )));
    }
    if let Some(fetch) = &options.fetch {
        tools.push(Arc::new(web_fetch::WebFetch::new(fetch.clone())?));
    }
    if let Some(search) = &options.search {
        tools.push(Arc::new(web_search::WebSearch::new(search.clone())?));
    }
    if options.diagnostics {
        tools.push(Arc::new(diagnostics::Echo::new()));
        tools.push(Arc::new(diagnostics::Sleep::new()));
    }
    Ok(tools)
}

/// Parses validated arguments into a tool's typed argument struct. The schema has already
/// been checked, so a failure here means the schema and the struct disagree.
pub(crate) fn parse_args<T: serde::de::DeserializeOwned>(
    args: serde_json::Value,
) -> Result<T, toolgate_core::ToolError> {
    serde_json::from_value(args)
        .map_err(|e| toolgate_core::ToolError::invalid_arguments(e.to_string()))
}

/// Runs blocking file work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, toolgate_core::ToolError> + Send + 'static,
) -> Result<T, toolgate_core::ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(toolgate_core::ToolError::internal(e)))
}

/// A tool's input schema, derived from its argument struct: doc comments are the
/// descriptions, `#[schemars(...)]` the constraints, serde's defaults the defaults,
/// `deny_unknown_fields` the closed object. Trimmed as [`trimmed`] says.
pub(crate) fn input_schema<T: schemars::JsonSchema>() -> Value {
    let mut generator =
        trimmed(schemars::generate::SchemaSettings::draft2020_12().for_deserialize());
    trim_root(generator.root_schema_for::<T>().to_value())
}

/// A tool's output schema, derived from the struct its structured result is serialized
/// from ([`structured`]), so the two cannot disagree: doc comments are the descriptions,
/// nested structs are written in place (no `$defs`), and it is trimmed as input schemas
/// are. A field always present may be `null`; one left out when empty
/// (`skip_serializing_if`) has its one type.
pub(crate) fn output_schema<T: schemars::JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12().for_serialize();
    settings.inline_subschemas = true;
    trim_root(trimmed(settings).root_schema_for::<T>().to_value())
}

/// A tool's structured result, from its output struct (see [`output_schema`]).
pub(crate) fn structured<T: serde::Serialize>(output: &T) -> Value {
    // The output structs hold strings, numbers, booleans and lists of them: serializing
    // them into a `Value` cannot fail.
    serde_json::to_value(output).unwrap_or_default()
}

/// A generator whose schemas hold only the keywords every provider's declarations take:
/// no `format` (`uint64`, `double`), no `null` default, no `null` among the types of a
/// property that may be left out, and a plain `enum` for a Rust enum whose variants have
/// doc comments (schemars writes a `oneOf` of documented constants; the docs are for
/// rustdoc readers).
fn trimmed(mut settings: schemars::generate::SchemaSettings) -> schemars::SchemaGenerator {
    let trim = schemars::transform::RecursiveTransform(trim_schema);
    settings.transforms.push(Box::new(trim));
    settings.into_generator()
}

fn trim_schema(schema: &mut schemars::Schema) {
    let Some(node) = schema.as_object_mut() else {
        return;
    };
    node.remove("format");
    if node.get("default") == Some(&Value::Null) {
        node.remove("default");
    }
    if let Some(Value::Array(variants)) = node.get("oneOf") {
        let names: Option<Vec<Value>> = variants
            .iter()
            .map(|v| v.get("const").filter(|c| c.is_string()).cloned())
            .collect();
        if let Some(names) = names {
            node.remove("oneOf");
            node.insert("type".into(), "string".into());
            node.insert("enum".into(), names.into());
        }
    }
    let required: Vec<String> = match node.get("required") {
        Some(Value::Array(names)) => names
            .iter()
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    let Some(properties) = node.get_mut("properties").and_then(Value::as_object_mut) else {
        return;
    };
    for (name, property) in properties.iter_mut() {
        if required.contains(name) {
            continue;
        }
        if let Some(Value::Array(types)) = property.get("type") {
            let named: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
            if let [one] = named.as_slice() {
                property["type"] = one.clone();
            }
        }
    }
}

/// No `$schema`, `title` or `description` at the root: the tool's own spec says those.
fn trim_root(mut schema: Value) -> Value {
    if let Some(root) = schema.as_object_mut() {
        for key in ["$schema", "title", "description"] {
            root.remove(key);
        }
    }
    schema
}

#[cfg(test)]
mod input_schemas {
    use super::*;

    /// Every built-in tool's input schema, by tool name.
    pub(crate) fn all() -> serde_json::Map<String, serde_json::Value> {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspaces = Arc::new(Workspaces::new(dir.path()).expect("workspaces"));
        let options = BuiltinOptions {
            diagnostics: true,
            commands: Some(CommandOptions::default()),
            fetch: Some(web_fetch::FetchOptions::default()),
            search: Some(web_search::SearchOptions {
                url: "https://search.example/search".parse().expect("url"),
                api_key: None,
            }),
        };
        builtin_tools(workspaces, &options)
            .expect("tools")
            .iter()
            .map(|t| (t.spec().name.clone(), t.spec().input_schema.clone()))
            .collect()
    }

    /// Derived from the argument structs, the schemas hold only what every provider's
    /// declarations take, and keep the constraints the structs declare.
    #[test]
    fn every_builtin_input_schema_is_derived_closed_and_plain() {
        let schemas = all();
        assert_eq!(schemas.len(), 13, "{:?}", schemas.keys());
        for (tool, schema) in &schemas {
            assert_eq!(schema["type"], "object", "{tool}: {schema}");
            assert_eq!(schema["additionalProperties"], false, "{tool}: {schema}");
            let text = schema.to_string();
            for word in ["$schema", "\"title\"", "\"format\"", "$ref", "null"] {
                assert!(!text.contains(word), "{tool}: {word} in {schema}");
            }
        }
        let read = &schemas["read_file"];
        assert_eq!(read["required"], serde_json::json!(["path"]));
        assert_eq!(read["properties"]["limit"]["maximum"], 100000);
        assert_eq!(read["properties"]["offset"]["default"], 1);
        assert_eq!(
            read["properties"]["path"]["description"],
            "File path relative to the workspace root"
        );
        let search = &schemas["search_files"];
        assert_eq!(search["properties"]["path"]["default"], ".");
        assert_eq!(search["properties"]["glob"]["type"], "string");
        assert_eq!(search["properties"]["glob"]["maxLength"], 200);
    }
}

#[cfg(test)]
mod output_schemas {
    use super::*;
    use serde_json::json;

    /// Each output schema is derived from the struct the tool's structured result is
    /// serialized from; trimmed, it must still accept what the tool returns. Called for
    /// real in one workspace: every built-in tool with an output schema that needs no
    /// network, git repository or sandbox launcher (the gateway's binary; those tools'
    /// results are checked by tests/e2e).
    #[tokio::test]
    async fn every_builtin_result_is_what_its_output_schema_says() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspaces = Arc::new(Workspaces::new(dir.path()).expect("workspaces"));
        let options = BuiltinOptions {
            diagnostics: true,
            commands: None,
            fetch: None,
            search: None,
        };
        let tools = builtin_tools(workspaces, &options).expect("tools");
        let ctx = read_file::tests::ctx();
        let calls = [
            (
                "write_file",
                json!({"path": "src/a.txt", "content": "needle\nhay\n"}),
            ),
            (
                "write_file",
                json!({"path": "src/a.txt", "content": "needle\nhay\n"}),
            ),
            (
                "edit_file",
                json!({"path": "src/a.txt", "old_text": "hay", "new_text": "straw"}),
            ),
            ("create_directory", json!({"path": "src/made"})),
            ("read_file", json!({"path": "src/a.txt"})),
            ("read_file", json!({"path": "src/a.txt", "offset": 9})),
            ("list_files", json!({"path": "src"})),
            ("workspace_tree", json!({})),
            ("search_files", json!({"pattern": "needle"})),
            ("echo", json!({"message": "hello"})),
        ];
        let mut checked = std::collections::BTreeSet::new();
        for (name, args) in calls {
            let tool = tools
                .iter()
                .find(|t| t.spec().name == name)
                .expect("a built-in tool");
            let schema = tool
                .spec()
                .output_schema
                .as_ref()
                .expect("an output schema");
            let text = schema.to_string();
            for word in ["$schema", "$ref", "$defs", "\"format\"", "oneOf"] {
                assert!(!text.contains(word), "{name}: {word} in {schema}");
            }
            let out = tool.call(&ctx, args.clone()).await.expect(name);
            let structured = out.structured.expect("a structured result");
            let validator = jsonschema::validator_for(schema).expect("a valid schema");
            let errors: Vec<String> = validator
                .iter_errors(&structured)
                .map(|e| e.to_string())
                .collect();
            assert!(
                errors.is_empty(),
                "{name} {args}: {errors:?} in {structured}"
            );
            checked.insert(name);
        }
        assert_eq!(checked.len(), 8, "{checked:?}");
    }
}
