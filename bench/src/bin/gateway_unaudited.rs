//! The baseline for the audit benchmark: the real gateway (same config, auth, store,
//! executor) with its audit sink replaced by one that records nothing. Never shipped.
//!
//! Usage: `gateway-unaudited ADDR DATA_DIR` with `DATABASE_URL` set as for `toolgate`.

use std::sync::Arc;

use toolgate_core::audit::NoAudit;
use toolgate_server::config::{Config, Overrides};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let overrides = Overrides {
        config_file: None,
        listen: args.next(),
        data_dir: args.next().map(Into::into),
    };
    let config = Config::load(&overrides, std::env::vars())?;
    let _log = toolgate_server::telemetry::init(&config.log, std::env::var("RUST_LOG").ok())?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let stop = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    toolgate_server::serve_with(config, listener, stop, Some(Arc::new(NoAudit))).await
}
