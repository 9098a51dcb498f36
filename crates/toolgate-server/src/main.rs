//! The `toolgate` binary: parse flags, load configuration, install telemetry, serve.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use toolgate_server::config::{Config, Overrides};

/// A gateway allocates many small, short-lived buffers per request (JSON values, headers,
/// spans); mimalloc's thread-local free lists serve them faster than glibc's malloc.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// One gateway for every tool call, from REST, MCP clients and agents: each call
/// validated, authorized, rate-limited, approved where policy asks, and audited.
#[derive(Parser)]
#[command(name = "toolgate", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    ///
    /// Configuration comes from defaults, then the TOML file given with --config, then
    /// TOOLGATE_* environment variables (nested keys joined with "__", e.g.
    /// TOOLGATE_HTTP__MAX_BODY_BYTES=2097152), then these flags. DATABASE_URL selects
    /// Postgres; without it the store is an SQLite file in the data directory.
    Serve {
        /// Address to listen on [default: 127.0.0.1:8080]
        #[arg(long, env = "TOOLGATE_LISTEN", value_name = "ADDR")]
        listen: Option<String>,
        /// Directory for toolgate's data; the workspace defaults to DIR/workspace
        /// [default: ./toolgate-data]
        #[arg(long, env = "TOOLGATE_DATA_DIR", value_name = "DIR")]
        data_dir: Option<PathBuf>,
        /// TOML configuration file
        #[arg(long, env = "TOOLGATE_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print the OpenAPI document of the REST API (what /openapi.json serves).
    Openapi,
    /// Apply database migrations and exit.
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Write a consistent copy of the embedded SQLite database, while the gateway runs.
    ///
    /// The copy holds every row committed when it starts (audit log, runs, tenants, keys,
    /// sealed credentials). It does not hold the keys in the data directory
    /// (upstream-credentials-key, audit-signing-key): keep those apart, as secrets.
    /// Restore: stop the gateway, put the copy in place as <data_dir>/toolgate.db (with
    /// no toolgate.db-wal or -shm beside it), start it. Postgres: use pg_dump.
    Backup {
        /// The file to write; it must not exist.
        #[arg(long, value_name = "FILE")]
        to: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Manage tenants.
    Tenants {
        #[command(flatten)]
        store: StoreArgs,
        #[command(subcommand)]
        command: toolgate_server::cli::TenantsCommand,
    },
    /// Manage API keys.
    Keys {
        #[command(flatten)]
        store: StoreArgs,
        #[command(subcommand)]
        command: toolgate_server::cli::KeysCommand,
    },
    /// Inspect the audit log.
    Audit {
        #[command(flatten)]
        store: StoreArgs,
        #[command(subcommand)]
        command: toolgate_server::cli::AuditCommand,
    },
    /// Manage tenant upstreams' stored credentials.
    Upstreams {
        #[command(flatten)]
        store: StoreArgs,
        #[command(subcommand)]
        command: toolgate_server::cli::UpstreamsCommand,
    },
    /// Internal: confine this process and exec a command (started by execute_command).
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec {
        /// The sandbox and command, as JSON.
        launch: String,
    },
}

/// Where the store is: the same settings as `serve` (DATABASE_URL for Postgres).
#[derive(clap::Args)]
struct StoreArgs {
    /// Directory for toolgate's data (the SQLite file lives here) [default: ./toolgate-data]
    #[arg(long, env = "TOOLGATE_DATA_DIR", value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// TOML configuration file
    #[arg(long, env = "TOOLGATE_CONFIG", value_name = "FILE", global = true)]
    config: Option<PathBuf>,
}

impl StoreArgs {
    fn load(self) -> anyhow::Result<Config> {
        let overrides = Overrides {
            config_file: self.config,
            listen: None,
            data_dir: self.data_dir,
        };
        Ok(Config::load(&overrides, std::env::vars())?)
    }
}

fn main() -> ExitCode {
    let command = Cli::parse().command;
    if let Command::SandboxExec { launch } = &command {
        // No runtime, no threads: confine this process and become the command.
        return sandbox_exec(launch);
    }
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|runtime| runtime.block_on(run(command)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("toolgate: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Returns only when the command could not be started (exit code 126, as a shell does).
fn sandbox_exec(launch: &str) -> ExitCode {
    let err = match serde_json::from_str::<toolgate_tools::sandbox::Launch>(launch) {
        Ok(launch) => launch.run(),
        Err(err) => std::io::Error::other(format!("bad launch description: {err}")),
    };
    eprintln!("toolgate: the sandboxed command could not start: {err}");
    ExitCode::from(126)
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Serve {
            listen,
            data_dir,
            config,
        } => {
            let overrides = Overrides {
                config_file: config,
                listen,
                data_dir,
            };
            let config = Config::load(&overrides, std::env::vars())?;
            let _log_guard = toolgate_server::telemetry::init(
                &config.log,
                &config.telemetry,
                std::env::var("RUST_LOG").ok(),
            )?;
            let listener = toolgate_server::bind(config.listen)
                .with_context(|| format!("binding {}", config.listen))?;
            toolgate_server::serve(config, listener, shutdown_signal()).await
        }
        Command::Openapi => {
            print!("{}", toolgate_server::openapi_json());
            Ok(())
        }
        Command::Migrate { store } => {
            let config = store.load()?;
            let opened = toolgate_server::cli::open_store(&config).await?;
            println!("migrated the {} store", opened.backend());
            Ok(())
        }
        Command::Backup { to, store } => toolgate_server::cli::backup(&store.load()?, &to).await,
        Command::Tenants { store, command } => {
            toolgate_server::cli::tenants(&store.load()?, command).await
        }
        Command::Keys { store, command } => {
            toolgate_server::cli::keys(&store.load()?, command).await
        }
        Command::Audit { store, command } => {
            toolgate_server::cli::audit(&store.load()?, command).await
        }
        Command::Upstreams { store, command } => {
            toolgate_server::cli::upstreams(&store.load()?, command).await
        }
        Command::SandboxExec { .. } => anyhow::bail!("sandbox-exec runs before the runtime starts"),
    }
}

/// Ctrl-C or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sigterm) => {
                sigterm.recv().await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
