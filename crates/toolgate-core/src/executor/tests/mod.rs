use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::json;

use super::*;
use crate::audit::AuditError;
use crate::{
    Adapter, AuthContext, Principal, PrincipalId, PrincipalKind, Registry, TenantId, Tool,
    ToolSpec, Toolset,
};

mod policy;
mod progress;

/// Records `(event name, outcome)` pairs of calls, and the names of other events.
#[derive(Default)]
struct Recorder(
    Mutex<Vec<(&'static str, Option<&'static str>)>>,
    Mutex<Vec<&'static str>>,
);

impl EventSink for Recorder {
    fn emit(&self, event: &Event<'_>) {
        let outcome = match event {
            Event::CallStarted { .. } => None,
            Event::CallFinished { outcome, .. } => Some(outcome.as_str()),
            _ => {
                self.1.lock().expect("recorder lock").push(event.name());
                return;
            }
        };
        self.0
            .lock()
            .expect("recorder lock")
            .push((event.name(), outcome));
    }
}

impl Recorder {
    fn take(&self) -> Vec<(&'static str, Option<&'static str>)> {
        std::mem::take(&mut *self.0.lock().expect("recorder lock"))
    }
}

/// Keeps every record; fails on demand.
#[derive(Default)]
struct Audit {
    records: Mutex<Vec<AuditRecord>>,
    begun: Mutex<Vec<String>>,
    fail: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl AuditSink for Audit {
    async fn record_intent(&self, record: &AuditRecord) -> Result<(), AuditError> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(AuditError::new("disk full"));
        }
        self.begun.lock().expect("lock").push(record.tool.clone());
        Ok(())
    }
    async fn record(&self, record: AuditRecord) -> Result<(), AuditError> {
        if self.fail.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(AuditError::new("disk full"));
        }
        self.records.lock().expect("lock").push(record);
        Ok(())
    }
}

impl Audit {
    fn outcomes(&self) -> Vec<(String, &'static str)> {
        self.records
            .lock()
            .expect("lock")
            .iter()
            .map(|r| (r.tool.clone(), r.outcome.as_str()))
            .collect()
    }
}

enum Behaviour {
    Echo,
    Sleep(Duration),
    Panic,
    Long(usize),
    /// Answers how many times it ran.
    Count(Arc<std::sync::atomic::AtomicUsize>),
}

struct TestTool(ToolSpec, Behaviour);

#[async_trait]
impl Tool for TestTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, _: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        match self.1 {
            Behaviour::Echo => Ok(ToolOutput::text(args.to_string())),
            Behaviour::Sleep(d) => {
                tokio::time::sleep(d).await;
                Ok(ToolOutput::text("slept"))
            }
            Behaviour::Panic => panic!("tool bug"),
            Behaviour::Long(n) => Ok(ToolOutput::text("x".repeat(n))),
            Behaviour::Count(ref runs) => {
                let n = runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                Ok(ToolOutput::text(format!("run {n}")))
            }
        }
    }
}

struct Fixture {
    executor: Executor,
    events: Arc<Recorder>,
    audit: Arc<Audit>,
    tools: ScopedToolset,
    auth: Arc<AuthContext>,
    /// How many times `counted` ran.
    runs: Arc<std::sync::atomic::AtomicUsize>,
}

fn fixture(scopes: &[&str]) -> Fixture {
    let registry = Registry::new();
    let object = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": false});
    let tools = [
        ToolSpec::new("echo", "echo", object.clone()),
        ToolSpec::new("slow", "sleeps", object.clone())
            .with_timeouts(Duration::from_secs(1), Duration::from_secs(5)),
        ToolSpec::new("boom", "panics", object.clone()),
        ToolSpec::new("long", "long output", object.clone()).with_max_output_chars(10),
        ToolSpec::new("risky", "high risk", object.clone())
            .with_risk(Risk::High, crate::Effects::default()),
        ToolSpec::new("hidden", "outside the toolset", object.clone()),
        ToolSpec::new("counted", "counts its runs", object.clone()),
        ToolSpec::new("writer", "has side effects", object)
            .with_risk(
                Risk::Medium,
                crate::Effects {
                    writes: true,
                    ..crate::Effects::default()
                },
            )
            .with_secret_fields(["/n"]),
    ];
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for spec in tools {
        let behaviour = match spec.name.as_str() {
            "counted" => Behaviour::Count(runs.clone()),
            "slow" => Behaviour::Sleep(Duration::from_secs(3)),
            "boom" => Behaviour::Panic,
            "long" => Behaviour::Long(100),
            _ => Behaviour::Echo,
        };
        registry
            .register(Arc::new(TestTool(spec, behaviour)))
            .expect("register");
    }
    let auth = Arc::new(AuthContext {
        tenant: TenantId::new(),
        tenant_name: "acme".into(),
        principal: Principal {
            id: PrincipalId::new(),
            kind: PrincipalKind::User,
            name: "tester".into(),
        },
        roles: vec![],
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        key: None,
    });
    let events = Arc::new(Recorder::default());
    let toolset = Toolset::only(
        &["echo", "slow", "boom", "long", "risky", "writer", "counted"],
        &[],
    )
    .expect("valid");
    let audit = Arc::new(Audit::default());
    Fixture {
        executor: Executor::new(events.clone(), audit.clone(), ExecutorLimits::default()),
        audit,
        tools: toolset.scope(Arc::new(registry), &auth),
        events,
        auth,
        runs,
    }
}

