use super::*;
use crate::{Principal, PrincipalKind};

fn auth(tenant: TenantId) -> AuthContext {
    AuthContext {
        tenant,
        tenant_name: "t".into(),
        principal: Principal {
            id: PrincipalId::new(),
            name: "p".into(),
            kind: PrincipalKind::ServiceAccount,
        },
        roles: vec![],
        scopes: vec![],
        key: None,
    }
}

fn per_minute(n: u32) -> RateLimits {
    RateLimits {
        tenant_per_minute: Some(n),
        ..RateLimits::default()
    }
}

#[test]
fn a_tenant_gets_its_burst_then_a_retry_after_and_others_are_untouched() {
    let admission = Arc::new(Admission::new(AdmissionConfig::default()));
    let (a, b) = (auth(TenantId::new()), auth(TenantId::new()));
    let limits = per_minute(3);
    for _ in 0..3 {
        assert!(admission.admit(&a, "echo", &limits, 0).is_ok());
    }
    let refused = admission
        .admit(&a, "echo", &limits, 0)
        .expect_err("refused");
    assert_eq!(refused.limit, Limit::Tenant);
    assert_eq!(refused.error.kind, ErrorKind::RateLimited);
    // One call every 20 s: the wait is at most that, and at least a second.
    let secs = refused.error.details.as_ref().expect("present")["retry_after_secs"]
        .as_u64()
        .expect("present");
    assert!((1..=20).contains(&secs), "{secs}");
    assert!(admission.admit(&b, "echo", &limits, 0).is_ok());
    assert_eq!(admission.in_flight(), 0, "guards dropped");
}

#[test]
fn principal_and_tool_limits_apply_to_their_own_buckets() {
    let admission = Arc::new(Admission::new(AdmissionConfig::default()));
    let tenant = TenantId::new();
    let (p, q) = (auth(tenant), auth(tenant));
    let limits = RateLimits {
        principal_per_minute: Some(1),
        tools: BTreeMap::from([("write_file".into(), 1)]),
        ..RateLimits::default()
    };
    assert!(admission.admit(&p, "echo", &limits, 0).is_ok());
    assert_eq!(
        admission
            .admit(&p, "echo", &limits, 0)
            .expect_err("refused")
            .limit,
        Limit::Principal
    );
    assert!(admission.admit(&q, "write_file", &limits, 0).is_ok());
    let other = auth(tenant);
    assert_eq!(
        admission
            .admit(&other, "write_file", &limits, 0)
            .expect_err("refused")
            .limit,
        Limit::Tool
    );
}

#[test]
fn concurrency_counts_running_calls_and_frees_on_drop() {
    let admission = Arc::new(Admission::new(AdmissionConfig::default()));
    let a = auth(TenantId::new());
    let limits = RateLimits {
        tenant_concurrency: Some(2),
        ..RateLimits::default()
    };
    let first = admission.admit(&a, "x", &limits, 0).expect("present");
    let _second = admission.admit(&a, "x", &limits, 0).expect("present");
    assert_eq!(
        admission
            .admit(&a, "x", &limits, 0)
            .expect_err("refused")
            .limit,
        Limit::Concurrency
    );
    drop(first);
    assert!(admission.admit(&a, "x", &limits, 0).is_ok());
}

#[test]
fn the_instance_sheds_over_capacity_or_audit_backlog_with_unavailable() {
    let admission = Arc::new(Admission::new(AdmissionConfig {
        max_in_flight: 1,
        max_audit_backlog: 10,
        ..AdmissionConfig::default()
    }));
    let a = auth(TenantId::new());
    let none = RateLimits::default();
    let held = admission.admit(&a, "x", &none, 0).expect("present");
    let refused = admission.admit(&a, "x", &none, 0).expect_err("refused");
    assert_eq!(refused.limit, Limit::InFlight);
    assert_eq!(refused.error.kind, ErrorKind::Unavailable);
    drop(held);
    assert_eq!(
        admission
            .admit(&a, "x", &none, 10)
            .expect_err("refused")
            .limit,
        Limit::AuditBacklog
    );
    assert!(admission.admit(&a, "x", &none, 9).is_ok());
}

#[test]
fn instances_share_a_limit_rounding_up() {
    let admission = Arc::new(Admission::new(AdmissionConfig::default()));
    admission.set_instances(3);
    let a = auth(TenantId::new());
    let limits = per_minute(7);
    for _ in 0..3 {
        assert!(admission.admit(&a, "x", &limits, 0).is_ok());
    }
    assert!(admission.admit(&a, "x", &limits, 0).is_err());
}

#[test]
fn tightest_takes_the_smaller_of_each_limit() {
    let operator = RateLimits {
        tenant_per_minute: Some(600),
        tools: BTreeMap::from([("a".into(), 10)]),
        ..RateLimits::default()
    };
    let tenant = RateLimits {
        tenant_per_minute: Some(6000),
        principal_per_minute: Some(60),
        tools: BTreeMap::from([("a".into(), 20), ("b".into(), 5)]),
        tenant_concurrency: None,
    };
    let both = operator.tightest(&tenant);
    assert_eq!(both.tenant_per_minute, Some(600));
    assert_eq!(both.principal_per_minute, Some(60));
    assert_eq!(both.tools["a"], 10);
    assert_eq!(both.tools["b"], 5);
    assert_eq!(both.tenant_concurrency, None);
    assert_eq!(
        RateLimits {
            tenant_concurrency: Some(0),
            ..RateLimits::default()
        }
        .problems()
        .len(),
        1
    );
}

#[test]
fn a_principals_reads_are_limited_apart_from_its_calls_and_from_others() {
    let unlimited = Admission::new(AdmissionConfig::default());
    let p = auth(TenantId::new());
    assert!(
        (0..1_000).all(|_| unlimited.admit_read(&p).is_ok()),
        "off by default"
    );

    let admission = Arc::new(Admission::new(AdmissionConfig {
        principal_reads_per_minute: Some(2),
        ..AdmissionConfig::default()
    }));
    let q = auth(p.tenant);
    assert!(admission.admit_read(&p).is_ok());
    assert!(admission.admit_read(&p).is_ok());
    let refused = admission.admit_read(&p).expect_err("refused");
    assert_eq!(refused.limit, Limit::Reads);
    assert_eq!(refused.error.kind, ErrorKind::RateLimited);
    let secs = refused.error.details.as_ref().expect("present")["retry_after_secs"]
        .as_u64()
        .expect("present");
    assert!((1..=30).contains(&secs), "{secs}");
    // Another principal of the same tenant reads on; the calls' own buckets are apart.
    assert!(admission.admit_read(&q).is_ok());
    let limits = RateLimits {
        principal_per_minute: Some(1),
        ..RateLimits::default()
    };
    assert!(admission.admit(&p, "echo", &limits, 0).is_ok());
}
