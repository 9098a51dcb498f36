//! Baselines for the audit benchmarks: the real gateway (same config, auth, store,
//! executor) with its audit sink replaced. Never shipped; the `toolgate` binary always
//! answers after the call's row is committed.
//!
//! Usage: `gateway-unaudited ADDR DATA_DIR [MODE]` with `DATABASE_URL` set as for
//! `toolgate`. MODE:
//! - `none` (the default): a sink that records nothing;
//! - `reply-first`: the real audit writer, but a call is answered at once while a task
//!   of its own queues the record and waits for the commit. It measures what giving up
//!   "no answer before the row is durable" would buy: the writer and the database still do
//!   all their work.

use std::sync::Arc;

use async_trait::async_trait;
use toolgate_core::audit::{AuditError, AuditRecord, AuditSink, NoAudit};
use toolgate_server::config::{Config, Overrides};
use toolgate_store::AuditWriter;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The real writer, not waited for.
struct ReplyFirst(AuditWriter);

#[async_trait]
impl AuditSink for ReplyFirst {
    async fn record_intent(&self, record: &AuditRecord) -> Result<(), AuditError> {
        self.0.record_intent(record).await
    }

    async fn record(&self, record: AuditRecord) -> Result<(), AuditError> {
        let writer = self.0.clone();
        tokio::spawn(async move {
            if let Err(err) = writer.record(record).await {
                eprintln!("audit record lost: {err}");
            }
        });
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let overrides = Overrides {
        config_file: None,
        listen: args.next(),
        data_dir: args.next().map(Into::into),
    };
    let mode = args.next().unwrap_or_else(|| "none".into());
    let config = Config::load(&overrides, std::env::vars())?;
    let _log = toolgate_server::telemetry::init(
        &config.log,
        &config.telemetry,
        std::env::var("RUST_LOG").ok(),
    )?;
    let sink: Arc<dyn AuditSink> = match mode.as_str() {
        "none" => Arc::new(NoAudit),
        "reply-first" => {
            let store = toolgate_server::cli::open_store(&config).await?;
            Arc::new(ReplyFirst(AuditWriter::spawn(store)?.0))
        }
        other => anyhow::bail!("unknown mode {other:?}: none or reply-first"),
    };
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    toolgate_server::serve_with(config, listener, stop, Some(sink)).await
}
