//! The MCP retention sweep beside the durable audit, on SQLite: how long calls wait for
//! their audit row while the sweep deletes expired SSE events and sessions.
//!
//! Usage: `cargo run --release -p toolgate-store --example mcp_sweep -- [EVENTS]
//! [CONCURRENCY]` (bench/mcp_sweep.sh runs it). EVENTS (60,000 by default: a minute of
//! session-mode calls at 1,000 a second, what each minute's sweep deletes then) expired
//! SSE events and EVENTS / 10 sessions unused past their retention are written straight
//! into a fresh store, beside as many events and sessions still kept. CONCURRENCY tasks
//! (16 by default) then hand the benchmarks' echo record to the [`AuditWriter`] and wait
//! for its commit, over and over: for 3 s alone (the baseline), while 300 SSE events are
//! inserted one after another (what a session-mode call writes beside its audit row),
//! then while the gateway's sweep (`prune_mcp_events`, then `prune_mcp_sessions`) runs. SQLite's write lock is
//! the whole database's, so a commit waits for whatever delete holds it. Prints each
//! phase's commit wait (p50, p99, max), the sweeps' durations and rows, and the ratio of
//! the sweep's worst wait to the baseline's, and the inserts' own waits.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use support::record;
use toolgate_core::PrincipalId;
use toolgate_core::audit::AuditSink;
use toolgate_core::stores::SessionStore;
use toolgate_store::{AuditWriter, Store};

mod support;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An SSE event as a session-mode `tools/call` stores it.
const MESSAGE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello, toolgate"}],"isError":false}}"#;

/// Writes `events` expired events, `events / 10` expired sessions, and as many kept,
/// straight into the store's file.
fn fill(db: &std::path::Path, tenant: &str, events: usize) -> anyhow::Result<()> {
    let mut conn = rusqlite::Connection::open(db)?;
    let tx = conn.transaction()?;
    let stamp =
        |ago: chrono::Duration| (Utc::now() - ago).to_rfc3339_opts(SecondsFormat::Micros, false);
    let (old, fresh) = (chrono::Duration::hours(30), chrono::Duration::minutes(5));
    let sessions = (events / 10).max(1);
    {
        let mut session = tx.prepare(
            "insert into mcp_session (session_id, tenant_id, principal_id, initialize_params, created_at, last_used_at) \
             values (?1, ?2, ?3, '{}', ?4, ?4)",
        )?;
        let mut event = tx.prepare(
            "insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms, created_at) \
             values (?1, ?2, ?3, ?4, null, ?5)",
        )?;
        for (age, tag) in [(old, "old"), (fresh, "kept")] {
            let at = stamp(age);
            for s in 0..sessions {
                let id = format!("{tag}-{s}");
                session.execute(rusqlite::params![
                    id,
                    tenant,
                    uuid::Uuid::new_v4().to_string(),
                    at
                ])?;
            }
            for e in 0..events {
                let id = format!("{tag}-{}", e % sessions);
                event.execute(rusqlite::params![
                    tenant,
                    id,
                    format!("{}", e % 7),
                    MESSAGE,
                    at
                ])?;
            }
        }
    }
    tx.commit()?;
    Ok(())
}

/// p50, p99 and max of `waits`, in ms.
fn spread(waits: &mut [Duration]) -> (f64, f64, f64) {
    if waits.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    waits.sort_unstable();
    let at = |q: f64| waits[((waits.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    (at(0.5), at(0.99), at(1.0))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let events: usize = args.next().map_or(Ok(60_000), |a| a.parse())?;
    let concurrency: usize = args.next().map_or(Ok(16), |a| a.parse())?;
    let dir = std::env::temp_dir().join(format!("toolgate-mcp-sweep-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let store = Store::open(None, &dir).await?;
    store.migrate().await?;
    let tenant = store.create_tenant("bench").await?.id;
    let principal = PrincipalId::new();
    fill(&dir.join("toolgate.db"), &tenant.to_string(), events)?;

    let (writer, task) = AuditWriter::spawn(store.clone())?;
    let waits: Arc<Mutex<Vec<(Instant, Duration)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut callers = Vec::new();
    for _ in 0..concurrency {
        let (writer, waits, stop) = (writer.clone(), waits.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                writer.record(record(tenant, principal)).await?;
                waits
                    .lock()
                    .expect("waits")
                    .push((started, started.elapsed()));
            }
            anyhow::Ok(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let alone = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    // What a session-mode call writes beside the audit: one event, 300 times in a row.
    let mut inserts = Vec::new();
    for _ in 0..300 {
        let started = Instant::now();
        store
            .append_mcp_event(tenant, "kept-0", "0", Some(MESSAGE), None)
            .await?;
        inserts.push(started.elapsed());
    }
    let events_started = Instant::now();
    let gone_events = store
        .prune_mcp_events(Utc::now() - chrono::Duration::hours(1))
        .await?;
    let sessions_started = Instant::now();
    let gone_sessions = store
        .prune_mcp_sessions(Utc::now() - chrono::Duration::hours(24))
        .await?;
    let ended = Instant::now();
    // The commits the last delete held up finish after it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for caller in callers {
        caller.await??;
    }
    drop(writer);
    task.join().await;
    let _ = std::fs::remove_dir_all(&dir);
    let waits = std::mem::take(&mut *waits.lock().expect("waits"));
    // A phase's commits: those waiting at some moment of it.
    let during = |from: Instant, to: Instant| -> Vec<Duration> {
        waits
            .iter()
            .filter(|(start, wait)| *start < to && *start + *wait > from)
            .map(|(_, wait)| *wait)
            .collect()
    };
    let mut alone = during(alone, alone + Duration::from_secs(3));
    let mut beside_events = during(events_started, sessions_started);
    let mut beside_sessions = during(sessions_started, ended);
    let events_took = sessions_started - events_started;
    let sessions_took = ended - sessions_started;

    println!(
        "mcp_sweep sqlite: {events} expired events and {} expired sessions (as many kept), {concurrency} callers",
        (events / 10).max(1)
    );
    println!("| phase | sweep took | rows | commits | commit wait p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let (n, (p50, p99, alone_max)) = (alone.len(), spread(&mut alone));
    println!("| alone, 3 s (baseline) | | | {n} | {p50:.2} | {p99:.2} | {alone_max:.2} |");
    let mut worst = 0.0f64;
    for (phase, took, gone, waits) in [
        (
            "beside the events' sweep",
            events_took,
            gone_events,
            &mut beside_events,
        ),
        (
            "beside the sessions' sweep",
            sessions_took,
            gone_sessions,
            &mut beside_sessions,
        ),
    ] {
        let (n, (p50, p99, max)) = (waits.len(), spread(waits));
        worst = worst.max(max);
        println!(
            "| {phase} | {:.0} ms | {gone} | {n} | {p50:.2} | {p99:.2} | {max:.2} |",
            took.as_secs_f64() * 1e3
        );
    }
    let (p50, p99, max) = spread(&mut inserts);
    println!(
        "an SSE event's insert beside the audit writer, 300 in a row: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms"
    );
    println!(
        "worst commit wait beside a sweep / alone: {:.1}",
        worst / alone_max.max(f64::MIN_POSITIVE)
    );
    Ok(())
}
