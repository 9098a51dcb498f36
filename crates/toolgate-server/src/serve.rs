//! Serving: the listener tuned, the app built and served until the stop signal, the
//! instance heartbeat, and the graceful end (the audit writer drained last).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolgate_core::audit::AuditSink;

use crate::{
    Config, Gateway, app, build_when_the_store_answers, config, http_server, metrics,
    sign_checkpoints,
};

/// Longest an instance goes without checking for tool definitions approved on another
/// (it checks when the store announces one).
const PIN_APPROVALS_EVERY: Duration = Duration::from_secs(30);

/// Renews this instance's row every [`HEARTBEAT_EVERY`] and tells admission how many
/// instances share each limit; forgets idle rate-limit buckets; gives approved calls an
/// instance left without an outcome one; leaves on `stop`.
async fn heartbeat(
    store: toolgate_store::Store,
    admission: Arc<toolgate_core::limits::Admission>,
    decisions: Arc<toolgate_core::approvals::Decisions<toolgate_store::Store>>,
    instance: String,
    stop: CancellationToken,
) {
    let mut every = tokio::time::interval(HEARTBEAT_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = every.tick() => {}
        }
        match store.heartbeat(&instance).await {
            Ok(n) => {
                if n != admission.instances() {
                    tracing::info!(instances = n, "instances sharing rate limits");
                }
                admission.set_instances(n);
            }
            // Keep the last count: limits stay as tight as they were.
            Err(err) => tracing::warn!(error = %err, "could not renew this instance's heartbeat"),
        }
        admission.sweep();
        decisions.interrupt_orphaned_calls().await;
    }
    if let Err(err) = store.leave(&instance).await {
        tracing::debug!(error = %err, "could not remove this instance's heartbeat");
    }
}

/// Connections open at once on `telemetry.metrics_listen` (scrapers are few).
const METRICS_CONNECTIONS: usize = 64;

/// The request body bytes the metrics listener holds at once.
const METRICS_BODY_BYTES: u64 = 1 << 20;

/// How often an instance renews its heartbeat (see `toolgate_store::instances`).
const HEARTBEAT_EVERY: Duration = Duration::from_secs(10);

/// Serves the gateway on `listener` until `shutdown` completes, then lets in-flight
/// requests finish for up to `http.shutdown_grace_secs` before returning.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    serve_with(config, listener, shutdown, None).await
}

