//! `/v1/policy`: a tenant's approval policy — the level, rules by tool and agent, scopes by
//! risk, how long approvals wait, self-approval, and the tenant's rate limits. Reading
//! and setting it needs `tenant:admin`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use serde::{Deserialize, Serialize};
use toolgate_core::auth::scopes;
use toolgate_core::limits::RateLimits;
use toolgate_core::policy::Rule;
use toolgate_core::{Action, Policy, Risk, ToolError, Violation};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, Problem};
use super::extract::AppJson;
use crate::auth::Caller;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_policy, put_policy))
}

/// A tenant's approval policy.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "level": 5,
    "self_approval": false,
    "approval_ttl_secs": 3600,
    "rules": [{"tool": "read_file", "action": "allow"}, {"agent": "nightly", "tool": "execute_command", "action": "deny"}],
    "risk_scopes": {"high": "tools:high_risk"},
    "rate_limits": {"tenant_per_minute": 600, "principal_per_minute": 120, "tools": {"web_fetch": 30}, "tenant_concurrency": 16}
}))]
pub struct PolicyBody {
    /// Ratification level 0–10: 0 asks nobody; 1–3 holds high-risk calls for approval;
    /// 4–7 high- and medium-risk calls; 8–10 every call.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 10)]
    pub level: u8,
    /// Whether the principal who made a call may approve it.
    #[serde(default)]
    pub self_approval: bool,
    /// How long an approval waits for a decision before it counts as denied, and how
    /// long an approved call may then take to be made before the approval lapses, in
    /// seconds.
    #[serde(default = "default_ttl")]
    #[schema(minimum = 1, maximum = 604800)]
    pub approval_ttl_secs: u64,
    /// Overrides of the level for a tool, an agent, or a tool called by an agent. The
    /// most specific matching rule wins, then the strictest.
    #[serde(default)]
    #[schema(max_items = 1000)]
    pub rules: Vec<RuleBody>,
    /// Scopes a caller needs, beyond the fixed ones, for tools of a risk
    /// (`low`, `medium`, `high`).
    #[serde(default)]
    pub risk_scopes: BTreeMap<String, String>,
    /// The tenant's own rate and concurrency limits. They only tighten the operator's
    /// (`[limits]`): the stricter of the two applies.
    #[serde(default)]
    pub rate_limits: RateLimitsBody,
    /// Tools whose results are cached for the tenant, by name, with how long a result is
    /// kept in seconds (at most the operator's `cache.max_ttl_secs`; `0` turns off an
    /// operator default). Only read-only, idempotent tools are ever cached; a cache hit
    /// still passes validation, authorization and this policy, and is audited
    /// (`cache: hit`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cache: BTreeMap<String, u64>,
    /// What a changed definition of a tool from the tenant's own upstreams does (its
    /// name, description, schemas or annotations differ from the pinned one), and a
    /// description that reads as instructions to the model: `quarantine` (default: the
    /// tool is withheld until a tenant admin approves the new definition at
    /// `/v1/tool-definitions`), `warn` (taken, and recorded), `off`.
    #[serde(default)]
    #[schema(value_type = String, example = "quarantine")]
    pub pin: toolgate_core::policy::PinMode,
}

/// Limits on the tenant's calls; an absent limit is none (beyond the operator's). A call
/// over one is refused with 429 and `Retry-After`, before it runs and without an audit row.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsBody {
    /// Calls per minute by the whole tenant (up to this many at once, then one every
    /// 60/n seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub tenant_per_minute: Option<u32>,
    /// Calls per minute by each principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub principal_per_minute: Option<u32>,
    /// Calls per minute of a tool by the whole tenant, by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, u32>,
    /// Calls in flight at once for the whole tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub tenant_concurrency: Option<u32>,
}

impl From<&RateLimits> for RateLimitsBody {
    fn from(l: &RateLimits) -> Self {
        Self {
            tenant_per_minute: l.tenant_per_minute,
            principal_per_minute: l.principal_per_minute,
            tools: l.tools.clone(),
            tenant_concurrency: l.tenant_concurrency,
        }
    }
}

impl From<RateLimitsBody> for RateLimits {
    fn from(l: RateLimitsBody) -> Self {
        Self {
            tenant_per_minute: l.tenant_per_minute,
            principal_per_minute: l.principal_per_minute,
            tools: l.tools,
            tenant_concurrency: l.tenant_concurrency,
        }
    }
}

