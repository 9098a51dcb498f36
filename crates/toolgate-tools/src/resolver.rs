//! Host-name lookups for `web_fetch`, kept off the runtime's shared blocking pool.
//!
//! `tokio::net::lookup_host` runs the system resolver (`getaddrinfo`) on the blocking
//! pool every tool shares. A DNS server that never answers kept each lookup's thread for
//! the resolver's own timeouts, so a tenant fetching such names could fill the pool and
//! stall every other tenant's file tools. Here lookups run on a few threads of their own
//! ([`THREADS`]), behind a bounded queue ([`QUEUE`]; full, a lookup fails at once), and a
//! caller waits at most its deadline: a resolver that hangs costs its own threads only.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::oneshot;

/// Threads doing lookups.
pub const THREADS: usize = 8;
/// Lookups waiting for a thread; one more fails at once.
pub const QUEUE: usize = 256;
/// The longest a caller waits for an answer.
pub const DEADLINE: Duration = Duration::from_secs(5);

type Answer = std::io::Result<Vec<SocketAddr>>;
type Lookup = dyn Fn(&str, u16) -> Answer + Send + Sync;

struct Job {
    host: String,
    port: u16,
    answer: oneshot::Sender<Answer>,
}

/// Why a lookup gave no addresses.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("the name could not be resolved: {0}")]
    Failed(std::io::Error),
    #[error("no answer from DNS within {0:?}")]
    TimedOut(Duration),
    #[error("too many name lookups are waiting; try again shortly")]
    Busy,
}

/// A pool of lookup threads.
pub struct Resolver {
    jobs: SyncSender<Job>,
}

impl Resolver {
    /// The system resolver's pool, started on first use.
    pub fn system() -> &'static Resolver {
        static SYSTEM: OnceLock<Resolver> = OnceLock::new();
        SYSTEM.get_or_init(|| {
            Resolver::start(THREADS, QUEUE, |host, port| {
                (host, port).to_socket_addrs().map(Iterator::collect)
            })
        })
    }

    /// A pool of `threads` running `lookup`, with `queue` places waiting.
    pub fn start(
        threads: usize,
        queue: usize,
        lookup: impl Fn(&str, u16) -> Answer + Send + Sync + 'static,
    ) -> Resolver {
        let (jobs, waiting) = sync_channel::<Job>(queue);
        let waiting = Arc::new(Mutex::new(waiting));
        let lookup: Arc<Lookup> = Arc::new(lookup);
        for n in 0..threads {
            let (waiting, lookup) = (waiting.clone(), lookup.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("toolgate-dns-{n}"))
                .spawn(move || work(&waiting, &*lookup));
            if let Err(err) = spawned {
                tracing::error!(error = %err, "could not start a DNS lookup thread");
            }
        }
        Resolver { jobs }
    }

    /// The addresses of `host`, waiting at most `deadline`.
    pub async fn lookup(
        &self,
        host: &str,
        port: u16,
        deadline: Duration,
    ) -> Result<Vec<SocketAddr>, ResolveError> {
        let (answer, answered) = oneshot::channel();
        let job = Job {
            host: host.to_owned(),
            port,
            answer,
        };
        match self.jobs.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                return Err(ResolveError::Busy);
            }
        }
        match tokio::time::timeout(deadline, answered).await {
            Ok(Ok(Ok(addrs))) => Ok(addrs),
            Ok(Ok(Err(err))) => Err(ResolveError::Failed(err)),
            Ok(Err(_)) => Err(ResolveError::Busy),
            Err(_) => Err(ResolveError::TimedOut(deadline)),
        }
    }
}

fn work(waiting: &Mutex<Receiver<Job>>, lookup: &Lookup) {
    loop {
        let job = {
            let waiting = waiting.lock().unwrap_or_else(|p| p.into_inner());
            waiting.recv()
        };
        let Ok(job) = job else {
            return;
        };
        // Its caller gave up waiting: no need to ask.
        if job.answer.is_closed() {
            continue;
        }
        let _ = job.answer.send(lookup(&job.host, job.port));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resolver_that_never_answers_times_out_and_leaves_the_blocking_pool_alone() {
        let (_never, hang) = std::sync::mpsc::channel::<()>();
        let hang = Mutex::new(hang);
        let resolver = Resolver::start(2, 4, move |_, _| {
            // Blocks for ever, like a DNS server that never answers.
            let _ = hang.lock().map(|rx| rx.recv());
            Ok(Vec::new())
        });
        let lookups =
            (0..10).map(|_| resolver.lookup("hangs.example", 443, Duration::from_millis(200)));
        let results = futures::future::join_all(lookups).await;
        // Two threads stuck, four waiting: the rest are refused at once, none hangs.
        assert!(results.iter().all(Result::is_err));
        assert!(
            results
                .iter()
                .any(|r| matches!(r, Err(ResolveError::TimedOut(_))))
        );
        assert!(results.iter().any(|r| matches!(r, Err(ResolveError::Busy))));
        // The runtime's blocking pool still serves the file tools.
        let done =
            tokio::time::timeout(Duration::from_secs(10), tokio::task::spawn_blocking(|| 7)).await;
        assert_eq!(done.ok().and_then(Result::ok), Some(7));
    }

    #[tokio::test]
    async fn the_system_resolver_finds_localhost() {
        let addrs = Resolver::system()
            .lookup("localhost", 80, DEADLINE)
            .await
            .expect("localhost resolves");
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }
}
