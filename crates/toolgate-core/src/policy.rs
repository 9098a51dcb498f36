//! Approval policy: whether a call may run, needs a person's approval first, or is
//! refused; and the seam through which the executor asks the store about approvals.
//!
//! A tenant's [`Policy`] has a ratification level 0–10:
//! - 0: nothing needs approval beforehand;
//! - 1–3: high-risk tools need approval;
//! - 4–7: high- and medium-risk tools;
//! - 8–10: every call.
//!
//! Rules override the level for one tool, one agent, or one tool called by one agent:
//! `allow`, `require` (approval) or `deny`. The most specific matching rule wins (agent
//! and tool, then tool, then agent); among equally specific ones the strictest. Scopes per
//! risk add role requirements on top of the executor's fixed ones.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Adapter, ApprovalId, CallId, PrincipalId, Risk, RunStep, TenantId};

/// Longest a pending approval may wait, whatever a tenant asks.
pub const MAX_APPROVAL_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a rule (or the level) says about a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Runs without asking anyone.
    Allow,
    /// Runs once a person approves it.
    Require,
    /// Never runs.
    Deny,
}

/// What happens when an upstream's tool definition (name, description, schemas,
/// annotations) changes from the one pinned, or reads as aimed at the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PinMode {
    /// The new definition is taken as it is.
    Off,
    /// It is taken, and the change is recorded (an event and an audit row).
    Warn,
    /// It is recorded and the tool is withheld until a person approves the new
    /// definition.
    #[default]
    Quarantine,
}

impl PinMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PinMode::Off => "off",
            PinMode::Warn => "warn",
            PinMode::Quarantine => "quarantine",
        }
    }
}

/// Most entries a policy's `rules`, `cache` and `rate_limits.tools` may each hold.
pub const MAX_POLICY_ENTRIES: usize = 1000;

/// An override of the level. At least one of `tool` and `agent` is set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Tool name the rule applies to (any tool when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Agent name the rule applies to (calls from any front door when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    pub action: Action,
}

/// A tenant's approval policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Ratification level, 0–10.
    pub level: u8,
    /// Whether the principal who asked may approve its own call.
    pub self_approval: bool,
    /// How long a pending approval waits before it counts as denied, in seconds.
    pub approval_ttl_secs: u64,
    pub rules: Vec<Rule>,
    /// Extra scopes a caller needs for tools of a risk (`{"medium": "tools:write"}`).
    pub risk_scopes: BTreeMap<Risk, String>,
    /// The tenant's own rate and concurrency limits; they only tighten the operator's.
    #[serde(skip_serializing_if = "crate::limits::RateLimits::is_empty")]
    pub rate_limits: crate::limits::RateLimits,
    /// Tools whose results are cached for this tenant, with their time to live in
    /// seconds (`0`: not cached, whatever the operator's default); see [`crate::cache`].
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cache: BTreeMap<String, u64>,
    /// What a changed (or suspicious) definition of a tool from the tenant's own
    /// upstreams does (default: quarantine).
    pub pin: PinMode,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            level: 0,
            self_approval: false,
            approval_ttl_secs: 3600,
            rules: Vec::new(),
            risk_scopes: BTreeMap::new(),
            rate_limits: crate::limits::RateLimits::default(),
            cache: BTreeMap::new(),
            pin: PinMode::Quarantine,
        }
    }
}

