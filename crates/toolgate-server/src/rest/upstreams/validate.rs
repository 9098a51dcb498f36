//! What a tenant upstream body must be (name, URL, headers, globs, timeouts, an HTTP API
//! document), and its credentials sealed or kept on replacement.

use super::*;

/// Checks a body, listing every problem; returns what to store and the credentials.
pub(super) async fn validate(
    upstreams: &TenantUpstreams,
    body: UpstreamBody,
) -> Result<(UpstreamSettings, Credentials), ApiError> {
    let mut problems: Vec<(String, String)> = Vec::new();
    if !is_valid_name(&body.name) {
        problems.push((
            "name".into(),
            "use 1-32 letters, digits, '_', '.' or '-'".into(),
        ));
    } else if upstreams.reserved.iter().any(|r| r == &body.name) {
        problems.push((
            "name".into(),
            format!(
                "{:?} is the name of one of the gateway's own upstreams",
                body.name
            ),
        ));
    }
    if let Err(problem) = upstreams.egress.check_now(&body.url).await {
        problems.push(("url".into(), problem.0));
    }
    if let Some(prefix) = &body.prefix
        && !(prefix.len() <= 32 && (prefix.is_empty() || is_valid_name(prefix)))
    {
        problems.push((
            "prefix".into(),
            "use at most 32 letters, digits, '_', '.' or '-'".into(),
        ));
    }
    problems.extend(credential_problems(&body.headers, body.bearer.as_deref()));
    for (field, globs) in [("allow", &body.allow), ("deny", &body.deny)] {
        for (at, problem) in glob_problems(globs) {
            let field = match at {
                Some(i) => format!("{field}/{i}"),
                None => field.to_owned(),
            };
            problems.push((field, problem));
        }
    }
    let ceiling = upstreams.max_timeout_secs;
    let max_timeout_secs = body.max_timeout_secs.unwrap_or(ceiling);
    let timeout_secs = body
        .timeout_secs
        .unwrap_or(DEFAULT_TIMEOUT_SECS.min(max_timeout_secs));
    if !(1..=ceiling).contains(&max_timeout_secs) {
        problems.push(("max_timeout_secs".into(), format!("must be 1 to {ceiling}")));
    }
    if !(1..=max_timeout_secs).contains(&timeout_secs) {
        problems.push((
            "timeout_secs".into(),
            "must be 1 to max_timeout_secs".into(),
        ));
    }
    if body.progress_extends_ms == Some(0) {
        problems.push(("progress_extends_ms".into(), "must be at least 1".into()));
    }
    let openapi = http_document(&body, &mut problems, &upstreams.client);
    let prefix = body
        .prefix
        .clone()
        .unwrap_or_else(|| format!("{}__", body.name));
    problems.extend(
        toolgate_mcp::upstream::ToolOverride::problems(&body.overrides, &prefix)
            .into_iter()
            .map(|(field, message)| (format!("overrides/{field}"), message)),
    );
    if openapi.is_some() && body.personal_credentials {
        problems.push((
            "personal_credentials".into(),
            "apply to MCP servers; an HTTP API calls with the upstream's credentials".into(),
        ));
    }
    if openapi.is_some() && !body.overrides.is_empty() {
        problems.push((
            "overrides".into(),
            "apply to MCP servers' tools; an HTTP API's tools are named from its document".into(),
        ));
    }
    ToolError::unless_valid("the upstream is invalid", problems)?;
    let stored = UpstreamSettings {
        url: body.url,
        prefix: body.prefix,
        allow: body.allow,
        deny: body.deny,
        timeout_secs,
        max_timeout_secs,
        progress_extends_ms: body.progress_extends_ms,
        header_names: body.headers.keys().cloned().collect(),
        bearer: body.bearer.is_some(),
        openapi,
        overrides: body.overrides,
        personal: body.personal_credentials,
    };
    let credentials = Credentials {
        headers: body.headers,
        bearer: body.bearer,
    };
    Ok((stored, credentials))
}

/// The most static headers sent to an upstream, and the most bytes of credentials (header
/// names and values and the bearer token together): servers refuse requests whose
/// headers pass 8-16 KiB, and these are sealed and stored per upstream and per caller.
const MAX_HEADERS: usize = 32;
const MAX_CREDENTIAL_BYTES: usize = 16 << 10;

/// Problems with credentials to send: header names and values, a bearer token.
pub(super) fn credential_problems(
    headers: &BTreeMap<String, String>,
    bearer: Option<&str>,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    let bytes = headers
        .iter()
        .map(|(n, v)| n.len() + v.len())
        .sum::<usize>()
        + bearer.map_or(0, str::len);
    if headers.len() > MAX_HEADERS || bytes > MAX_CREDENTIAL_BYTES {
        // Named without a value: each of these is a secret.
        problems.push((
            "headers".into(),
            format!(
                "at most {MAX_HEADERS} headers and {} KiB with the bearer token",
                MAX_CREDENTIAL_BYTES >> 10
            ),
        ));
        return problems;
    }
    for (name, value) in headers {
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.push((format!("headers/{name}"), "not a valid header name".into()));
        } else if toolgate_tools::egress::sets_header(name, RESERVED_HEADERS) {
            problems.push((
                format!("headers/{name}"),
                "set by the gateway itself (use `bearer` for Authorization)".into(),
            ));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            problems.push((format!("headers/{name}"), "not a valid header value".into()));
        }
    }
    if let Some(bearer) = bearer
        && (bearer.is_empty() || reqwest::header::HeaderValue::from_str(bearer).is_err())
    {
        problems.push(("bearer".into(), "not a valid token".into()));
    }
    problems
}

