//! What operators watch, as users deploy it: the alerting rules (`deploy/alerts.yml`, and
//! the same groups in `deploy/kubernetes/monitoring/prometheusrule.yaml`) and the Grafana
//! dashboard (`deploy/grafana/toolgate.json`). Prometheus's own `promtool` checks the
//! rules, runs their unit tests (`deploy/alerts.test.yml`) and parses the dashboard's
//! queries. Then a real Prometheus scrapes a gateway that served REST, MCP and an agent's
//! run: the target is up, every rule evaluates, the alert on the upstream it cannot reach
//! is raised, and every dashboard query finds series. And every metric and label the
//! rules and queries select or group by is one the gateway exports: a rule or panel on a
//! misspelt name would stay silent or empty, and the unit tests, written against the same
//! names, would not notice.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde_json::json;
use toolgate_e2e::llm::{MockLlm, Reply, Wire, says};
use toolgate_e2e::{Gateway, client_with_key, free_port, sdk_clients};

use crate::rate_limits::{metrics, samples};

/// Series Prometheus makes itself, not the gateway.
const PROMETHEUS_OWN: &[&str] = &["up"];

/// Labels Prometheus gives every series it scrapes, from the target.
const TARGET_LABELS: &[&str] = &["instance", "job"];

/// PromQL's aggregations (which take their grouping before their parentheses) and
/// binary keywords: never metric names.
const KEYWORDS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
];