/// [`serve`], with the audit sink replaced when `audit` is given (see [`build_with`](crate::build_with)).
pub async fn serve_with(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    audit: Option<Arc<dyn AuditSink>>,
) -> anyhow::Result<()> {
    let signer = (config.audit.checkpoint_secs > 0)
        .then(|| config.audit_signer())
        .transpose()
        .context("loading the audit signing key")?;
    let timeouts = http_server::ReadTimeouts {
        header: Duration::from_secs(config.http.header_read_timeout_secs),
        body: Duration::from_secs(config.http.body_read_timeout_secs),
    };
    // One set of connections (and of body bytes) for the listener, whether it answers 503
    // while the store is away or serves the gateway (the first drains before the second
    // starts).
    let bodies = http_server::BodyBytes::new(
        config.http.max_body_bytes_in_flight,
        config.http.max_body_bytes_in_flight_per_tenant,
    );
    let connections = http_server::Connections::new(max_connections(
        config.http.max_connections,
        open_files_limit(),
    ));
    // Told by `shutdown`, whether the gateway is serving or still waiting for its store.
    let stop = CancellationToken::new();
    tokio::spawn({
        let stop = stop.clone();
        async move {
            shutdown.await;
            stop.cancel();
        }
    });
    let Some(Gateway {
        state,
        audit_writer,
    }) = build_when_the_store_answers(
        &config,
        audit,
        &listener,
        timeouts,
        (&connections, &bodies),
        &stop,
    )
    .await?
    else {
        return Ok(());
    };
    let streams = state.shutdown.clone();
    let checkpoints = signer.clone().map(|signer| {
        tokio::spawn(sign_checkpoints(
            state.store.clone(),
            signer,
            Duration::from_secs(config.audit.checkpoint_secs),
            streams.clone(),
        ))
    });
    let store = state.store.clone();
    // Upstreams connect in the background: one that is down never delays start-up.
    let mut upstreams = Vec::new();
    let mut statuses = Vec::new();
    for mut upstream in config
        .upstreams
        .iter()
        .filter_map(config::UpstreamEntry::to_upstream)
    {
        upstream.vetting = toolgate_mcp::vetting::Vetting(Some(state.pins.clone()));
        let name = upstream.name.clone();
        let supervised = toolgate_mcp::upstream::spawn(
            upstream,
            state.registry.clone(),
            state.catalog.clone(),
            streams.clone(),
        );
        upstreams.push(supervised.task);
        statuses.push((name, supervised.status));
    }
    state.telemetry.observe_upstreams(statuses);
    // Definitions approved on other instances reach this one's upstreams when announced.
    tokio::spawn(
        state
            .pins
            .clone()
            .follow(PIN_APPROVALS_EVERY, streams.clone()),
    );
    tokio::spawn(
        state
            .telemetry
            .clone()
            .count(state.store.clone(), streams.clone()),
    );
    let instance = state.runs.instance().to_owned();
    let heartbeat = tokio::spawn(heartbeat(
        state.store.clone(),
        state.admission.clone(),
        state.decisions.clone(),
        instance.clone(),
        streams.clone(),
    ));
    let metrics_listener = match config.telemetry.metrics_listen {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding telemetry.metrics_listen {addr}"))?;
            let addr = listener.local_addr().unwrap_or(addr);
            tracing::info!(%addr, "serving /metrics");
            let app = metrics::listener_app(state.telemetry.clone());
            // The same read timeouts as the main listener, and a cap of its own: its
            // connections come out of the same open-file limit.
            let connections = http_server::Connections::new(METRICS_CONNECTIONS);
            // Scrapes send no bodies.
            let bodies = http_server::BodyBytes::new(METRICS_BODY_BYTES, METRICS_BODY_BYTES);
            let stop = streams.clone().cancelled_owned();
            Some(tokio::spawn(http_server::serve(
                listener,
                app,
                timeouts,
                connections,
                bodies,
                stop,
            )))
        }
        None => None,
    };
    // Tenants' upstreams: every instance connects to all of them, in the background.
    let tenant_upstreams = state
        .upstreams
        .clone()
        .map(|u| tokio::spawn(u.supervise(Duration::from_secs(config.tenant_upstreams.sync_secs))));
    // Runs left by a stopped instance resume here; this instance's runs keep their leases.
    // Before the listener serves: a run started here must not pass for an orphan.
    state.runs.adopt_orphans().await;
    let runs = tokio::spawn(state.runs.clone().supervise(streams.clone()));
    let decisions = state.decisions.clone();
    state
        .telemetry
        .observe_connections(Arc::downgrade(&connections));
    state.telemetry.observe_bodies(Arc::downgrade(&bodies));
    let app = app(state, &config);
    let addr = listener
        .local_addr()
        .context("reading the listener's address")?;
    tracing::info!(%addr, "listening");
    let stopping = CancellationToken::new();
    let signal = stopping.clone();
    let server = http_server::serve(listener, app, timeouts, connections, bodies, async move {
        stop.cancelled().await;
        tracing::info!("shutting down: no new connections, draining in-flight requests");
        streams.cancel();
        signal.cancel();
    });
    // The whole stop fits in the grace period (an orchestrator kills the process after
    // it): requests, runs and upstreams get it less a reserve kept for the audit writer,
    // which drains last — every acknowledged call's row is committed before the exit.
    let grace = Duration::from_secs(config.http.shutdown_grace_secs);
    let reserve = (grace / 4).min(Duration::from_secs(2));
    let mut deadline = None;
    tokio::select! {
        () = server => {}
        () = async {
            stopping.cancelled().await;
            let at = tokio::time::Instant::now() + grace;
            deadline = Some(at);
            tokio::time::sleep_until(at - reserve).await;
        } => {
            tracing::warn!(grace_secs = grace.as_secs(), "in-flight requests still running at the end of the grace period; stopping them");
        }
    }
    let deadline = deadline.unwrap_or_else(|| tokio::time::Instant::now() + grace);
    // Approved REST calls running here end and keep their outcomes (else another
    // instance would mark them interrupted, long after).
    if tokio::time::timeout_at(deadline - reserve, decisions.drain())
        .await
        .is_err()
    {
        tracing::warn!(
            "approved calls still running at the end of the grace period; stopping them"
        );
    }
    // It holds the executor, and so a handle on the audit writer, which drains last.
    drop(decisions);
    // Agent runs stop here and are released for the next instance to take over.
    let _ = tokio::time::timeout_at(deadline - reserve, runs).await;
    let _ = tokio::time::timeout_at(deadline - reserve, heartbeat).await;
    if let Some(task) = metrics_listener {
        task.abort();
    }
    // Upstream supervisors end their connections (child processes are killed).
    for upstream in upstreams.into_iter().chain(tenant_upstreams) {
        let _ = tokio::time::timeout_at(deadline - reserve, upstream).await;
    }
    // The app (and with it every handle on the audit writer) is gone: the writer drains
    // what is queued and ends.
    match tokio::time::timeout_at(deadline, audit_writer.join()).await {
        Ok(_) => tracing::info!("audit log flushed"),
        Err(_) => tracing::error!("the audit writer did not drain within the grace period"),
    }
    // The last rows written are signed too.
    if let Some(task) = checkpoints {
        let _ = task.await;
    }
    if let Some(signer) = &signer
        && let Err(err) = store.write_checkpoints(signer).await
    {
        tracing::warn!(error = %err, "could not sign the final audit checkpoints");
    }
    tracing::info!("stopped");
    Ok(())
}