impl Fixture {
    fn ctx(&self) -> CallContext {
        CallContext::new(self.auth.clone(), Adapter::Rest)
    }

    async fn call(
        &self,
        ctx: CallContext,
        name: &str,
        args: Value,
    ) -> Result<Completed, ToolError> {
        self.executor.call(&self.tools, ctx, name, args).await
    }
}

const INVOKE: &[&str] = &["tools:invoke"];

fn finished(outcome: &'static str) -> Vec<(&'static str, Option<&'static str>)> {
    vec![("call.started", None), ("call.finished", Some(outcome))]
}

#[tokio::test]
async fn a_valid_call_runs_and_emits_started_and_finished() {
    let f = fixture(INVOKE);
    let done = f.call(f.ctx(), "echo", json!({"n": 1})).await.expect("ok");
    assert_eq!(done.output, ToolOutput::text(r#"{"n":1}"#));
    assert!(!done.truncated);
    assert_eq!(f.events.take(), finished("ok"));
}

#[tokio::test]
async fn tools_outside_the_toolset_are_not_found_not_forbidden() {
    let f = fixture(INVOKE);
    for name in ["hidden", "no_such_tool"] {
        let err = f
            .call(f.ctx(), name, json!({}))
            .await
            .expect_err("not callable");
        assert_eq!(err.kind, ErrorKind::NotFound, "{name}");
        assert_eq!(f.events.take(), finished("not_found"));
    }
}

#[tokio::test]
async fn invalid_arguments_list_violations_and_still_emit_events() {
    let f = fixture(INVOKE);
    let err = f
        .call(f.ctx(), "echo", json!({"n": "one", "x": 1}))
        .await
        .expect_err("invalid");
    assert_eq!(err.kind, ErrorKind::InvalidArguments);
    assert_eq!(err.violations.len(), 2, "{:?}", err.violations);
    assert_eq!(f.events.take(), finished("invalid_arguments"));
}

#[tokio::test]
async fn missing_scopes_are_forbidden() {
    let f = fixture(&[]);
    let err = f
        .call(f.ctx(), "echo", json!({}))
        .await
        .expect_err("no tools:invoke");
    assert_eq!(err.kind, ErrorKind::Forbidden);

    let f = fixture(INVOKE);
    let err = f
        .call(f.ctx(), "risky", json!({}))
        .await
        .expect_err("no tools:high_risk");
    assert_eq!(err.kind, ErrorKind::Forbidden);
    assert!(err.message.contains("tools:high_risk"), "{}", err.message);
}

#[tokio::test(start_paused = true)]
async fn a_tool_past_its_deadline_times_out() {
    let f = fixture(INVOKE);
    let err = f
        .call(f.ctx(), "slow", json!({}))
        .await
        .expect_err("slow tool");
    assert_eq!(err.kind, ErrorKind::Timeout);
    assert_eq!(
        err.details.as_ref().map(|d| d["timeout_ms"].clone()),
        Some(json!(1000))
    );
    assert_eq!(f.events.take(), finished("timeout"));
}

#[tokio::test(start_paused = true)]
async fn callers_may_extend_the_deadline_up_to_the_tools_max() {
    let f = fixture(INVOKE);
    let ctx = f.ctx().with_timeout(Some(Duration::from_secs(4)));
    let done = f
        .call(ctx, "slow", json!({}))
        .await
        .expect("4 s allowed, tool takes 3 s");
    assert_eq!(done.output, ToolOutput::text("slept"));
    let ctx = f.ctx().with_timeout(Some(Duration::from_millis(10)));
    let err = f
        .call(ctx, "slow", json!({}))
        .await
        .expect_err("caller asked for less");
    assert_eq!(err.details.expect("details")["timeout_ms"], 10);
}

#[tokio::test]
async fn a_panicking_tool_is_an_internal_error_and_the_executor_keeps_working() {
    let f = fixture(INVOKE);
    let err = f
        .call(f.ctx(), "boom", json!({}))
        .await
        .expect_err("panics");
    assert_eq!(err.kind, ErrorKind::Internal);
    assert_eq!(err.message, "internal error", "the cause is not shown");
    assert!(err.cause.as_deref().is_some_and(|c| c.contains("tool bug")));
    assert_eq!(f.events.take(), finished("internal"));
    f.call(f.ctx(), "echo", json!({}))
        .await
        .expect("still serving");
}

#[tokio::test]
async fn oversized_output_is_truncated_with_a_marker() {
    let f = fixture(INVOKE);
    let done = f.call(f.ctx(), "long", json!({})).await.expect("ok");
    assert!(done.truncated);
    let crate::Content::Text { text } = &done.output.content[0] else {
        panic!("text")
    };
    assert!(
        text.starts_with("xxxxxxxxxx\n\n[output truncated: showing 10 of 100"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn cancelling_the_token_cancels_the_call() {
    let f = fixture(INVOKE);
    let ctx = f.ctx();
    let cancel = ctx.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let err = f.call(ctx, "slow", json!({})).await.expect_err("cancelled");
    assert_eq!(err.kind, ErrorKind::Cancelled);
    assert_eq!(f.events.take(), finished("cancelled"));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_caller_cancels_the_call_and_it_is_still_recorded() {
    let f = Arc::new(fixture(INVOKE));
    let ctx = f.ctx();
    let cancel = ctx.cancel.clone();
    let caller = {
        let f = f.clone();
        tokio::spawn(async move { f.call(ctx, "slow", json!({})).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    caller.abort();
    let _ = caller.await;
    cancel.cancelled().await;
    // Let the call's own task observe the cancellation and record it.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert_eq!(f.events.take(), finished("cancelled"));
}

#[tokio::test(start_paused = true)]
async fn every_call_leaves_exactly_one_audit_record_whatever_its_outcome() {
    let f = fixture(INVOKE);
    let _ = f.call(f.ctx(), "echo", json!({"n": 1})).await;
    let _ = f
        .call(f.ctx(), "no_such_tool", json!({"secret": "x"}))
        .await;
    let _ = f.call(f.ctx(), "echo", json!({"n": "bad"})).await;
    let _ = f.call(f.ctx(), "risky", json!({})).await;
    let _ = f.call(f.ctx(), "slow", json!({})).await;
    let _ = f.call(f.ctx(), "boom", json!({})).await;
    assert_eq!(
        f.audit.outcomes(),
        [
            ("echo".to_string(), "ok"),
            ("no_such_tool".to_string(), "not_found"),
            ("echo".to_string(), "invalid_arguments"),
            ("risky".to_string(), "forbidden"),
            ("slow".to_string(), "timeout"),
            ("boom".to_string(), "internal"),
        ]
    );
    let records = f.audit.records.lock().expect("lock");
    assert_eq!(
        records[1].arguments,
        json!({"secret": "***"}),
        "unknown tools keep their arguments, masked by name"
    );
    assert_eq!(
        records[2].arguments,
        json!({"n": "bad"}),
        "invalid calls keep what was sent"
    );
    assert_eq!(records[0].arguments, json!({"n": 1}));
    assert!(
        records
            .iter()
            .all(|r| r.tenant == f.auth.tenant && r.adapter == Adapter::Rest)
    );
}

#[tokio::test]
async fn side_effect_tools_get_a_durable_intent_first_and_secrets_are_masked() {
    let f = fixture(INVOKE);
    f.call(f.ctx(), "writer", json!({"n": 42}))
        .await
        .expect("ok");
    assert_eq!(*f.audit.begun.lock().expect("lock"), ["writer"]);
    let records = f.audit.records.lock().expect("lock");
    assert_eq!(records[0].arguments, json!({"n": "***"}));
    assert_eq!(
        records[0].arguments_hash,
        crate::audit::hash_json(&json!({"n": 42}))
    );
}

#[tokio::test]
async fn when_the_audit_log_fails_the_call_fails_closed() {
    let f = fixture(INVOKE);
    f.audit
        .fail
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = f
        .call(f.ctx(), "echo", json!({}))
        .await
        .expect_err("result withheld");
    assert_eq!(err.kind, ErrorKind::Internal);
    assert!(err.message.contains("audit"), "{}", err.message);
    let err = f
        .call(f.ctx(), "writer", json!({}))
        .await
        .expect_err("not run");
    assert!(err.message.contains("not run"), "{}", err.message);
    assert!(f.audit.begun.lock().expect("lock").is_empty());
}
