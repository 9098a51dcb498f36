//! The durable audit alone: CPU per row of the real writer, by thread.
//!
//! Usage: `cargo run --release -p toolgate-store --example audit_rows -- sqlite|postgres
//! [CONCURRENCY] [SECONDS]` (bench/audit_rows.sh runs both). For `postgres`,
//! `DATABASE_URL` names an empty database the run may fill (bench/audit_rows.sh makes one).
//!
//! CONCURRENCY tasks (64 by default) each build a record as the executor does for the
//! benchmarks' echo call, hand it to the [`AuditWriter`] and wait for its commit, over and
//! over for SECONDS (8 by default) after a 2 s warm-up. CPU time comes from
//! `/proc/self/task/*/stat` (this process's threads, grouped by name) and, on Postgres,
//! from `/proc/PID/stat` of every `postgres` process on the machine (the backend the writer
//! holds, the WAL writer, the checkpointer). The last line is the figure issue 29 sets a
//! target for: the audit's CPU per row on all its threads — the writer, SQLite's connection
//! thread or the Postgres processes — and, apart, what the waiting tasks spent.
//! `AUDIT_ROWS_DROP_INDEXES=1` measures the same without `audit_log`'s query indexes;
//! `AUDIT_ROWS_SQL='…'` runs any other what-if's SQL on the migrated store first (a
//! rebuilt table, say). Neither is ever done to a real store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use support::record;
use toolgate_core::PrincipalId;
use toolgate_core::audit::AuditSink;
use toolgate_store::{AuditWriter, Store};

mod support;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Ticks of this process's threads by name (numbering dropped): user + system, and
/// system alone.
fn cpu_ticks() -> BTreeMap<String, (u64, u64)> {
    let mut groups = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return groups;
    };
    for task in tasks.flatten() {
        if let Some((name, ticks, system)) = stat(&task.path().join("stat")) {
            let name = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-');
            let group: &mut (u64, u64) = groups.entry(name.to_owned()).or_default();
            group.0 += ticks;
            group.1 += system;
        }
    }
    groups
}

/// Ticks of every process named `postgres`.
fn postgres_ticks() -> u64 {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return 0;
    };
    procs
        .flatten()
        .filter(|p| {
            p.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|p| stat(&p.path().join("stat")))
        .filter(|(name, _, _)| name == "postgres")
        .map(|(_, ticks, _)| ticks)
        .sum()
}

/// The name, user + system ticks and system ticks in a `/proc/…/stat` file.
fn stat(path: &std::path::Path) -> Option<(String, u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text[open + 1..close].to_owned();
    let fields: Vec<&str> = text[close + 2..].split(' ').collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some((name, user + system, system))
}

fn is_audit_thread(name: &str) -> bool {
    name.starts_with("toolgate-audit") || name.starts_with("sqlx-sqlite")
}

/// Bytes this process has handed to `write` and `pwrite` (`wchar` of `/proc/self/io`): on
/// SQLite, the WAL's frames and the checkpoints' copies.
fn bytes_written() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines().find_map(|l| {
                l.strip_prefix("wchar: ")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// What-if (`AUDIT_ROWS_DROP_INDEXES=1`): `audit_log` without the indexes only queries
/// use (by time, tool, trace, approval), keeping the primary key and `(tenant_id, seq)`
/// the chain needs. Never done to a real store.
const DROP_QUERY_INDEXES: &str = "drop index if exists audit_log_tenant_started_idx; \
    drop index if exists audit_log_tenant_tool_idx; \
    drop index if exists audit_log_tenant_trace_idx; \
    drop index if exists audit_log_approval_idx;";

/// Runs a what-if's SQL on the migrated store, before any row is written.
async fn what_if(url: Option<&str>, dir: &std::path::Path, sql: &str) -> anyhow::Result<()> {
    match url {
        Some(url) => {
            use sqlx::Connection as _;
            let mut conn = sqlx::PgConnection::connect(url).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(&mut conn)
                .await?;
        }
        None => {
            let conn = rusqlite::Connection::open(dir.join("toolgate.db"))?;
            conn.execute_batch(sql)?;
        }
    }
    println!("(what-if, before the run: {sql})");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let backend = args.next().unwrap_or_else(|| "sqlite".into());
    let concurrency: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    let seconds: u64 = args.next().map_or(Ok(8), |a| a.parse())?;
    let dir = std::env::temp_dir().join(format!("toolgate-audit-rows-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let url = match backend.as_str() {
        "sqlite" => None,
        "postgres" => Some(std::env::var("DATABASE_URL")?),
        other => anyhow::bail!("unknown backend {other:?}: sqlite or postgres"),
    };
    let store = Store::open(url.as_deref(), &dir).await?;
    store.migrate().await?;
    if std::env::var_os("AUDIT_ROWS_DROP_INDEXES").is_some() {
        what_if(url.as_deref(), &dir, DROP_QUERY_INDEXES).await?;
    }
    if let Ok(sql) = std::env::var("AUDIT_ROWS_SQL") {
        what_if(url.as_deref(), &dir, &sql).await?;
    }
    let tenant = store.create_tenant("bench").await?.id;
    let principal = PrincipalId::new();
    let (writer, task) = AuditWriter::spawn(store)?;

    let rows = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for _ in 0..concurrency {
        let (writer, rows, stop) = (writer.clone(), rows.clone(), stop.clone());
        callers.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                writer.record(record(tenant, principal)).await?;
                rows.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, written_before, pg_before, rows_before, started) = (
        cpu_ticks(),
        bytes_written(),
        postgres_ticks(),
        rows.load(Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (after, written_after, pg_after, rows_after, elapsed) = (
        cpu_ticks(),
        bytes_written(),
        postgres_ticks(),
        rows.load(Ordering::Relaxed),
        started.elapsed(),
    );
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await??;
    }
    drop(writer);
    task.join().await;
    let _ = std::fs::remove_dir_all(&dir);

    let hz: f64 = String::from_utf8(
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()?
            .stdout,
    )?
    .trim()
    .parse()?;
    let n = (rows_after - rows_before) as f64;
    let per_row = |ticks: u64| ticks as f64 / hz * 1e6 / n;
    println!(
        "audit_rows {backend}, concurrency {concurrency}: {:.0} rows/s over {:.1} s",
        n / elapsed.as_secs_f64(),
        elapsed.as_secs_f64()
    );
    println!("| threads | CPU µs/row |\n|---|---:|");
    let (mut audit, mut audit_kernel, mut callers_cpu) = (0.0, 0.0, 0.0);
    for (name, (ticks, system)) in &after {
        let (ticks_before, system_before) = before.get(name).copied().unwrap_or_default();
        let spent = per_row(ticks - ticks_before);
        if is_audit_thread(name) {
            audit += spent;
            audit_kernel += per_row(system - system_before);
        } else {
            callers_cpu += spent;
        }
        if spent >= 0.05 {
            println!("| {name} | {spent:.1} |");
        }
    }
    if backend == "postgres" {
        let spent = per_row(pg_after - pg_before);
        audit += spent;
        println!("| postgres (all processes) | {spent:.1} |");
    }
    println!(
        "of the audit threads' CPU, in the kernel: {audit_kernel:.1} µs per row; bytes written by this process: {:.0} per row",
        (written_after - written_before) as f64 / n,
    );
    println!(
        "audit CPU per row, all its threads: {audit:.1} µs (target ≤ 6); the waiting callers: {callers_cpu:.1} µs"
    );
    Ok(())
}
