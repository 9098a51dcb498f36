//! Tools made from an HTTP API's OpenAPI 3.x document: one tool per operation.
//!
//! A tenant admin registers the document (or one endpoint with a JSON Schema, which is a
//! one-operation document) as a tenant upstream; the gateway calls the API at the
//! upstream's vetted URL, with its sealed credentials, through the same egress guard
//! (the caller's `reqwest::Client`: vetted resolver, no redirects, no proxy).
//!
//! From each operation:
//! - **name**: the prefix and the `operationId` (else `<method>_<path>`), characters
//!   outside `[A-Za-z0-9_.-]` made `_`; a name longer than 64 characters keeps its first
//!   55 and a hash of the whole (no two operations share a shortened name), and two
//!   operations that end up with one name are refused, not merged.
//! - **description**: `summary` and `description` (else `METHOD /path`).
//! - **input schema**: an object with a property per path, query and header parameter
//!   (its schema and description; path parameters always required) and `body` for a
//!   JSON request body; `#/components/schemas/*` references become `#/$defs/*`, with the
//!   document's schemas as `$defs`. Unknown properties are refused.
//! - **risk**: `GET`, `HEAD` and `OPTIONS` read (low; cacheable); `PUT` writes
//!   idempotently and `POST`, `PATCH` write (medium); `DELETE` destroys (high). All reach
//!   the open world.
//!
//! The answer's body (at most [`MAX_RESPONSE_BYTES`]) is the tool's text output, cut to
//! the tool's output limit like any tool's; a status outside 2xx is an `upstream` error
//! naming the status and the start of the body. Operations this module cannot call
//! (cookie parameters, request bodies that are not JSON, references outside the
//! document) are left out, each with a note saying why.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value, json};
use toolgate_core::{
    CallContext, Effects, ErrorKind, Risk, Tool, ToolError, ToolOutput, ToolSpec,
    spec::is_valid_tool_name,
};

/// The most of an answer's body read; the rest is dropped (and the output says so).
pub const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;
/// The most tools one document may become.
pub const MAX_OPERATIONS: usize = 512;
/// Longest description taken from a document.
const MAX_DESCRIPTION_CHARS: usize = 2_000;
/// Headers an API's parameter may not name, besides those the gateway sets on every
/// request ([`crate::egress::sets_header`]): credentials that are not the tool's.
const RESERVED_HEADERS: &[&str] = &["cookie", "proxy-authorization"];
const METHODS: [&str; 7] = ["get", "put", "post", "delete", "patch", "head", "options"];

/// Where and how an API's tools call it.
pub struct HttpApi {
    /// The API's base URL (the upstream's `url`): each operation's path is appended to
    /// its path. The document's `servers` are not used.
    pub base: url::Url,
    /// Sent with every request: the upstream's static headers and its bearer token.
    pub headers: HeaderMap,
    pub client: reqwest::Client,
    /// Put before each tool's name.
    pub prefix: String,
    pub default_timeout: Duration,
    pub max_timeout: Duration,
}

/// What a document becomes: its tools, and notes on the operations left out.
pub struct Parsed {
    pub tools: Vec<HttpTool>,
    pub notes: Vec<String>,
}

