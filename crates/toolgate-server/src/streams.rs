//! Long-lived streams (SSE): how many one principal and one tenant may hold open, and
//! what ends them besides the client.
//!
//! - **Caps.** Each principal may hold `http.max_streams_per_principal` open streams and
//!   each tenant `http.max_streams_per_tenant`, on this instance (`/v1/approvals/events`,
//!   `/v1/runs/{id}/events`, `GET /mcp` session streams and 2026-07-28
//!   `subscriptions/listen` streams, and REST calls waiting with `Prefer: wait`). One
//!   more stream is refused with 429 and `Retry-After` (one more wait is not waited): a
//!   single key cannot exhaust the gateway's memory or file descriptors. The counts are per instance: with N replicas a principal may hold up
//!   to N times its cap, spread across them.
//! - **Revocation.** Every [`REVALIDATE_EVERY`] a stream's credential is checked again
//!   (the key cache follows revocations, a JWT its expiry); a stream whose credential no
//!   longer holds ends. A store that cannot answer for the moment does not end streams.
//! - **The connection cap.** A stream whose connection is asked to close to make room for
//!   another (`http.max_connections`) ends between two events; its client reconnects.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::HeaderValue;
use futures::StreamExt;
use toolgate_core::per_key::PerKey;
use toolgate_core::{AuthContext, ErrorKind, PrincipalId, TenantId, ToolError};

use crate::auth::Authenticator;

/// How often an open stream's credential is checked again.
pub const REVALIDATE_EVERY: Duration = Duration::from_secs(5);

/// How long a refused client is asked to wait before opening another stream.
const RETRY_AFTER_SECS: u64 = 5;

/// The caps on open streams.
#[derive(Clone, Copy, Debug)]
pub struct StreamLimits {
    pub per_principal: usize,
    pub per_tenant: usize,
}

/// The open streams of this instance, counted per principal and per tenant.
pub struct Streams {
    limits: StreamLimits,
    authenticator: Arc<Authenticator>,
    open: Mutex<Counts>,
    /// Where refusals are counted (`toolgate.admission.rejections`, limit `streams`).
    metrics: toolgate_core::metrics::Metrics,
}

#[derive(Default)]
struct Counts {
    principals: PerKey<PrincipalId>,
    tenants: PerKey<TenantId>,
}

/// One admitted stream; its count goes when this is dropped (with the stream).
pub struct Ticket {
    streams: Arc<Streams>,
    tenant: TenantId,
    principal: PrincipalId,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.streams.lock();
        open.principals.release(&self.principal);
        open.tenants.release(&self.tenant);
    }
}

impl Streams {
    pub fn new(
        limits: StreamLimits,
        authenticator: Arc<Authenticator>,
        metrics: toolgate_core::metrics::Metrics,
    ) -> Self {
        Self {
            limits,
            authenticator,
            open: Mutex::default(),
            metrics,
        }
    }

    /// Streams open now on this instance.
    pub fn open(&self) -> usize {
        self.lock().tenants.total()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a new stream of `auth`'s through `adapter`, or refuses it (`rate_limited`,
    /// with when to try again, and counted) when its principal or tenant is at its cap.
    pub fn admit(
        self: &Arc<Self>,
        auth: &AuthContext,
        adapter: toolgate_core::Adapter,
    ) -> Result<Ticket, ToolError> {
        let (tenant, principal) = (auth.tenant, auth.principal.id);
        let mut open = self.lock();
        let by_principal = open.principals.get(&principal);
        let by_tenant = open.tenants.get(&tenant);
        let refused = if by_principal >= self.limits.per_principal {
            Some(format!(
                "you have {by_principal} streams open, the most one principal may hold"
            ))
        } else if by_tenant >= self.limits.per_tenant {
            Some(format!(
                "your tenant has {by_tenant} streams open, the most it may hold"
            ))
        } else {
            None
        };
        if let Some(message) = refused {
            self.metrics
                .rejected(tenant, toolgate_core::limits::Limit::Streams, adapter);
            return Err(ToolError::new(ErrorKind::RateLimited, message)
                .with_retry_after(std::time::Duration::from_secs(RETRY_AFTER_SECS), false)
                .with_suggestion("close a stream you no longer follow, then try again"));
        }
        open.principals.add(principal);
        open.tenants.add(tenant);
        Ok(Ticket {
            streams: self.clone(),
            tenant,
            principal,
        })
    }

    /// `response`'s body as an admitted stream (see `Streams::guard`), re-checking the
    /// credential `authorization` (the request's `Authorization` header). It may end
    /// between two events when its connection is asked to close to make room for another
    /// ([`crate::http_server::Interruptible`]): its client reconnects.
    pub fn follow(
        &self,
        ticket: Ticket,
        authorization: Option<HeaderValue>,
        response: axum::response::Response,
    ) -> axum::response::Response {
        let (mut parts, body) = response.into_parts();
        parts.extensions.insert(crate::http_server::Interruptible);
        axum::response::Response::from_parts(parts, self.guard(ticket, authorization, body))
    }

    /// `body` as an admitted stream: it keeps `ticket` while it lives, and ends when the
    /// credential in `authorization` stops being valid (checked every
    /// [`REVALIDATE_EVERY`]).
    fn guard(&self, ticket: Ticket, authorization: Option<HeaderValue>, body: Body) -> Body {
        let authenticator = self.authenticator.clone();
        let start = tokio::time::Instant::now() + REVALIDATE_EVERY;
        let recheck = tokio::time::interval_at(start, REVALIDATE_EVERY);
        let state = (body.into_data_stream(), recheck, ticket);
        Body::from_stream(futures::stream::unfold(
            state,
            move |(mut data, mut recheck, ticket)| {
                let authenticator = authenticator.clone();
                let authorization = authorization.clone();
                async move {
                    loop {
                        tokio::select! {
                            item = data.next() => return item.map(|i| (i, (data, recheck, ticket))),
                            _ = recheck.tick() => {
                                if !authenticator.still_valid(authorization.as_ref()).await {
                                    tracing::info!(
                                        tenant = %ticket.tenant,
                                        principal = %ticket.principal,
                                        "a stream's credential is no longer valid; ending it"
                                    );
                                    return None;
                                }
                            }
                        }
                    }
                }
            },
        ))
    }
}