#[tokio::test]
async fn alert_rules_and_the_dashboard_work_on_prometheus_scraping_a_gateway() {
    sdk_clients(); // installs promtool (Debian's `prometheus`)
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root");
    promtool(root, &["check", "rules", "deploy/alerts.yml"]);
    promtool(root, &["test", "rules", "deploy/alerts.test.yml"]);

    // The dashboard's queries, Grafana's variables given values, parsed by promtool as
    // recording rules.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("deploy/grafana/toolgate.json")).expect("dashboard"),
    )
    .expect("the dashboard is JSON");
    let queries: Vec<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter_map(|p| p["targets"].as_array())
        .flatten()
        .map(|t| t["expr"].as_str().expect("a query").to_owned())
        .collect();
    assert!(queries.len() > 10, "{queries:?}");
    let scratch = tempfile::tempdir().expect("temp dir");
    let recorded: Vec<_> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let q = q
                .replace("$__rate_interval", "5m")
                .replace("$instance", ".*");
            json!({"record": format!("dashboard:query_{i}"), "expr": q})
        })
        .collect();
    let file = scratch.path().join("dashboard.rules.json");
    let groups = json!({"groups": [{"name": "dashboard", "rules": recorded}]});
    std::fs::write(&file, groups.to_string()).expect("write");
    promtool(root, &["check", "rules", file.to_str().expect("utf-8")]);

    // A gateway with what makes each selected series exist: REST and MCP calls, an
    // agent's run on a model, a refused read, an operator upstream it cannot reach.
    let mock = MockLlm::start(Wire::Openai, vec![Reply::ok(says::openai_text("ok"))]).await;
    let base = mock.base.clone();
    let scrape_port = free_port();
    let gw = Gateway::start_with(move |c| {
        c.telemetry.metrics_listen = Some(([127, 0, 0, 1], scrape_port).into());
        c.limits.principal_reads_per_minute = Some(1);
        c.providers
            .insert("llm".into(), crate::agents::provider(Wire::Openai, &base));
        c.upstreams = vec![
            serde_json::from_value(json!({"name": "gone", "url": "http://127.0.0.1:9/mcp"}))
                .expect("an upstream entry"),
        ];
    })
    .await;
    // A real Prometheus scraping it every second and evaluating the rules as often.
    let prometheus = Prometheus::start(root, scrape_port, scratch.path()).await;
    let (_, key) = gw.create_key("reader", &["tools:invoke"]).await;
    let reader = client_with_key(&key);
    for _ in 0..2 {
        reader
            .get(gw.url("/v1/tools"))
            .send()
            .await
            .expect("request");
    }
    let (status, _, body) = gw
        .invoke("echo", json!({"arguments": {"message": "watched"}}))
        .await;
    assert_eq!(status, 200, "{body}");
    let mcp = gw.mcp_2026(&gw.admin_key).await;
    mcp.call_tool(
        rmcp::model::CallToolRequestParams::new("echo").with_arguments(
            json!({"message": "watched"})
                .as_object()
                .cloned()
                .expect("object"),
        ),
    )
    .await
    .expect("an MCP call");
    mcp.cancel().await.expect("close");
    let agent = crate::agents::create_agent(
        &gw,
        json!({"name": "watched", "provider": "llm", "model": "m", "tools": ["echo"]}),
    )
    .await;
    let runs = format!("/v1/agents/{agent}/runs");
    let (status, _, run) = gw
        .post(&runs, json!({"input": "hi", "wait_secs": 30}))
        .await;
    assert_eq!(
        (status, run["status"].as_str()),
        (201, Some("completed")),
        "{run}"
    );

    // The run is counted as it ends (just after its answer is written); the gauge of
    // runs still going shows both of its statuses, at 0 now.
    let series = |exposition: &str, name: &str, status: &str, value: &str| {
        exposition.lines().any(|l| {
            l.starts_with(&format!("{name}{{"))
                && l.contains(&format!("toolgate_run_status=\"{status}\""))
                && l.ends_with(&format!(" {value}"))
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let exposition = loop {
        let exposition = metrics(&gw).await;
        if series(
            &exposition,
            "toolgate_runs_finished_total",
            "completed",
            "1",
        ) || std::time::Instant::now() > deadline
        {
            break exposition;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(
        series(
            &exposition,
            "toolgate_runs_finished_total",
            "completed",
            "1"
        ),
        "{exposition}"
    );
    for status in ["running", "awaiting_approval"] {
        assert!(
            series(&exposition, "toolgate_runs", status, "0"),
            "{exposition}"
        );
    }
    // SQLite's write turns: the calls' audit batches (and the run's steps) took theirs,
    // and none is waiting now.
    let value = |name: &str| {
        samples(&exposition)
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, v)| v)
    };
    assert!(
        value("toolgate_store_write_turns_total").is_some_and(|v| v > 0.0),
        "{exposition}"
    );
    assert_eq!(value("toolgate_store_write_turns_waiting"), Some(0.0));
    assert!(value("toolgate_store_write_turns_wait_seconds_total").is_some_and(|v| v >= 0.0));
    // The alerts' expressions as Prometheus loaded them from deploy/alerts.yml.
    let alerting = prometheus.saw(&queries).await;
    assert_eq!(alerting.len(), ALERTS, "{alerting:?}");
    let expressions: Vec<Selected> = alerting
        .iter()
        .chain(&queries)
        .map(|e| selectors(e))
        .collect();
    let selected: Vec<_> = expressions.iter().flat_map(|e| e.metrics.clone()).collect();
    // The reading finds every alert's metrics: with matchers, bare, inside functions.
    let names: BTreeSet<&str> = selected.iter().map(|(n, _)| n.as_str()).collect();
    for name in [
        "up",
        "toolgate_audit_commit_duration_seconds_count",
        "toolgate_audit_commit_duration_seconds_bucket",
        "toolgate_admission_rejections_total",
        "toolgate_store_tenant_operations_refused_total",
        "toolgate_http_connections_closed_at_cap_total",
        "toolgate_tool_calls_total",
        "toolgate_upstream_connected",
        "gen_ai_client_token_usage_sum",
    ] {
        assert!(names.contains(name), "{name} not read: {names:?}");
    }

    let operations =
        std::fs::read_to_string(root.join("docs/OPERATIONS.md")).expect("OPERATIONS.md");
    let mut exported: HashMap<String, BTreeSet<String>> = HashMap::new();
    for (name, labels, _) in samples(&exposition) {
        exported.entry(name).or_default().extend(labels.into_keys());
    }
    // The labels `name` may be selected or grouped by: those it carries here, those
    // Prometheus adds, a histogram's `le`, and, for a label only some outcomes carry
    // (`error_type` on a failed commit) and so perhaps not on the series this run made,
    // those docs/OPERATIONS.md gives the metric.
    let may_use = |name: &str| -> BTreeSet<String> {
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        let mut labels = documented_labels(&operations, family);
        labels.extend(exported.get(name).into_iter().flatten().cloned());
        labels.extend(TARGET_LABELS.iter().map(|l| (*l).to_owned()));
        if name.ends_with("_bucket") {
            labels.insert("le".into());
        }
        labels
    };
    for expression in &expressions {
        for label in &expression.grouped_by {
            assert!(
                expression
                    .metrics
                    .iter()
                    .any(|(m, _)| may_use(m).contains(label)),
                "grouped by {label}, which none of {:?} carries",
                expression.metrics
            );
        }
    }
    for (name, labels) in &selected {
        if PROMETHEUS_OWN.contains(&name.as_str()) {
            continue;
        }
        if !exported.contains_key(name) {
            panic!("{name} is selected, but the gateway does not export it:\n{exposition}");
        }
        let documented = may_use(name);
        for label in labels {
            assert!(
                documented.contains(label),
                "{name} is selected by {label}, a label it neither carries here nor \
                 is documented with ({documented:?})"
            );
        }
    }
    gw.stop().await;
}

/// How many alerts `deploy/alerts.yml` defines.
const ALERTS: usize = 9;

/// Debian's Prometheus (the package that brings promtool), on loopback, scraping one
/// gateway's metrics listener as job `toolgate` and evaluating `deploy/alerts.yml`.
struct Prometheus {
    _child: tokio::process::Child,
    base: String,
    http: reqwest::Client,
}

impl Prometheus {
    async fn start(root: &Path, scrape_port: u16, scratch: &Path) -> Prometheus {
        let config = scratch.join("prometheus.yml");
        let rules = root.join("deploy/alerts.yml");
        let text = json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [rules],
            "scrape_configs": [{
                "job_name": "toolgate",
                "static_configs": [{"targets": [format!("127.0.0.1:{scrape_port}")]}],
            }],
        });
        std::fs::write(&config, text.to_string()).expect("write prometheus.yml");
        let port = free_port();
        let child = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                scratch.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start prometheus");
        let prometheus = Prometheus {
            _child: child,
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        };
        until("prometheus ready", || async {
            let ready = format!("{}/-/ready", prometheus.base);
            let answer = prometheus.http.get(ready).send().await;
            answer.is_ok_and(|r| r.status() == 200)
        })
        .await;
        prometheus
    }

    async fn api(&self, path: &str, query: &[(&str, &str)]) -> serde_json::Value {
        let mut url = reqwest::Url::parse(&format!("{}/api/v1/{path}", self.base)).expect("URL");
        url.query_pairs_mut().extend_pairs(query);
        let body: serde_json::Value = self
            .http
            .get(url)
            .send()
            .await
            .expect("prometheus answers")
            .json()
            .await
            .expect("JSON");
        assert_eq!(body["status"], "success", "{path} {query:?}: {body}");
        body["data"].clone()
    }

    /// What Prometheus made of the gateway: its target up, every rule evaluated without
    /// error, the unreachable upstream's alert raised (pending: it waits 5 minutes to
    /// fire), and every dashboard query answered with series but the failed-commit one
    /// (no commit failed). Returns the rules' expressions as it loaded them.
    async fn saw(&self, queries: &[String]) -> Vec<String> {
        until("prometheus scraping the runs gauge", || async {
            let found = self.api("query", &[("query", "toolgate_runs")]).await;
            !found["result"].as_array().expect("result").is_empty()
        })
        .await;
        let targets = self.api("targets", &[]).await;
        assert_eq!(targets["activeTargets"][0]["health"], "up", "{targets}");
        let rules = || async {
            let rules = self.api("rules", &[]).await;
            rules["groups"][0]["rules"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        };
        until("prometheus evaluating every rule", || async {
            let rules = rules().await;
            rules.len() == ALERTS && rules.iter().all(|r| r["health"] == "ok")
        })
        .await;
        until(
            "prometheus alerting on the unreachable upstream",
            || async {
                let alerts = self.api("alerts", &[]).await;
                alerts["alerts"]
                    .as_array()
                    .expect("alerts")
                    .iter()
                    .any(|a| {
                        a["labels"]["alertname"] == "ToolgateUpstreamDisconnected"
                            && a["labels"]["toolgate_upstream"] == "gone"
                            && a["labels"]["job"] == "toolgate"
                    })
            },
        )
        .await;
        for query in queries {
            if query.contains("error_type=\"store\"") {
                continue; // no commit failed: no such series
            }
            let concrete = query
                .replace("$__rate_interval", "1m")
                .replace("$instance", ".*");
            // A rate needs two scrapes of its counter.
            until(
                &format!("the dashboard's {concrete} finding series"),
                || async {
                    let data = self.api("query", &[("query", &concrete)]).await;
                    !data["result"].as_array().expect("result").is_empty()
                },
            )
            .await;
        }
        rules()
            .await
            .iter()
            .map(|r| r["query"].as_str().expect("a rule's query").to_owned())
            .collect()
    }
}

/// Waits up to 30 s for `done`.
async fn until<Fut: std::future::Future<Output = bool>>(what: &str, done: impl Fn() -> Fut) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "{what}: not in 30 s");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// Runs promtool with `args` in `root`; panics with its output when it fails.
fn promtool(root: &Path, args: &[&str]) {
    let out = std::process::Command::new("promtool")
        .args(args)
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The attributes docs/OPERATIONS.md's metrics table gives `family`: the backticked
/// words of its row's attributes column.
fn documented_labels(operations: &str, family: &str) -> BTreeSet<String> {
    let row = format!("| `{family}` |");
    let Some(line) = operations.lines().find(|l| l.starts_with(&row)) else {
        return BTreeSet::new();
    };
    let attributes = line.split(" | ").nth(2).unwrap_or_default();
    attributes
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Each metric a PromQL expression selects (`name` or `name{label="…", …}`), with the
/// labels its matchers name, and the labels it groups by. A small reading of PromQL,
/// enough for these expressions: quoted values, function calls and keywords are passed
/// over.
fn selectors(expr: &str) -> Selected {
    let mut out = Selected::default();
    let mut rest = expr;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let end = rest[1..].find('"').expect("closing quote");
            rest = &rest[end + 2..];
            continue;
        }
        if !c.is_ascii_alphabetic() {
            // Numbers and durations (`0.25`, `5m`) go whole, with their unit; a Grafana
            // variable (`$__rate_interval`) too.
            let skip = if c.is_ascii_digit() || c == '$' {
                1 + rest[1..]
                    .find(|c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '_')
                    .unwrap_or(rest.len() - 1)
            } else {
                c.len_utf8()
            };
            rest = &rest[skip..];
            continue;
        }
        let end = rest
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        let word = &rest[..end];
        rest = rest[end..].trim_start();
        if matches!(word, "by" | "without" | "on" | "ignoring") {
            let close = rest.find(')').expect("grouping closes");
            let names = rest[..close].trim_start_matches('(').split(',');
            out.grouped_by.extend(names.map(|l| l.trim().to_owned()));
            rest = &rest[close + 1..];
            continue;
        }
        if rest.starts_with('(') || KEYWORDS.contains(&word) {
            continue; // a function, an aggregation (`sum by (…) (…)`) or a keyword
        }
        let mut labels = BTreeSet::new();
        if let Some(matchers) = rest.strip_prefix('{') {
            let close = matchers.find('}').expect("matchers close");
            for matcher in matchers[..close].split(',') {
                let label = matcher.split(['=', '!']).next().expect("a label");
                labels.insert(label.trim().to_owned());
            }
            rest = &matchers[close + 1..];
        }
        out.metrics.push((word.to_owned(), labels));
    }
    out
}

/// What one expression selects: metrics with their matchers' labels, and the labels it
/// groups by.
#[derive(Default)]
struct Selected {
    metrics: Vec<(String, BTreeSet<String>)>,
    grouped_by: BTreeSet<String>,
}