/// The listener with `TCP_NODELAY` set on every accepted connection: without it small
/// replies wait for the peer's delayed ACK (tens of milliseconds each).
pub fn tuned(
    listener: TcpListener,
) -> axum::serve::TapIo<TcpListener, fn(&mut tokio::net::TcpStream)> {
    listener.tap_io(nodelay as fn(&mut tokio::net::TcpStream))
}

/// Binds the gateway's listener with a queue of 4,096 connections waiting to be accepted
/// (the kernel caps it at `net.core.somaxconn`, 4,096 by default), as Go's runtime does.
/// Tokio's `bind` asks for 128: a burst of clients connecting at once (after a load
/// balancer's restart, say) overflowed it and some waited a second for their SYN to be
/// sent again.
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(4096)
}

/// Raises this process's open-file limit to its hard limit, as Go's runtime and nginx
/// (`worker_rlimit_nofile`) do: Linux starts a process at 1,024 whatever its hard limit
/// allows. Returns the limit in force.
fn open_files_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok(limits) => limits,
        Err(err) => {
            tracing::warn!(error = %err, "could not read the open-file limit");
            return 1024;
        }
    };
    // An unlimited hard limit is not a valid soft one (the kernel's `nr_open` caps it).
    let wanted = hard.min(1 << 20);
    if soft >= wanted {
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, wanted, hard) {
        Ok(()) => wanted,
        Err(err) => {
            tracing::warn!(error = %err, soft, hard, "could not raise the open-file limit");
            soft
        }
    }
}

/// `http.max_connections`, or by default three quarters of the open-file limit less 64
/// (the rest for the store, upstreams, tools' files and outgoing requests), at most 16,384.
fn max_connections(configured: Option<usize>, open_files: u64) -> usize {
    let room = usize::try_from((open_files / 4 * 3).saturating_sub(64)).unwrap_or(usize::MAX);
    match configured {
        Some(max) => {
            if max > room {
                tracing::warn!(
                    max_connections = max,
                    open_files,
                    "http.max_connections leaves the gateway less than a quarter of its open-file limit (plus 64): past that, it cannot open its own files and sockets"
                );
            }
            max
        }
        None => room.clamp(1, 16_384),
    }
}

/// Sets `TCP_NODELAY` on an accepted connection (see [`tuned`]; the gateway's own accept
/// loop in [`http_server`] calls it too).
pub(crate) fn nodelay(tcp: &mut tokio::net::TcpStream) {
    if let Err(err) = tcp.set_nodelay(true) {
        tracing::warn!(error = %err, "could not set TCP_NODELAY");
    }
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut tuned = tuned(listener);
        let client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (server_side, _) = tuned.accept().await;
        assert!(
            server_side.nodelay().expect("read option"),
            "TCP_NODELAY must be set"
        );
        drop(client);
    }

    #[test]
    fn the_default_cap_leaves_a_quarter_of_the_open_files_and_64() {
        assert_eq!(max_connections(None, 256), 128);
        assert_eq!(max_connections(None, 1024), 704);
        assert_eq!(max_connections(None, 20_000), 14_936);
        assert_eq!(max_connections(None, 1 << 20), 16_384);
        assert_eq!(max_connections(None, 64), 1);
        assert_eq!(max_connections(Some(10), 256), 10);
        assert_eq!(
            max_connections(Some(1000), 256),
            1000,
            "as set, with a warning"
        );
    }

    /// 1,000 clients connecting at once are all queued, none accepted yet (with Tokio's
    /// `bind`, connects past the 129th waited a second for their SYN to be sent again).
    #[tokio::test]
    async fn a_burst_of_connections_waits_in_the_listen_queue() {
        let listener = bind("127.0.0.1:0".parse().expect("address")).expect("bind");
        let addr = listener.local_addr().expect("addr");
        let queued = tokio::task::spawn_blocking(move || {
            (0..1000)
                .map_while(|_| {
                    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()
                })
                .collect::<Vec<_>>()
        })
        .await
        .expect("join");
        assert_eq!(queued.len(), 1000);
        drop(listener);
    }
}