fn default_ttl() -> u64 {
    Policy::default().approval_ttl_secs
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `allow`, `require` (approval) or `deny`.
    #[schema(value_type = String, example = "require")]
    pub action: Action,
}

impl From<&Policy> for PolicyBody {
    fn from(p: &Policy) -> Self {
        Self {
            level: p.level,
            self_approval: p.self_approval,
            approval_ttl_secs: p.approval_ttl_secs,
            rules: p
                .rules
                .iter()
                .map(|r| RuleBody {
                    tool: r.tool.clone(),
                    agent: r.agent.clone(),
                    action: r.action,
                })
                .collect(),
            risk_scopes: p
                .risk_scopes
                .iter()
                .map(|(risk, scope)| (risk.as_str().to_owned(), scope.clone()))
                .collect(),
            rate_limits: RateLimitsBody::from(&p.rate_limits),
            cache: p.cache.clone(),
            pin: p.pin,
        }
    }
}

impl PolicyBody {
    fn into_policy(self) -> Result<Policy, ToolError> {
        let mut violations = Vec::new();
        let mut risk_scopes = BTreeMap::new();
        for (risk, scope) in self.risk_scopes {
            let parsed = match risk.as_str() {
                "low" => Risk::Low,
                "medium" => Risk::Medium,
                "high" => Risk::High,
                _ => {
                    violations.push(Violation {
                        pointer: format!("/risk_scopes/{risk}"),
                        message: "a risk is low, medium or high".into(),
                    });
                    continue;
                }
            };
            risk_scopes.insert(parsed, scope);
        }
        let policy = Policy {
            level: self.level,
            self_approval: self.self_approval,
            approval_ttl_secs: self.approval_ttl_secs,
            rules: self
                .rules
                .into_iter()
                .map(|r| Rule {
                    tool: r.tool,
                    agent: r.agent,
                    action: r.action,
                })
                .collect(),
            risk_scopes,
            rate_limits: self.rate_limits.into(),
            cache: self.cache,
            pin: self.pin,
        };
        violations.extend(
            policy
                .problems()
                .into_iter()
                .map(|(field, message)| Violation {
                    pointer: format!("/{}", field.replace('[', "/").replace(']', "")),
                    message,
                }),
        );
        if violations.is_empty() {
            Ok(policy)
        } else {
            Err(ToolError::invalid_arguments(format!(
                "the policy is invalid: {} problems",
                violations.len()
            ))
            .with_violations(violations))
        }
    }
}

/// The tenant's approval policy (the default, level 0, until one is set).
#[utoipa::path(
    get,
    path = "/v1/policy",
    tag = "approvals",
    responses(
        (status = 200, description = "The policy", body = PolicyBody),
        (status = 403, description = "The caller lacks tenant:admin", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn get_policy(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<PolicyBody>, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    let policy = current_policy(&app, &caller).await?;
    Ok(AppJson(PolicyBody::from(&*policy)))
}

async fn current_policy(app: &AppState, caller: &Caller) -> Result<Arc<Policy>, ApiError> {
    use toolgate_core::Approvals;
    app.approvals
        .policy(caller.auth.tenant)
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!(e)))
}

/// Replace the tenant's approval policy. It applies to new calls at once on this
/// instance, within a second on others.
#[utoipa::path(
    put,
    path = "/v1/policy",
    tag = "approvals",
    request_body(content = PolicyBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The policy now in force", body = PolicyBody),
        (status = 400, description = "Malformed body or an invalid policy (each problem listed)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks tenant:admin", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than the configured limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body not sent as application/json", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    )
)]
async fn put_policy(
    State(app): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<PolicyBody>,
) -> Result<AppJson<PolicyBody>, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    let policy = body.into_policy()?;
    let doc = serde_json::to_value(&policy).map_err(|e| ApiError::Internal(e.into()))?;
    app.store
        .put_approval_policy(caller.auth.tenant, &doc)
        .await?;
    app.approvals.forget(caller.auth.tenant);
    app.executor
        .events()
        .emit(&toolgate_core::Event::PolicyChanged {
            tenant: caller.auth.tenant,
            level: policy.level,
        });
    let stored = PolicyBody::from(&policy);
    let change = serde_json::to_value(&stored).unwrap_or_default();
    super::changes::record(&app, &caller, "policy.update", change).await?;
    Ok(AppJson(stored))
}
