//! `/v1/upstreams/{name}/credentials`: each caller's own credential for an upstream that
//! calls with it (write-only; names shown, values never).

use super::*;

/// A principal's own credential for an upstream that calls with them. Write-only.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonalBody {
    /// Sent as `Authorization: Bearer …` instead of the upstream's.
    #[serde(default)]
    pub bearer: Option<String>,
    /// Sent with every request, over the upstream's headers of the same name. At most 32;
    /// with `bearer`, at most 16 KiB.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// What a principal stored for an upstream, without the values.
#[derive(Debug, Serialize, ToSchema)]
pub struct PersonalView {
    pub bearer: bool,
    pub headers: Vec<String>,
}

impl PersonalView {
    /// What may be shown of `credentials`: whether a bearer is set, the header names.
    fn of(credentials: Credentials) -> Self {
        Self {
            bearer: credentials.bearer.is_some(),
            headers: credentials.headers.into_keys().collect(),
        }
    }
}

/// The caller's tenant's upstream `name`, if it calls with each caller's own credential;
/// the caller needs `tools:invoke` (whoever calls its tools keeps their own credential).
pub(super) async fn personal_upstream(
    app: &AppState,
    caller: &Caller,
    name: &str,
) -> Result<
    (
        std::sync::Arc<TenantUpstreams>,
        UpstreamRecord,
        UpstreamSettings,
    ),
    ApiError,
> {
    caller.require(scopes::TOOLS_INVOKE)?;
    let upstreams = app.upstreams.clone().ok_or_else(|| {
        ApiError::from(ToolError::not_found(
            "tenant upstreams are disabled on this gateway (tenant_upstreams.enabled)",
        ))
    })?;
    let record = app
        .store
        .get_upstream(caller.auth.tenant, name)
        .await?
        .ok_or_else(|| not_found(name))?;
    let config = stored(&record)?;
    if !config.personal {
        return Err(ToolError::invalid_arguments(format!(
            "upstream {name:?} calls with its own credentials, not each caller's (personal_credentials)"
        ))
        .into());
    }
    Ok((upstreams, record, config))
}

/// What the caller stored for an upstream that calls with each caller's own credential
/// (names only: values are write-only).
#[utoipa::path(get, path = "/v1/upstreams/{name}/credentials", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 200, description = "Stored", body = PersonalView),
        (status = 400, description = "The upstream calls with its own credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tools:invoke`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such upstream, or nothing stored", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
pub(super) async fn get_my_credential(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
) -> Result<AppJson<PersonalView>, ApiError> {
    let (upstreams, record, config) = personal_upstream(&app, &caller, &name).await?;
    let credential = upstreams
        .personals
        .load(
            caller.auth.tenant,
            record.id,
            &record.name,
            &config.url,
            caller.auth.principal.id,
        )
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!(e)))?
        .ok_or_else(|| {
            ToolError::not_found(format!("you stored no credential for {name:?}")).with_suggestion(
                format!("store one with PUT /v1/upstreams/{name}/credentials"),
            )
        })?;
    Ok(AppJson(PersonalView::of(credential)))
}

/// Store the caller's own credential for an upstream that calls with each caller's
/// (replacing any before). Sealed at rest, bound to the caller, the upstream and its
/// URL; never returned, never logged.
#[utoipa::path(put, path = "/v1/upstreams/{name}/credentials", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    request_body(content = PersonalBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored", body = PersonalView),
        (status = 400, description = "Invalid credential, or the upstream calls with its own", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tools:invoke`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such upstream in your tenant", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
pub(super) async fn put_my_credential(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
    AppJson(body): AppJson<PersonalBody>,
) -> Result<AppJson<PersonalView>, ApiError> {
    let (upstreams, record, config) = personal_upstream(&app, &caller, &name).await?;
    let mut problems = credential_problems(&body.headers, body.bearer.as_deref());
    if body.bearer.is_none() && body.headers.is_empty() {
        problems.push(("bearer".into(), "give a bearer token or headers".into()));
    }
    ToolError::unless_valid("the credential is invalid", problems)?;
    let credentials = Credentials {
        headers: body.headers,
        bearer: body.bearer,
    };
    upstreams
        .personals
        .put(
            caller.auth.tenant,
            (record.id, &record.name, &config.url),
            caller.auth.principal.id,
            &credentials,
        )
        .await
        // The store's errors keep their meaning (unavailable: 503); sealing's are ours.
        .map_err(|e| match e.downcast::<toolgate_store::StoreError>() {
            Ok(store) => ApiError::from(store),
            Err(other) => ApiError::Internal(other),
        })?;
    let stored = PersonalView::of(credentials);
    // What may be shown of it: whether a bearer is set, the header names.
    let change =
        serde_json::json!({"upstream": name, "bearer": stored.bearer, "headers": stored.headers});
    crate::rest::changes::record(&app, &caller, "credentials.put", change).await?;
    Ok(AppJson(stored))
}

/// Forget the caller's own credential for an upstream: its calls are refused until it
/// stores another.
#[utoipa::path(delete, path = "/v1/upstreams/{name}/credentials", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 204, description = "Forgotten"),
        (status = 400, description = "The upstream calls with its own credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tools:invoke`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such upstream, or nothing stored", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
pub(super) async fn delete_my_credential(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
) -> Result<StatusCode, ApiError> {
    let (upstreams, record, _) = personal_upstream(&app, &caller, &name).await?;
    let removed = upstreams
        .personals
        .delete(caller.auth.tenant, record.id, caller.auth.principal.id)
        .await?;
    if removed {
        let change = serde_json::json!({"upstream": name});
        crate::rest::changes::record(&app, &caller, "credentials.delete", change).await?;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ToolError::not_found(format!("you stored no credential for {name:?}")).into())
    }
}
