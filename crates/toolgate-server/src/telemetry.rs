//! The `tracing` subscriber: filter from `log.filter` (or `RUST_LOG`), text or JSON lines
//! on stderr. An OpenTelemetry exporter joins here as one more layer.
//!
//! Lines are written by a background thread (`tracing-appender`), so a request never
//! waits on a `write(2)` to stderr; the queue is bounded and, when full, callers wait
//! rather than lose lines. Keep the returned guard alive until exit: dropping it flushes.

use std::io::IsTerminal;

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat};

/// Installs the global subscriber. `rust_log` is the `RUST_LOG` value, if set.
pub fn init(config: &LogConfig, rust_log: Option<String>) -> anyhow::Result<WorkerGuard> {
    let filter = EnvFilter::try_new(rust_log.as_deref().unwrap_or(&config.filter))?;
    let ansi = std::io::stderr().is_terminal();
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("toolgate-log")
        .finish(std::io::stderr());
    let registry = tracing_subscriber::registry().with(filter);
    match config.format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(writer),
            )
            .try_init()?,
        LogFormat::Json => registry
            .with(tracing_subscriber::fmt::layer().json().with_writer(writer))
            .try_init()?,
    }
    Ok(guard)
}