/// The OpenAPI document of an HTTP API upstream (an endpoint's generated), checked by
/// making its tools; `None` for an MCP server. Problems join `problems`.
pub(super) fn http_document(
    body: &UpstreamBody,
    problems: &mut Vec<(String, String)>,
    client: &reqwest::Client,
) -> Option<serde_json::Value> {
    let document = match (&body.openapi, &body.endpoint) {
        (None, None) => return None,
        (Some(_), Some(_)) => {
            problems.push((
                "endpoint".into(),
                "give an OpenAPI document or one endpoint, not both".into(),
            ));
            return None;
        }
        (Some(document), None) => document.clone(),
        (None, Some(endpoint)) => {
            let before = problems.len();
            if !toolgate_core::spec::is_valid_tool_name(&endpoint.tool) {
                problems.push((
                    "endpoint/tool".into(),
                    "use 1-64 letters, digits, '_', '.' or '-'".into(),
                ));
            }
            if !["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
                .contains(&endpoint.method.to_ascii_uppercase().as_str())
            {
                problems.push((
                    "endpoint/method".into(),
                    "GET, POST, PUT, PATCH, DELETE or HEAD".into(),
                ));
            }
            if endpoint.input_schema.get("type").and_then(|t| t.as_str()) != Some("object") {
                problems.push((
                    "endpoint/input_schema".into(),
                    "must be a JSON Schema of \"type\": \"object\"".into(),
                ));
            }
            if problems.len() > before {
                return None;
            }
            toolgate_tools::http_api::endpoint_document(
                &endpoint.tool,
                &endpoint.method,
                &endpoint.description,
                &endpoint.input_schema,
            )
        }
    };
    // Made once here to list what is wrong with it (the client is never used).
    let Ok(base) = url::Url::parse(&body.url) else {
        return Some(document);
    };
    let api = std::sync::Arc::new(toolgate_tools::http_api::HttpApi {
        base,
        headers: Default::default(),
        client: client.clone(),
        prefix: body
            .prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", body.name)),
        default_timeout: std::time::Duration::from_secs(1),
        max_timeout: std::time::Duration::from_secs(1),
    });
    let field = if body.endpoint.is_some() {
        "endpoint"
    } else {
        "openapi"
    };
    match toolgate_tools::http_api::tools(&document, api, &|_| true) {
        Ok(parsed) => {
            let registry = toolgate_core::Registry::new();
            for tool in parsed.tools {
                let name = tool.remote_name.clone();
                if let Err(err) = registry.register(tool.into_tool()) {
                    problems.push((format!("{field}/{name}"), err.to_string()));
                }
            }
        }
        Err(toolgate_tools::http_api::Invalid(found)) => {
            problems.extend(
                found
                    .into_iter()
                    .map(|(at, why)| (format!("{field}{at}"), why)),
            );
        }
    }
    Some(document)
}

/// A body checked and ready to store: its name, its configuration without secrets, and
/// its credentials sealed.
pub(super) async fn prepare(
    upstreams: &TenantUpstreams,
    caller: &Caller,
    body: UpstreamBody,
) -> Result<(String, serde_json::Value, Option<Vec<u8>>), ApiError> {
    let name = body.name.clone();
    let (stored, credentials) = validate(upstreams, body).await?;
    let (config, sealed) = sealed(upstreams, caller, &name, &stored, &credentials)?;
    Ok((name, config, sealed))
}

/// What to store: the body's name, its configuration and its sealed credentials.
pub(super) fn sealed(
    upstreams: &TenantUpstreams,
    caller: &Caller,
    name: &str,
    stored: &UpstreamSettings,
    credentials: &Credentials,
) -> Result<(serde_json::Value, Option<Vec<u8>>), ApiError> {
    let config = serde_json::to_value(stored).map_err(|e| ApiError::Internal(e.into()))?;
    let sealed = if credentials.is_empty() {
        None
    } else {
        Some(
            upstreams
                .sealer
                .seal(caller.auth.tenant, name, &stored.url, credentials)
                .map_err(ApiError::Internal)?,
        )
    };
    Ok((config, sealed))
}

/// The credentials of upstream `old`, sealed again for its new name and URL (in
/// `config`, which learns which credentials it has); refused when the URL's origin
/// changed.
pub(super) fn kept_credentials(
    upstreams: &TenantUpstreams,
    caller: &Caller,
    old: &toolgate_store::UpstreamRecord,
    new_name: &str,
    config: &mut serde_json::Value,
) -> Result<Option<Vec<u8>>, ApiError> {
    let before: UpstreamSettings = serde_json::from_value(old.config.clone())
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored upstream {}: {e}", old.name)))?;
    let mut after: UpstreamSettings =
        serde_json::from_value(config.clone()).map_err(|e| ApiError::Internal(e.into()))?;
    let origin = |u: &str| url::Url::parse(u).ok().map(|u| u.origin());
    if origin(&before.url) != origin(&after.url) {
        return Err(ToolError::invalid_arguments(
            "credentials are kept only while the URL keeps its origin (scheme, host and port): send them again for the new server",
        )
        .into());
    }
    after.header_names = before.header_names;
    after.bearer = before.bearer;
    *config = serde_json::to_value(&after).map_err(|e| ApiError::Internal(e.into()))?;
    let Some(stored) = &old.credentials else {
        return Ok(None);
    };
    let credentials = upstreams
        .sealer
        .open(caller.auth.tenant, &old.name, &before.url, stored)
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!(
                "the stored credentials of upstream {} do not open",
                old.name
            ))
        })?;
    upstreams
        .sealer
        .seal(caller.auth.tenant, new_name, &after.url, &credentials)
        .map(Some)
        .map_err(ApiError::Internal)
}
