//! The alerting rules users deploy (`deploy/alerts.yml`, and the same groups in
//! `deploy/kubernetes/prometheusrule.yaml`): Prometheus's own `promtool` checks them and
//! runs their unit tests (`deploy/alerts.test.yml`), and every metric and label they select
//! on is one a running gateway exports: a rule on a misspelt name would never fire, and
//! the unit tests, written against the same names, would not notice.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde_json::json;
use toolgate_e2e::{Gateway, client_with_key, sdk_clients};

use crate::rate_limits::{metrics, samples};

/// Series Prometheus makes itself, not the gateway.
const PROMETHEUS_OWN: &[&str] = &["up"];

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
async fn alert_rules_pass_promtool_and_select_what_the_gateway_exports() {
    sdk_clients(); // installs promtool (Debian's `prometheus`)
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repository root");
    for args in [
        ["check", "rules", "deploy/alerts.yml"],
        ["test", "rules", "deploy/alerts.test.yml"],
    ] {
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
    let rules = std::fs::read_to_string(root.join("deploy/alerts.yml")).expect("alerts.yml");
    let selected = selectors(&rules);
    // The reading finds every rule's metrics: with matchers, bare, and inside functions.
    let names: BTreeSet<&str> = selected.iter().map(|(n, _)| n.as_str()).collect();
    for name in [
        "up",
        "toolgate_audit_commit_duration_seconds_count",
        "toolgate_audit_commit_duration_seconds_bucket",
        "toolgate_admission_rejections_total",
        "toolgate_store_tenant_operations_refused_total",
        "toolgate_tool_calls_total",
        "toolgate_upstream_connected",
    ] {
        assert!(
            names.contains(name),
            "{name} not read from the rules: {names:?}"
        );
    }

    // A gateway with what makes each selected series exist: a call, a refused read, an
    // operator upstream it cannot reach.
    let gw = Gateway::start_with(|c| {
        c.limits.principal_reads_per_minute = Some(1);
        c.upstreams = vec![
            serde_json::from_value(json!({"name": "gone", "url": "http://127.0.0.1:9/mcp"}))
                .expect("an upstream entry"),
        ];
    })
    .await;
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
    let exposition = metrics(&gw).await;
    let operations =
        std::fs::read_to_string(root.join("docs/OPERATIONS.md")).expect("OPERATIONS.md");
    let mut exported: HashMap<String, BTreeSet<String>> = HashMap::new();
    for (name, labels, _) in samples(&exposition) {
        exported.entry(name).or_default().extend(labels.into_keys());
    }
    for (name, labels) in &selected {
        if PROMETHEUS_OWN.contains(&name.as_str()) {
            continue;
        }
        let Some(has) = exported.get(name) else {
            panic!("the rules select {name}, which the gateway does not export:\n{exposition}");
        };
        // A label only some outcomes carry (`error_type` on a failed commit) need not be
        // on the series this run made; it must then be one docs/OPERATIONS.md gives the
        // metric.
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        let documented = documented_labels(&operations, family);
        for label in labels {
            assert!(
                has.contains(label) || documented.contains(label),
                "the rules select {name} by {label}, a label it neither carries here \
                 ({has:?}) nor is documented with ({documented:?})"
            );
        }
    }
    gw.stop().await;
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

/// Each metric the rules' expressions select (`name` or `name{label="…", …}`), with the
/// labels its matchers name. A small reading of PromQL, enough for these rules: quoted
/// values, `by (…)` groupings, function calls and keywords are passed over.
fn selectors(rules: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut out = Vec::new();
    // The indentation of a block scalar's `expr: >` while its lines are read.
    let mut block: Option<usize> = None;
    for line in rules.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let expr = if let Some(e) = trimmed.strip_prefix("expr:") {
            block = matches!(e.trim(), ">" | "|").then_some(indent);
            e
        } else if block.is_some_and(|b| indent > b) {
            trimmed
        } else {
            block = None;
            continue;
        };
        let mut rest = expr;
        while let Some(c) = rest.chars().next() {
            if c == '"' {
                let end = rest[1..].find('"').expect("closing quote");
                rest = &rest[end + 2..];
                continue;
            }
            if !c.is_ascii_alphabetic() {
                // Numbers and durations (`0.25`, `5m`) go whole, with their unit.
                let skip = if c.is_ascii_digit() {
                    rest.find(|c: char| !c.is_ascii_alphanumeric() && c != '.')
                        .unwrap_or(rest.len())
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
            out.push((word.to_owned(), labels));
        }
    }
    out
}