impl Policy {
    /// Problems that make the policy unusable, each with the field it concerns.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if self.level > 10 {
            problems.push(("level".into(), "must be between 0 and 10".into()));
        }
        if self.approval_ttl_secs == 0 || self.approval_ttl_secs > MAX_APPROVAL_TTL.as_secs() {
            problems.push((
                "approval_ttl_secs".into(),
                format!("must be between 1 and {}", MAX_APPROVAL_TTL.as_secs()),
            ));
        }
        problems.extend(
            self.rate_limits
                .problems()
                .into_iter()
                .map(|(field, message)| (format!("rate_limits/{field}"), message)),
        );
        for tool in self.cache.keys() {
            if !crate::spec::is_valid_tool_name(tool) {
                problems.push((format!("cache/{tool}"), "is not a valid tool name".into()));
            }
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.tool.is_none() && rule.agent.is_none() {
                problems.push((
                    format!("rules[{i}]"),
                    "name a tool, an agent or both".into(),
                ));
            }
        }
        // Every call of the tenant reads the policy (from the store once a second per
        // instance, parsing it whole) and walks its rules and limits.
        for (field, count) in [
            ("rules", self.rules.len()),
            ("cache", self.cache.len()),
            ("rate_limits/tools", self.rate_limits.tools.len()),
        ] {
            if count > MAX_POLICY_ENTRIES {
                problems.push((
                    field.into(),
                    format!("at most {MAX_POLICY_ENTRIES} entries ({count} given)"),
                ));
            }
        }
        problems
    }

    /// What to do with a call of a tool named `tool` of `risk`, from `agent` (if any).
    pub fn decide(&self, tool: &str, risk: Risk, agent: Option<&str>) -> Action {
        let specificity = |rule: &Rule| -> Option<u8> {
            let tool_ok = rule.tool.as_deref().is_none_or(|t| t == tool);
            let agent_ok = match (&rule.agent, agent) {
                (None, _) => true,
                (Some(want), Some(got)) => want == got,
                (Some(_), None) => false,
            };
            (tool_ok && agent_ok).then_some(match (&rule.tool, &rule.agent) {
                (Some(_), Some(_)) => 3,
                (Some(_), None) => 2,
                _ => 1,
            })
        };
        let best = self
            .rules
            .iter()
            .filter_map(|r| specificity(r).map(|s| (s, r.action)))
            .max();
        if let Some((_, action)) = best {
            return action;
        }
        let needs_approval = match self.level {
            0 => false,
            1..=3 => risk == Risk::High,
            4..=7 => risk >= Risk::Medium,
            _ => true,
        };
        if needs_approval {
            Action::Require
        } else {
            Action::Allow
        }
    }

    pub fn approval_ttl(&self) -> Duration {
        Duration::from_secs(self.approval_ttl_secs).min(MAX_APPROVAL_TTL)
    }
}

/// A call that needs approval, as the executor describes it to the store.
#[derive(Clone, Debug)]
pub struct ApprovalRequest {
    pub tenant: TenantId,
    pub call_id: CallId,
    pub requester: PrincipalId,
    pub requester_name: String,
    /// The requester's auth context, so an approved call can run as them later.
    pub auth: crate::AuthContext,
    pub adapter: Adapter,
    pub tool: String,
    pub risk: Risk,
    /// Secret fields masked (shown to deciders).
    pub arguments: Value,
    /// The arguments as given (kept until the call is settled, never shown).
    pub call_arguments: Value,
    pub arguments_hash: String,
    pub run: Option<RunStep>,
    pub agent: Option<String>,
    /// An approval the caller presents (a retry, or a resumed agent run).
    pub presented: Option<ApprovalId>,
    pub expires_at: SystemTime,
}

/// What the store says about a call that needs approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Approved and now used up by this call.
    Approved { approval: ApprovalId },
    /// Waiting for a person (new, or the one presented).
    Pending {
        approval: ApprovalId,
        expires_at: SystemTime,
    },
    /// Denied by a person, or expired.
    Denied {
        approval: ApprovalId,
        reason: String,
        /// Who decided; `None` when it expired.
        decided_by: Option<String>,
    },
    /// Not asked, and nothing written: as many calls wait for a person already as may,
    /// `waiting` of the requester's own (`by_requester`) or of its tenant's.
    Crowded { waiting: u64, by_requester: bool },
}

/// How long a call refused because too many wait for approval ([`Gate::Crowded`]) is
/// told to wait before it is made again: about how long a person takes to decide some.
pub const CROWDED_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// The `rate_limited` error of a call refused because `waiting` calls wait for approval
/// already, the requester's own (`by_requester`) or its tenant's.
pub fn crowded(tool: &str, waiting: u64, by_requester: bool) -> crate::ToolError {
    let (whose, setting) = if by_requester {
        ("your", "principal_pending_approvals")
    } else {
        ("your tenant's", "tenant_pending_approvals")
    };
    crate::ToolError::new(
        crate::ErrorKind::RateLimited,
        format!(
            "calling {tool} needs a person's approval, and {waiting} of {whose} calls wait for one already, the most that may (limits.{setting}); it was not asked for"
        ),
    )
    .with_retry_after(CROWDED_RETRY_AFTER, true)
    .with_suggestion("ask for the waiting approvals to be decided, or let them lapse, then call again")
}

/// The `denied` error of a call a person refused (`decided_by`) or nobody approved in
/// time (`None`), naming the approval and the reason.
pub fn denied(
    tool: &str,
    approval: crate::ApprovalId,
    reason: &str,
    decided_by: Option<&str>,
) -> crate::ToolError {
    let message = match decided_by {
        Some(who) => format!("{who} denied calling {tool}: {reason}"),
        None => format!("calling {tool} was not approved: {reason}"),
    };
    let mut err = crate::ToolError::new(crate::ErrorKind::Denied, message).with_details(
        serde_json::json!({"approval_id": approval, "reason": reason, "decided_by": decided_by}),
    );
    err.recoverable = false;
    err
}

