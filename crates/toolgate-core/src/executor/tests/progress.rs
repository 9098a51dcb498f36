//! Deadlines extended by progress, and cached results.

use super::*;

/// Reports progress every 100 ms and finishes after `self.1`.
struct Reporter(ToolSpec, Duration);

#[async_trait]
impl Tool for Reporter {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    async fn call(&self, ctx: &CallContext, _: Value) -> Result<ToolOutput, ToolError> {
        let end = tokio::time::Instant::now() + self.1;
        let mut ticks = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(end) => return Ok(ToolOutput::text("done")),
                _ = ticks.tick() => ctx.report_progress(1.0, None, None),
            }
        }
    }
}

/// A tool whose spec lets progress extend its deadline outlives its base deadline while
/// it reports, and is cut at its maximum (or at a deadline the caller asked for); the
/// caller still hears every report. Without the extension, the base deadline holds.
#[tokio::test(start_paused = true)]
async fn progress_extends_a_deadline_up_to_the_maximum() {
    let registry = Registry::new();
    let spec = |name: &str, extension: Option<Duration>| {
        ToolSpec::new(name, "reports progress", json!({"type": "object"}))
            .with_timeouts(Duration::from_millis(300), Duration::from_secs(2))
            .with_progress_extension(extension)
    };
    for (name, extension, runs) in [
        ("long_reporter", Some(Duration::from_millis(300)), 1500),
        ("endless_reporter", Some(Duration::from_millis(300)), 60_000),
        ("plain_reporter", None, 1500),
    ] {
        registry
            .register(Arc::new(Reporter(
                spec(name, extension),
                Duration::from_millis(runs),
            )))
            .expect("register");
    }
    let f = fixture(INVOKE);
    let tools = Toolset::all().scope(Arc::new(registry), &f.auth);
    let call = |name: &'static str, ctx: CallContext| {
        let executor = f.executor.clone();
        let tools = tools.clone();
        async move {
            let started = tokio::time::Instant::now();
            let result = executor.call(&tools, ctx, name, json!({})).await;
            (result, started.elapsed())
        }
    };

    let (heard, mut reports) = tokio::sync::mpsc::channel(64);
    let (done, took) = call("long_reporter", f.ctx().with_progress(heard)).await;
    assert!(done.is_ok(), "outlived its 300 ms: {done:?}");
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    let mut passed_on = 0;
    while reports.try_recv().is_ok() {
        passed_on += 1;
    }
    assert!(passed_on >= 14, "the caller heard the reports: {passed_on}");

    let (cut, took) = call("endless_reporter", f.ctx()).await;
    assert_eq!(cut.expect_err("cut").kind, ErrorKind::Timeout);
    assert_eq!(took, Duration::from_secs(2), "cut at its maximum");

    let mut asked = f.ctx();
    asked.requested_timeout = Some(Duration::from_secs(1));
    let (cut, took) = call("endless_reporter", asked).await;
    assert_eq!(cut.expect_err("cut").kind, ErrorKind::Timeout);
    assert_eq!(took, Duration::from_secs(1), "cut where the caller asked");

    let (plain, took) = call("plain_reporter", f.ctx()).await;
    assert_eq!(plain.expect_err("cut").kind, ErrorKind::Timeout);
    assert_eq!(
        took,
        Duration::from_millis(300),
        "no extension: the base deadline"
    );
}

#[tokio::test]
async fn a_cached_result_skips_only_the_run_and_is_recorded_as_a_hit() {
    let f = fixture(INVOKE);
    let cache = crate::cache::ResultCache::new(crate::cache::CacheConfig {
        tools: [("counted", 60), ("writer", 60)]
            .into_iter()
            .map(|(t, s)| (t.to_owned(), s))
            .collect(),
        ..Default::default()
    });
    let executor = f.executor.clone().with_cache(cache);
    let call = |ctx: CallContext, name: &'static str, args: Value| {
        let (executor, tools) = (executor.clone(), f.tools.clone());
        async move { executor.call(&tools, ctx, name, args).await }
    };
    let first = call(f.ctx(), "counted", json!({"n": 1})).await.expect("ok");
    let second = call(f.ctx(), "counted", json!({"n": 1})).await.expect("ok");
    assert_eq!(second.output, first.output);
    assert_eq!(f.runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        (first.cache, second.cache),
        (Some(CacheStatus::Miss), Some(CacheStatus::Hit))
    );
    // Other arguments, and a caller asking for a fresh result, run the tool.
    call(f.ctx(), "counted", json!({"n": 2})).await.expect("ok");
    let fresh = call(
        f.ctx().with_cache(CacheMode::Refresh),
        "counted",
        json!({"n": 1}),
    )
    .await
    .expect("ok");
    assert_eq!(fresh.output, ToolOutput::text("run 3"));
    assert_eq!(fresh.cache, Some(CacheStatus::Bypass));
    let kept = call(f.ctx(), "counted", json!({"n": 1})).await.expect("ok");
    assert_eq!(
        kept.output,
        ToolOutput::text("run 3"),
        "the fresh result was kept"
    );
    // A hit is still authorized and validated.
    let no_scopes = Arc::new(AuthContext {
        scopes: vec![],
        ..(*f.auth).clone()
    });
    let err = call(
        CallContext::new(no_scopes, Adapter::Rest),
        "counted",
        json!({"n": 1}),
    )
    .await
    .expect_err("forbidden though cached");
    assert_eq!(err.kind, ErrorKind::Forbidden);
    // A tool with side effects is never cached, whatever the configuration.
    call(f.ctx(), "writer", json!({"n": 1})).await.expect("ok");
    let writes = call(f.ctx(), "writer", json!({"n": 1})).await.expect("ok");
    assert_eq!(writes.cache, None);
    let caches: Vec<_> = f
        .audit
        .records
        .lock()
        .expect("lock")
        .iter()
        .map(|r| (r.tool.clone(), r.cache))
        .collect();
    use CacheStatus::{Bypass, Hit, Miss};
    let counted = |c| ("counted".to_owned(), c);
    assert_eq!(
        caches,
        [
            counted(Some(Miss)),
            counted(Some(Hit)),
            counted(Some(Miss)),
            counted(Some(Bypass)),
            counted(Some(Hit)),
            counted(None),
            ("writer".to_owned(), None),
            ("writer".to_owned(), None),
        ]
    );
}