/// A document that cannot become tools at all, each problem with a JSON pointer into it.
#[derive(Debug)]
pub struct Invalid(pub Vec<(String, String)>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum In {
    Path,
    Query,
    Header,
}

#[derive(Clone, Debug)]
struct Param {
    name: String,
    location: In,
}

/// One operation, as the tool calls it.
#[derive(Clone, Debug)]
struct Operation {
    method: reqwest::Method,
    /// The path template, `/pets/{id}`.
    path: String,
    params: Vec<Param>,
    /// The input property holding the JSON body, when the operation takes one.
    body: Option<String>,
}

/// A tool calling one operation of an HTTP API.
pub struct HttpTool {
    spec: ToolSpec,
    /// Its name before the prefix (what allow/deny globs match).
    pub remote_name: String,
    operation: Operation,
    api: Arc<HttpApi>,
}

/// The tools of `document` for `api`; `admit` picks them by name before the prefix.
pub fn tools(
    document: &Value,
    api: Arc<HttpApi>,
    admit: &dyn Fn(&str) -> bool,
) -> Result<Parsed, Invalid> {
    let mut problems = Vec::new();
    match document.get("openapi").and_then(Value::as_str) {
        Some(v) if v.starts_with("3.") => {}
        Some(v) => problems.push(("/openapi".into(), format!("{v:?}: only OpenAPI 3.x"))),
        None => problems.push((
            "/openapi".into(),
            "missing: an OpenAPI 3.x document is expected".into(),
        )),
    }
    let Some(paths) = document.get("paths").and_then(Value::as_object) else {
        problems.push(("/paths".into(), "missing: no operations".into()));
        return Err(Invalid(problems));
    };
    if !problems.is_empty() {
        return Err(Invalid(problems));
    }
    let defs = document
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .map(|schemas| {
            schemas
                .iter()
                .map(|(k, v)| (k.clone(), local_refs(v)))
                .collect::<Map<String, Value>>()
        });
    let mut notes = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut tools = Vec::new();
    for (path, item) in paths {
        let Some(item) = item.as_object() else {
            continue;
        };
        let shared = item.get("parameters");
        for method in METHODS {
            let Some(op) = item.get(method) else {
                continue;
            };
            let at = format!("{} {path}", method.to_ascii_uppercase());
            let pointer = format!("/paths/{}/{method}", escape_pointer(path));
            let built = match operation(document, path, method, op, shared, defs.as_ref()) {
                Ok(built) => built,
                Err(why) => {
                    notes.push(format!("{at} left out: {why}"));
                    continue;
                }
            };
            let (operation, description, schema) = built;
            let remote = remote_name(op, method, path);
            if !admit(&remote) {
                continue;
            }
            let name = full_name(&api.prefix, &remote);
            if let Some(other) = seen.insert(name.clone(), at.clone()) {
                problems.push((
                    pointer,
                    format!("{at} and {other} would both be the tool {name:?}; give them distinct operationIds"),
                ));
                continue;
            }
            let (risk, effects) = risk(&operation.method);
            let spec = ToolSpec::new(name, description, schema)
                .with_category("http")
                .with_risk(risk, effects)
                .with_timeouts(api.default_timeout, api.max_timeout);
            tools.push(HttpTool {
                spec,
                remote_name: remote,
                operation,
                api: api.clone(),
            });
        }
    }
    if tools.len() > MAX_OPERATIONS {
        problems.push((
            "/paths".into(),
            format!(
                "{} operations; at most {MAX_OPERATIONS} become tools (narrow them with allow/deny)",
                tools.len()
            ),
        ));
    }
    if !problems.is_empty() {
        return Err(Invalid(problems));
    }
    if tools.is_empty() && notes.is_empty() {
        notes.push("the document has no operations".into());
    }
    Ok(Parsed { tools, notes })
}

/// A one-operation document for a single endpoint: `method` at the upstream's URL
/// itself, taking `input_schema` as its query (GET, HEAD, DELETE) or JSON body (others).
pub fn endpoint_document(
    tool: &str,
    method: &str,
    description: &str,
    input_schema: &Value,
) -> Value {
    let method = method.to_ascii_lowercase();
    let mut operation = json!({"operationId": tool, "description": description});
    if matches!(method.as_str(), "get" | "head" | "delete") {
        let required: Vec<&str> = input_schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let params: Vec<Value> = input_schema["properties"]
            .as_object()
            .map(|props| {
                props
                    .iter()
                    .map(|(name, schema)| {
                        json!({"name": name, "in": "query", "schema": schema,
                               "required": required.contains(&name.as_str())})
                    })
                    .collect()
            })
            .unwrap_or_default();
        operation["parameters"] = Value::Array(params);
    } else {
        operation["requestBody"] = json!({"required": true,
            "content": {"application/json": {"schema": input_schema}}});
    }
    json!({"openapi": "3.1.0", "info": {"title": tool, "version": "1"},
           "paths": {"": {method: operation}}})
}

impl HttpTool {
    pub fn into_tool(self) -> Arc<dyn Tool> {
        Arc::new(self)
    }
}

type Built = (Operation, String, Value);

/// An operation's call plan, description and input schema; why not, when it cannot be
/// called.
fn operation(
    document: &Value,
    path: &str,
    method: &str,
    op: &Value,
    shared: Option<&Value>,
    defs: Option<&Map<String, Value>>,
) -> Result<Built, String> {
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut params: Vec<Param> = Vec::new();
    // Path-level parameters first; the operation's own replace those of the same name
    // and place.
    let declared = shared
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .chain(
            op.get("parameters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten(),
        );
    let mut by_key: Vec<(String, String, Value)> = Vec::new();
    for param in declared {
        let param = resolve(document, param, "#/components/parameters/")?;
        let name = param["name"]
            .as_str()
            .ok_or("a parameter has no name")?
            .to_owned();
        let place = param["in"].as_str().unwrap_or_default().to_owned();
        by_key.retain(|(n, p, _)| !(n == &name && p == &place));
        by_key.push((name, place, param.clone()));
    }
    for (name, place, param) in by_key {
        let location = match place.as_str() {
            "path" => In::Path,
            "query" => In::Query,
            "header" => {
                if crate::egress::sets_header(&name, RESERVED_HEADERS) {
                    // The gateway sets it (credentials, content type): not the caller's.
                    continue;
                }
                if HeaderName::from_bytes(name.as_bytes()).is_err() {
                    return Err(format!("header parameter {name:?} is not a header name"));
                }
                In::Header
            }
            "cookie" => return Err(format!("cookie parameter {name:?} is not supported")),
            other => return Err(format!("parameter {name:?} is in {other:?}")),
        };
        let mut schema = param
            .get("schema")
            .cloned()
            .or_else(|| {
                param
                    .get("content")
                    .and_then(Value::as_object)
                    .and_then(|c| c.values().next())
                    .and_then(|m| m.get("schema").cloned())
            })
            .unwrap_or_else(|| json!({"type": "string"}));
        if let (Some(obj), Some(description)) = (schema.as_object_mut(), param.get("description"))
            && !obj.contains_key("description")
        {
            obj.insert("description".into(), description.clone());
        }
        if location == In::Path || param["required"].as_bool() == Some(true) {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name.clone(), schema);
        params.push(Param { name, location });
    }
    for template in placeholders(path) {
        if !params
            .iter()
            .any(|p| p.location == In::Path && p.name == template)
        {
            return Err(format!("path parameter {template:?} is not declared"));
        }
    }
    let mut body = None;
    if let Some(request) = op.get("requestBody") {
        let request = resolve(document, request, "#/components/requestBodies/")?;
        let content = request["content"]
            .as_object()
            .ok_or("a request body has no content")?;
        let json = content
            .iter()
            .find(|(mime, _)| is_json(mime))
            .map(|(_, media)| media);
        let Some(media) = json else {
            let types: Vec<&String> = content.keys().collect();
            return Err(format!(
                "its request body is {types:?}; only JSON bodies are supported"
            ));
        };
        let property = if properties.contains_key("body") {
            "request_body"
        } else {
            "body"
        };
        let mut schema = media.get("schema").cloned().unwrap_or_else(|| json!({}));
        if let (Some(obj), Some(description)) = (schema.as_object_mut(), request.get("description"))
            && !obj.contains_key("description")
        {
            obj.insert("description".into(), description.clone());
        }
        if request["required"].as_bool() == Some(true) {
            required.push(Value::String(property.into()));
        }
        properties.insert(property.into(), schema);
        body = Some(property.to_owned());
    }
    let mut schema = json!({
        "type": "object",
        "properties": Value::Object(properties),
        "additionalProperties": false,
    });
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    let mut schema = local_refs(&schema);
    let mut refs = Vec::new();
    collect_refs(&schema, &mut refs);
    if let Some(outside) = refs.iter().find(|r| !r.starts_with("#/$defs/")) {
        return Err(format!(
            "it refers to {outside:?}, outside the document's schemas"
        ));
    }
    if !refs.is_empty()
        && let Some(defs) = defs
    {
        schema["$defs"] = Value::Object(defs.clone());
    }
    let summary = op["summary"].as_str().unwrap_or_default().trim();
    let detail = op["description"].as_str().unwrap_or_default().trim();
    let mut description = match (summary.is_empty(), detail.is_empty()) {
        (false, false) => format!("{summary}\n\n{detail}"),
        (false, true) => summary.to_owned(),
        (true, false) => detail.to_owned(),
        (true, true) => format!("{} {path}", method.to_ascii_uppercase()),
    };
    if description.chars().count() > MAX_DESCRIPTION_CHARS {
        description = description.chars().take(MAX_DESCRIPTION_CHARS).collect();
    }
    let method = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes())
        .map_err(|e| e.to_string())?;
    Ok((
        Operation {
            method,
            path: path.to_owned(),
            params,
            body,
        },
        description,
        schema,
    ))
}

/// `value`, or what its `$ref` (into `prefix` of this document) names.
fn resolve<'a>(document: &'a Value, value: &'a Value, prefix: &str) -> Result<&'a Value, String> {
    let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
        return Ok(value);
    };
    let Some(name) = reference.strip_prefix(prefix) else {
        return Err(format!(
            "it refers to {reference:?}, which is not under {prefix}"
        ));
    };
    let pointer = format!(
        "{}/{}",
        prefix.trim_start_matches('#').trim_end_matches('/'),
        name
    );
    document
        .pointer(&pointer)
        .ok_or_else(|| format!("{reference:?} is not in the document"))
}

