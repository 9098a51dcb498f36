//! The `tracing` subscriber: filter from `log.filter` (or `RUST_LOG`), text or JSON lines
//! on stderr. An OpenTelemetry exporter joins here as one more layer.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber. `rust_log` is the `RUST_LOG` value, if set.
pub fn init(config: &LogConfig, rust_log: Option<String>) -> anyhow::Result<()> {
    let filter = EnvFilter::try_new(rust_log.as_deref().unwrap_or(&config.filter))?;
    let registry = tracing_subscriber::registry().with(filter);
    match config.format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .try_init()?,
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .try_init()?,
    }
    Ok(())
}