#[derive(Debug, thiserror::Error)]
#[error("approval store unavailable: {message}")]
pub struct ApprovalError {
    pub message: String,
    /// The store could not answer for now (unreachable, out of connections): the call
    /// may succeed if made again shortly.
    pub transient: bool,
}

impl ApprovalError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: false,
        }
    }

    /// From a store's error, transient as the store tells.
    pub fn from_store<S: crate::stores::Backend>(err: &S::Error) -> Self {
        Self {
            message: err.to_string(),
            transient: S::is_transient(err),
        }
    }
}

/// Where policies and approvals live. Implemented by the gateway over its store.
#[async_trait]
pub trait Approvals: Send + Sync {
    /// The tenant's policy (the default when it has none).
    async fn policy(&self, tenant: TenantId) -> Result<std::sync::Arc<Policy>, ApprovalError>;

    /// Settles a call that needs approval, atomically: uses up a decided approval that
    /// matches it (the one presented, or an approved one for the same requester, tool and
    /// arguments), or returns the pending one, or records a new pending approval.
    async fn gate(&self, request: ApprovalRequest) -> Result<Gate, ApprovalError>;
}

/// No approvals: every policy is the default (level 0), so nothing waits. For tests of
/// the executor alone and tools run outside a gateway.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoApprovals;

#[async_trait]
impl Approvals for NoApprovals {
    async fn policy(&self, _: TenantId) -> Result<std::sync::Arc<Policy>, ApprovalError> {
        Ok(std::sync::Arc::new(Policy::default()))
    }

    async fn gate(&self, _: ApprovalRequest) -> Result<Gate, ApprovalError> {
        Err(ApprovalError::new("this executor keeps no approvals"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(tool: Option<&str>, agent: Option<&str>, action: Action) -> Rule {
        Rule {
            tool: tool.map(str::to_owned),
            agent: agent.map(str::to_owned),
            action,
        }
    }

    #[test]
    fn levels_pick_risks() {
        let at = |level| Policy {
            level,
            ..Policy::default()
        };
        for (level, low, medium, high) in [
            (0, Action::Allow, Action::Allow, Action::Allow),
            (2, Action::Allow, Action::Allow, Action::Require),
            (5, Action::Allow, Action::Require, Action::Require),
            (9, Action::Require, Action::Require, Action::Require),
        ] {
            let p = at(level);
            assert_eq!(p.decide("t", Risk::Low, None), low, "level {level}");
            assert_eq!(p.decide("t", Risk::Medium, None), medium, "level {level}");
            assert_eq!(p.decide("t", Risk::High, None), high, "level {level}");
        }
    }

    #[test]
    fn the_most_specific_rule_wins_then_the_strictest() {
        let p = Policy {
            level: 9,
            rules: vec![
                rule(Some("read_file"), None, Action::Allow),
                rule(None, Some("bot"), Action::Deny),
                rule(Some("read_file"), Some("bot"), Action::Allow),
                rule(Some("echo"), None, Action::Allow),
                rule(Some("echo"), None, Action::Require),
            ],
            ..Policy::default()
        };
        assert_eq!(p.decide("read_file", Risk::Low, None), Action::Allow);
        assert_eq!(p.decide("read_file", Risk::Low, Some("bot")), Action::Allow);
        assert_eq!(p.decide("list_files", Risk::Low, Some("bot")), Action::Deny);
        assert_eq!(
            p.decide("list_files", Risk::Low, Some("other")),
            Action::Require
        );
        assert_eq!(p.decide("echo", Risk::Low, None), Action::Require);
    }

    #[test]
    fn bad_policies_name_their_fields() {
        let p = Policy {
            level: 11,
            approval_ttl_secs: 0,
            rules: vec![rule(None, None, Action::Deny)],
            ..Policy::default()
        };
        let fields: Vec<String> = p.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["level", "approval_ttl_secs", "rules[0]"]);

        let many = MAX_POLICY_ENTRIES + 1;
        let mut p = Policy {
            rules: vec![rule(Some("echo"), None, Action::Allow); many],
            cache: (0..many).map(|i| (format!("t{i}"), 1)).collect(),
            ..Policy::default()
        };
        p.rate_limits.tools = (0..many).map(|i| (format!("t{i}"), 1)).collect();
        let fields: Vec<String> = p.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["rules", "cache", "rate_limits/tools"]);
        p.rules.truncate(MAX_POLICY_ENTRIES);
        p.cache.clear();
        p.rate_limits.tools.clear();
        assert!(p.problems().is_empty(), "{:?}", p.problems());
    }
}
