//! A byte relay that gives sqlx's Postgres connections `TCP_NODELAY`.
//!
//! sqlx 0.9.0 leaves Nagle's algorithm on for its TCP connections (transact-rs/sqlx#4335,
//! fixed upstream after that release). A message larger than the socket's free send
//! buffer (16 KiB to start with) goes out in two writes, and the second waits for the
//! server's delayed ACK, about 40 ms: measured here, an audit batch of calls with 1.5 KB
//! arguments took 90 ms to commit and the gateway served 360 calls a second. The same
//! holds for any large statement (an agent run's journal, a big tool result).
//!
//! So a store on a TCP Postgres connects through this relay instead: sqlx speaks to it
//! over a Unix socket in a private directory (no Nagle there), and the relay speaks to
//! Postgres over TCP with `TCP_NODELAY`, copying bytes both ways untouched — TLS, when
//! configured, still runs end to end between sqlx and Postgres, and the server still sees
//! this host's TCP connection. Drop the last handle and the relay stops and its directory
//! is removed. Remove this module once sqlx sets `TCP_NODELAY` itself.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpStream, UnixListener};

/// A running relay: its socket directory, removed with the relay's task on drop.
#[derive(Debug)]
pub(crate) struct NoDelayRelay {
    dir: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl NoDelayRelay {
    /// Starts a relay to `host:port` on the current runtime, listening where sqlx looks
    /// for a server whose socket directory is [`Self::dir`] and whose port is `port`.
    pub(crate) fn start(host: &str, port: u16) -> std::io::Result<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        sweep_stale();
        let dir = std::env::temp_dir().join(format!(
            "{PREFIX}{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        }
        let listener = match UnixListener::bind(dir.join(format!(".s.PGSQL.{port}"))) {
            Ok(listener) => listener,
            Err(err) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(err);
            }
        };
        let host = host.trim_matches(['[', ']']).to_owned();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let host = host.clone();
                tokio::spawn(async move {
                    let server = match TcpStream::connect((host.as_str(), port)).await {
                        Ok(server) => server,
                        Err(err) => {
                            tracing::warn!(error = %err, "cannot reach Postgres");
                            return;
                        }
                    };
                    let _ = server.set_nodelay(true);
                    let mut server = server;
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        Ok(Self { dir, task })
    }

    /// The socket directory to give sqlx (`PgConnectOptions::socket`).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

const PREFIX: &str = "toolgate-pg-";

/// Removes the socket directories of processes that no longer run (killed before they
/// could remove their own).
fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for NoDelayRelay {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
