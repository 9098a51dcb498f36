use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::{CallContext, ToolOutput};

struct Named(ToolSpec);

#[async_trait]
impl Tool for Named {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _: &CallContext, _: Value) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::default())
    }
}

fn tool(name: &str, schema: Value) -> Arc<dyn Tool> {
    Arc::new(Named(ToolSpec::new(name, "test tool", schema)))
}

const TENANT_A: TenantId = TenantId(uuid::Uuid::from_u128(0xa));
const TENANT_B: TenantId = TenantId(uuid::Uuid::from_u128(0xb));

fn names(reg: &Registry, tenant: TenantId) -> Vec<String> {
    reg.list(tenant)
        .iter()
        .map(|t| t.spec().name.clone())
        .collect()
}

#[test]
fn a_tenants_tools_are_seen_by_that_tenant_only() {
    let reg = Registry::new();
    let obj = || json!({"type": "object"});
    reg.register(tool("shared", obj())).expect("shared");
    reg.register_as(Owner::Tenant(TENANT_A), tool("up__x", obj()))
        .expect("a's tool");
    // Another tenant may use the same name for a tool of its own.
    reg.register_as(Owner::Tenant(TENANT_B), tool("up__x", obj()))
        .expect("b's tool of the same name");
    assert_eq!(names(&reg, TENANT_A), ["shared", "up__x"]);
    let (a_seen, b_seen) = (reg.generation(TENANT_A), reg.generation(TENANT_B));
    assert!(reg.unregister(Owner::Tenant(TENANT_B), "up__x"));
    // B's change is B's news only; a shared change is everyone's.
    assert_eq!(reg.generation(TENANT_A), a_seen);
    assert!(reg.generation(TENANT_B) > b_seen);
    reg.register(tool("shared2", obj())).expect("shared");
    assert!(reg.generation(TENANT_A) > a_seen);
    reg.unregister(Owner::Everyone, "shared2");
    assert_eq!(names(&reg, TENANT_B), ["shared"]);
    assert!(reg.get(TENANT_B, "up__x").is_none());
    assert!(reg.get(TENANT_A, "up__x").is_some());
    // A tenant cannot take a shared tool's name…
    assert!(matches!(
        reg.register_as(Owner::Tenant(TENANT_A), tool("shared", obj())),
        Err(RegistryError::Duplicate(_))
    ));
    // …and a shared tool registered later under a tenant's name hides the tenant's.
    reg.register(tool("up__x", obj())).expect("shared up__x");
    let seen = reg.get(TENANT_A, "up__x").expect("visible");
    assert!(Arc::ptr_eq(
        &seen,
        &reg.get(TENANT_B, "up__x").expect("shared")
    ));
    assert_eq!(names(&reg, TENANT_A), ["shared", "up__x"]);
}

#[test]
fn duplicate_names_are_refused() {
    let reg = Registry::new();
    reg.register(tool("a", json!({"type": "object"})))
        .expect("first registration");
    let err = reg
        .register(tool("a", json!({"type": "object"})))
        .expect_err("duplicate");
    assert!(matches!(err, RegistryError::Duplicate(n) if n == "a"));
}

#[test]
fn names_that_could_pass_for_a_seen_tool_are_refused() {
    let reg = Registry::new();
    let obj = || json!({"type": "object"});
    reg.register(tool("read_file", obj())).expect("built-in");
    for confusable in ["Read_File", "read-file", "read.file", "READ_FILE"] {
        let err = reg
            .register_as(Owner::Tenant(TENANT_A), tool(confusable, obj()))
            .expect_err(confusable);
        assert!(
            matches!(&err, RegistryError::Confusable { existing, .. } if existing == "read_file"),
            "{confusable}: {err}"
        );
    }
    reg.register_as(Owner::Tenant(TENANT_A), tool("up__search1", obj()))
        .expect("a's");
    // Look-alike digits and letters, within one tenant's view.
    let err = reg
        .replace(
            Owner::Tenant(TENANT_A),
            &[],
            vec![tool("up__searchl", obj()), tool("other", obj())],
        )
        .into_iter()
        .map(|(name, r)| (name, r.is_ok()))
        .collect::<Vec<_>>();
    assert_eq!(
        err,
        [
            ("up__searchl".to_owned(), false),
            ("other".to_owned(), true)
        ]
    );
    // Another tenant sees neither, and may have its own.
    reg.register_as(Owner::Tenant(TENANT_B), tool("up__searchl", obj()))
        .expect("b's own");
}

#[test]
fn replace_swaps_a_sources_tools_and_keeps_others_names() {
    let reg = Registry::new();
    let obj = || json!({"type": "object"});
    for name in ["up__a", "up__b", "local"] {
        reg.register(tool(name, obj())).expect("register");
    }
    let results = reg.replace(
        Owner::Everyone,
        &["up__a".into(), "up__b".into()],
        vec![
            tool("up__b", obj()),
            tool("up__c", obj()),
            tool("local", obj()),
        ],
    );
    let ok: Vec<(&str, bool)> = results
        .iter()
        .map(|(n, r)| (n.as_str(), r.is_ok()))
        .collect();
    assert_eq!(ok, [("up__b", true), ("up__c", true), ("local", false)]);
    assert_eq!(names(&reg, TENANT_A), ["local", "up__b", "up__c"]);
}

