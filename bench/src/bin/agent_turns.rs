//! The agent benchmark: the gateway's own cost per turn, with the model's time taken out.
//!
//! A local OpenAI-format provider answers at once: a tool call (`echo`, new arguments
//! each turn) for the first turns, then a final answer. Runs go through REST as a client
//! would start them (`wait_secs`), one after another. Per run, the client's wall time
//! (request to response, the run's end committed) minus the model calls' own durations
//! (`model_message.duration_ms`, measured around each provider request), divided by its
//! turns, is the gateway's overhead per turn: history and request building, reply
//! parsing, the tool call through the executor with its durable audit row, the journal's
//! commits, and the REST start and wait. Baseline, same run: one
//! `POST /v1/tools/echo/invoke` over REST.
//!
//! Usage: `agent-turns [RUNS] [TURNS]` (default 30 runs of 10 turns); with `DATABASE_URL`
//! set, on that Postgres database (it must exist and be empty), else on embedded SQLite.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use toolgate_server::config::{Config, Overrides};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers by the number of messages: a tool call per turn until `turns`, then text.
async fn provider(
    State(turns): State<Arc<(usize, AtomicUsize)>>,
    Json(body): Json<Value>,
) -> Json<Value> {
    turns.1.fetch_add(1, Ordering::Relaxed);
    let assistant_turns = body["messages"]
        .as_array()
        .map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
    // The input says how many turns: "go N".
    let wanted = body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .and_then(|c| c.strip_prefix("go "))
        .and_then(|n| n.parse().ok())
        .unwrap_or(turns.0);
    let message = if assistant_turns + 1 < wanted {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": format!("call_{assistant_turns}"), "type": "function",
            "function": {"name": "echo", "arguments": json!({"message": format!("turn {assistant_turns}")}).to_string()}
        }]})
    } else {
        json!({"role": "assistant", "content": "done"})
    };
    Json(json!({
        "id": "chatcmpl-bench", "object": "chat.completion", "created": 0, "model": "bench",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    }))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(30);
    let turns: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(10);

    let state = Arc::new((turns, AtomicUsize::new(0)));
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(provider))
        .with_state(state.clone());
    let llm = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let llm_addr = llm.local_addr()?;
    tokio::spawn(async move { axum::serve(toolgate_server::tuned(llm), app).await });

    let data = std::env::temp_dir().join(format!(
        "toolgate-agent-bench-{}",
        uuid::Uuid::now_v7().simple()
    ));
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "DATABASE_URL")
        .collect();
    env.extend([
        ("TOOLGATE_TOOLS__DIAGNOSTICS".into(), "true".into()),
        ("TOOLGATE_LOG__FILTER".into(), "warn".into()),
        ("TOOLGATE_PROVIDERS__LLM__KIND".into(), "openai".into()),
        (
            "TOOLGATE_PROVIDERS__LLM__BASE_URL".into(),
            format!("http://{llm_addr}/v1"),
        ),
    ]);
    let overrides = Overrides {
        config_file: None,
        listen: Some("127.0.0.1:0".into()),
        data_dir: Some(data.clone()),
    };
    let config = Config::load(&overrides, env)?;
    let backend = if config.database.url.is_some() {
        "postgres"
    } else {
        "sqlite"
    };
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let key_file = config.admin_key_file();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(toolgate_server::serve(config, listener, async {
        let _ = stop_rx.await;
    }));
    let base = format!("http://{addr}");
    let mut key = String::new();
    for _ in 0..500 {
        if let Ok(k) = std::fs::read_to_string(&key_file) {
            key = k.trim().to_owned();
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse()?,
    );
    let http = reqwest::Client::builder()
        .default_headers(headers)
        .tcp_nodelay(true)
        .build()?;

    let agent: Value = http
        .post(format!("{base}/v1/agents"))
        .json(&json!({"name": "bench", "provider": "llm", "model": "bench", "tools": ["echo"], "max_turns": turns + 1, "repetition_limit": 1000}))
        .send()
        .await?
        .json()
        .await?;
    let agent_id = agent["id"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no agent: {agent}"))?
        .to_owned();

    // Baseline: the same tool over REST, sequentially.
    let mut rest = Vec::new();
    for i in 0..(runs * turns).max(200) {
        let started = Instant::now();
        let r = http
            .post(format!("{base}/v1/tools/echo/invoke"))
            .json(&json!({"arguments": {"message": format!("baseline {i}")}}))
            .send()
            .await?;
        anyhow::ensure!(
            r.status().is_success(),
            "baseline call failed: {}",
            r.status()
        );
        r.bytes().await?;
        rest.push(started.elapsed().as_secs_f64() * 1000.0);
    }

    let mut overhead = Vec::new();
    let mut model = Vec::new();
    let started_all = Instant::now();
    // Short runs (2 turns) and long ones (TURNS), interleaved: the difference is the
    // cost of the extra turns alone, without the run's fixed costs (start, end, reply).
    let mut short_totals = Vec::new();
    let mut long_totals = Vec::new();
    for _ in 0..runs {
        for n in [2, turns] {
            let started = Instant::now();
            let run: Value = http
                .post(format!("{base}/v1/agents/{agent_id}/runs"))
                .json(&json!({"input": format!("go {n}"), "wait_secs": 60}))
                .send()
                .await?
                .json()
                .await?;
            let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
            anyhow::ensure!(run["status"] == "completed", "run did not complete: {run}");
            let steps = run["steps"].as_array().cloned().unwrap_or_default();
            let model_ms: Vec<f64> = steps
                .iter()
                .filter(|s| s["type"] == "model_message")
                .filter_map(|s| s["duration_ms"].as_f64())
                .collect();
            anyhow::ensure!(
                model_ms.len() == n,
                "expected {n} turns, got {}",
                model_ms.len()
            );
            let gateway_ms = wall_ms - model_ms.iter().sum::<f64>();
            if n == turns {
                overhead.push(gateway_ms / n as f64);
                long_totals.push(gateway_ms);
            } else {
                short_totals.push(gateway_ms);
            }
            model.extend(model_ms);
        }
    }
    let elapsed = started_all.elapsed();
    for v in [
        &mut overhead,
        &mut model,
        &mut rest,
        &mut short_totals,
        &mut long_totals,
    ] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    let _ = stop_tx.send(());
    let _ = server.await;
    let _ = std::fs::remove_dir_all(&data);

    println!(
        "backend={backend} runs={runs} turns_per_run={turns} long_runs={} provider_requests={} elapsed_s={:.2}",
        overhead.len(),
        state.1.load(Ordering::Relaxed),
        elapsed.as_secs_f64()
    );
    let marginal = (percentile(&long_totals, 0.5) - percentile(&short_totals, 0.5))
        / (turns.saturating_sub(2).max(1)) as f64;
    let fixed = percentile(&short_totals, 0.5) - 2.0 * marginal;
    println!(
        "| backend | overhead per turn, all-in, p50 ms | p90 ms | p99 ms | one more turn ms | fixed per run ms | model call p50 ms | REST echo invoke p50 ms | ratio per-turn/REST invoke |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let p50 = percentile(&overhead, 0.5);
    let rest50 = percentile(&rest, 0.5);
    println!(
        "| {backend} | {:.3} | {:.3} | {:.3} | {marginal:.3} | {fixed:.3} | {:.3} | {:.3} | {:.1} |",
        p50,
        percentile(&overhead, 0.9),
        percentile(&overhead, 0.99),
        percentile(&model, 0.5),
        rest50,
        p50 / rest50
    );
    Ok(())
}
