//! The tenant's policy in the executor: calls held for approval, rules and risk scopes.

use super::*;

/// Approvals kept in memory: the test decides them.
struct FakeApprovals {
    policy: Arc<crate::Policy>,
    /// `None` pending, `Some(true)` approved, `Some(false)` denied.
    decisions: Mutex<std::collections::HashMap<crate::ApprovalId, Option<bool>>>,
}

#[async_trait]
impl crate::Approvals for FakeApprovals {
    async fn policy(
        &self,
        _: TenantId,
    ) -> Result<Arc<crate::Policy>, crate::policy::ApprovalError> {
        Ok(self.policy.clone())
    }

    async fn gate(
        &self,
        request: crate::policy::ApprovalRequest,
    ) -> Result<crate::Gate, crate::policy::ApprovalError> {
        let mut decisions = self.decisions.lock().expect("lock");
        let approval = request.presented.unwrap_or_default();
        Ok(match decisions.entry(approval).or_insert(None) {
            None => crate::Gate::Pending {
                approval,
                expires_at: request.expires_at,
            },
            Some(true) => crate::Gate::Approved { approval },
            Some(false) => crate::Gate::Denied {
                approval,
                reason: "not today".into(),
                decided_by: Some("boss".into()),
            },
        })
    }
}

/// Approvals whose store cannot answer: for now (`transient`), or for good.
struct Unreadable {
    transient: bool,
}

impl Unreadable {
    fn error(&self) -> crate::policy::ApprovalError {
        crate::policy::ApprovalError {
            message: "pool timed out while waiting for an open connection".into(),
            transient: self.transient,
        }
    }
}

#[async_trait]
impl crate::Approvals for Unreadable {
    async fn policy(
        &self,
        _: TenantId,
    ) -> Result<Arc<crate::Policy>, crate::policy::ApprovalError> {
        Err(self.error())
    }

    async fn gate(
        &self,
        _: crate::policy::ApprovalRequest,
    ) -> Result<crate::Gate, crate::policy::ApprovalError> {
        Err(self.error())
    }
}

/// A policy the store cannot give for now (out of connections) leaves the call unrun
/// with a retryable 503, not a 500 (as it did: every call of a tenant whose policy fell
/// out of the cache while the pool was exhausted was an internal error); one it cannot
/// read at all stays internal.
#[tokio::test]
async fn a_policy_out_of_reach_for_now_is_unavailable_and_retryable() {
    for (transient, kind) in [(true, ErrorKind::Unavailable), (false, ErrorKind::Internal)] {
        let f = fixture(INVOKE);
        let executor = f
            .executor
            .clone()
            .with_approvals(Arc::new(Unreadable { transient }));
        let f = Fixture { executor, ..f };
        let err = f
            .call(f.ctx(), "echo", json!({"n": 1}))
            .await
            .expect_err("not run");
        assert_eq!(err.kind, kind, "{err}");
        assert_eq!(err.retry.is_some(), transient, "{err:?}");
        assert!(
            err.cause
                .as_deref()
                .unwrap_or("")
                .contains("pool timed out")
        );
    }
}

fn with_policy(f: Fixture, policy: crate::Policy) -> (Fixture, Arc<FakeApprovals>) {
    let approvals = Arc::new(FakeApprovals {
        policy: Arc::new(policy),
        decisions: Mutex::default(),
    });
    let executor = f.executor.clone().with_approvals(approvals.clone());
    (Fixture { executor, ..f }, approvals)
}

#[tokio::test]
async fn a_call_held_for_approval_runs_once_approved_and_not_when_denied() {
    let level5 = crate::Policy {
        level: 5,
        ..crate::Policy::default()
    };
    let (f, approvals) = with_policy(fixture(INVOKE), level5);
    // Low risk runs at level 5.
    f.call(f.ctx(), "echo", json!({"n": 1}))
        .await
        .expect("low risk runs");

    let err = f
        .call(f.ctx(), "writer", json!({"n": 2}))
        .await
        .expect_err("held");
    assert_eq!(err.kind, ErrorKind::ApprovalRequired, "{err}");
    let id: crate::ApprovalId = err.details.as_ref().expect("details")["approval_id"]
        .as_str()
        .expect("id")
        .parse()
        .expect("uuid");
    assert_eq!(
        err.awaiting_approval.map(|h| h.approval),
        Some(id),
        "typed as on the wire"
    );
    assert!(
        f.audit.begun.lock().expect("lock").is_empty(),
        "must not start"
    );
    let held = f
        .audit
        .records
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("row");
    assert_eq!(held.outcome, Outcome::Error(ErrorKind::ApprovalRequired));
    assert_eq!(held.approval, Some(id));

    approvals
        .decisions
        .lock()
        .expect("lock")
        .insert(id, Some(true));
    let ctx = f.ctx().with_approval(Some(id));
    f.call(ctx, "writer", json!({"n": 2}))
        .await
        .expect("approved runs");
    let ran = f
        .audit
        .records
        .lock()
        .expect("lock")
        .last()
        .cloned()
        .expect("row");
    assert_eq!((ran.outcome, ran.approval), (Outcome::Ok, Some(id)));

    approvals
        .decisions
        .lock()
        .expect("lock")
        .insert(id, Some(false));
    let err = f
        .call(f.ctx().with_approval(Some(id)), "writer", json!({"n": 2}))
        .await
        .expect_err("denied");
    // Each meeting with the approval is an event: held, used, refused.
    assert_eq!(
        *f.events.1.lock().expect("lock"),
        ["approval.pending", "approval.used", "approval.denied"]
    );
    assert_eq!(err.awaiting_approval, None);
    assert_eq!(err.kind, ErrorKind::Denied);
    assert!(
        err.message
            .contains("boss denied calling writer: not today"),
        "{err}"
    );
}

#[tokio::test]
async fn policy_rules_deny_and_risk_scopes_forbid() {
    let policy = crate::Policy {
        rules: vec![crate::policy::Rule {
            tool: Some("echo".into()),
            agent: None,
            action: crate::Action::Deny,
        }],
        risk_scopes: [(Risk::Medium, "tools:write".to_owned())].into(),
        ..crate::Policy::default()
    };
    let (f, _) = with_policy(fixture(INVOKE), policy);
    let err = f
        .call(f.ctx(), "echo", json!({"n": 1}))
        .await
        .expect_err("denied");
    assert_eq!(err.kind, ErrorKind::Denied);
    let err = f
        .call(f.ctx(), "writer", json!({"n": 1}))
        .await
        .expect_err("forbidden");
    assert_eq!(err.kind, ErrorKind::Forbidden);
    assert!(err.message.contains("tools:write"), "{err}");
}