#[test]
fn replacing_tools_with_the_same_declarations_is_no_change() {
    let reg = Registry::new();
    let obj = || json!({"type": "object"});
    let both = || vec![tool("up__a", obj()), tool("up__b", obj())];
    reg.replace(Owner::Everyone, &[], both());
    let listed = ["up__a".to_owned(), "up__b".to_owned()];
    let before = reg.generation(TENANT_A);
    reg.replace(Owner::Everyone, &listed, both());
    assert_eq!(reg.generation(TENANT_A), before, "the same tools again");
    reg.replace(
        Owner::Everyone,
        &listed,
        vec![
            tool("up__a", obj()),
            tool("up__b", json!({"type": "object", "required": ["x"]})),
        ],
    );
    let changed = reg.generation(TENANT_A);
    assert!(changed > before, "a changed schema");
    reg.replace(Owner::Everyone, &listed, vec![tool("up__a", obj())]);
    assert!(reg.generation(TENANT_A) > changed, "a tool gone");
    let fewer = reg.generation(TENANT_A);
    reg.touch(Owner::Everyone);
    assert!(reg.generation(TENANT_A) > fewer, "touched");
}

#[test]
fn invalid_names_and_schemas_are_refused() {
    let reg = Registry::new();
    assert!(matches!(
        reg.register(tool("bad name", json!({}))),
        Err(RegistryError::InvalidName(_))
    ));
    assert!(matches!(
        reg.register(tool("t", json!({"type": "no-such-type"}))),
        Err(RegistryError::InvalidSchema { .. })
    ));
    assert!(reg.list(TENANT_A).is_empty());
}

#[test]
fn patterns_that_backtrack_are_refused_and_the_rest_run_in_linear_time() {
    let reg = Registry::new();
    let with = |pattern: &str| json!({"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}}});
    // A backreference and a lookahead: with a backtracking engine, matching strings of
    // `a`s against the first took ~40 ms each for 25 of them, 2^n for n.
    for pattern in [r"^((a|aa)+)\1c", r"^(?=.*[A-Z])(?=.*\d).{8,}$"] {
        match reg.register(tool("t", with(pattern))) {
            Err(RegistryError::InvalidSchema { reason, .. }) => {
                assert!(reason.contains("backreferences or lookaround"), "{reason}")
            }
            other => panic!("{pattern}: {other:?}"),
        }
    }
    // A plain pattern, however nested, runs (and means what it says).
    reg.register(tool("t", with(r"^(a|aa)+c$")))
        .expect("a plain pattern");
    let t = reg.get(TENANT_A, "t").expect("registered");
    t.validate(&json!({"s": "aaaaac"})).expect("matches");
    let long = format!("{}b", "a".repeat(100_000));
    let err = t.validate(&json!({"s": long})).expect_err("does not match");
    assert_eq!(err.violations.len(), 1, "{:?}", err.violations);
    // An invalid pattern is still refused for what it is.
    match reg.register(tool("u", with("(unclosed"))) {
        Err(RegistryError::InvalidSchema { reason, .. }) => {
            assert!(!reason.contains("lookaround"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn validation_lists_every_violation_with_its_pointer() {
    let reg = Registry::new();
    let schema = json!({
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
        "required": ["path"],
        "additionalProperties": false
    });
    reg.register(tool("t", schema)).expect("register");
    let t = reg.get(TENANT_A, "t").expect("registered");
    let err = t
        .validate(&json!({"limit": 0, "extra": "s3cret-value"}))
        .expect_err("invalid");
    let pointers: Vec<&str> = err.violations.iter().map(|v| v.pointer.as_str()).collect();
    assert_eq!(err.violations.len(), 3, "{:?}", err.violations);
    assert!(pointers.contains(&"/limit"), "{pointers:?}");
    // The missing and the unexpected property are pointed at by name.
    assert!(pointers.contains(&"/path"), "{pointers:?}");
    assert!(pointers.contains(&"/extra"), "{pointers:?}");
    let text = serde_json::to_string(&err).expect("serializes");
    assert!(
        !text.contains("s3cret-value"),
        "values must not be echoed: {text}"
    );
}

#[test]
fn the_longest_timeout_spans_shared_and_tenants_tools() {
    let reg = Registry::new();
    assert_eq!(reg.longest_timeout(), crate::spec::DEFAULT_MAX_TIMEOUT);
    let timed = |name: &str, max_secs: u64| -> Arc<dyn Tool> {
        Arc::new(Named(
            ToolSpec::new(name, "test tool", json!({"type": "object"})).with_timeouts(
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(max_secs),
            ),
        ))
    };
    reg.register(timed("quick", 5)).expect("shared");
    assert_eq!(reg.longest_timeout().as_secs(), 5);
    reg.register_as(Owner::Tenant(TENANT_A), timed("up__slow", 900))
        .expect("a's tool");
    assert_eq!(reg.longest_timeout().as_secs(), 900);
}