/// `schema` with `#/components/schemas/X` references made `#/$defs/X`.
fn local_refs(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v.as_str()) {
                        ("$ref", Some(r)) => match r.strip_prefix("#/components/schemas/") {
                            Some(name) => Value::String(format!("#/$defs/{name}")),
                            None => v.clone(),
                        },
                        _ => local_refs(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(local_refs).collect()),
        other => other.clone(),
    }
}

fn collect_refs(schema: &Value, refs: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v.as_str()) {
                    ("$ref", Some(r)) => refs.push(r.to_owned()),
                    _ => collect_refs(v, refs),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, refs)),
        _ => {}
    }
}

fn is_json(mime: &str) -> bool {
    let mime = mime.split(';').next().unwrap_or_default().trim();
    mime == "application/json" || mime.ends_with("+json") || mime == "*/*"
}

/// The `{name}` placeholders of a path template.
fn placeholders(path: &str) -> Vec<String> {
    path.split('{')
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

/// The operation's name before the prefix: its `operationId`, else `<method>_<path>`,
/// in the characters tool names allow.
fn remote_name(op: &Value, method: &str, path: &str) -> String {
    let raw = match op["operationId"].as_str().map(str::trim) {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("{method}_{path}"),
    };
    let mut name = String::with_capacity(raw.len());
    for c in raw.chars() {
        let c = if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
            c
        } else {
            '_'
        };
        // Runs of replaced characters become one.
        if !(c == '_' && name.ends_with('_')) {
            name.push(c);
        }
    }
    let trimmed = name.trim_matches('_');
    if trimmed.is_empty() {
        method.to_owned()
    } else {
        trimmed.to_owned()
    }
}

/// `prefix + remote`, at most 64 characters: a longer one keeps its first 55 and eight
/// hex digits of the whole name's hash.
fn full_name(prefix: &str, remote: &str) -> String {
    let name = format!("{prefix}{remote}");
    if is_valid_tool_name(&name) {
        return name;
    }
    let hash = toolgate_core::audit::hash_json(&Value::String(name.clone()));
    let kept: String = name.chars().take(55).collect();
    format!("{kept}_{}", &hash[..8])
}

fn risk(method: &reqwest::Method) -> (Risk, Effects) {
    let open = |writes, destructive, idempotent| Effects {
        writes,
        destructive,
        idempotent,
        open_world: true,
    };
    match *method {
        reqwest::Method::GET | reqwest::Method::HEAD | reqwest::Method::OPTIONS => {
            (Risk::Low, open(false, false, true))
        }
        reqwest::Method::PUT => (Risk::Medium, open(true, true, true)),
        reqwest::Method::DELETE => (Risk::High, open(true, true, true)),
        _ => (Risk::Medium, open(true, false, false)),
    }
}

/// JSON pointer escaping of one reference token.
fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// A parameter's value as text: strings as they are, other JSON as JSON.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

mod call;
#[cfg(test)]
mod tests;
