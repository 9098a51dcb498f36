//! The caller's tenant's audit log: `GET /v1/audit` (newest first, filtered and paged),
//! `GET /v1/audit/events` (calls as their rows land, on any instance) and `POST
//! /v1/audit/verify` (the hash chain and its signed checkpoints).

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use toolgate_core::auth::scopes;
use toolgate_core::stores::Change;
use toolgate_core::{PrincipalId, RunId};
use toolgate_store::{AuditFilter, AuditRow, CallTiming};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppQuery, bounded};
use crate::auth::Caller;
use crate::state::AppState;

mod summary;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_audit))
        .routes(routes!(audit_events))
        .routes(routes!(verify_audit))
        .routes(routes!(summary::audit_summary))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only calls of this tool.
    tool: Option<String>,
    /// Only calls by this principal.
    principal: Option<Uuid>,
    /// `rest`, `mcp`, `agent`, `approval` (people's decisions on approvals),
    /// `definition` (upstream tool definitions) or `admin` (administrative changes).
    adapter: Option<String>,
    /// `ok` or an error category (`invalid_arguments`, `forbidden`, `timeout`, …).
    outcome: Option<String>,
    /// Only calls of this agent run.
    run_id: Option<Uuid>,
    /// Only the row of this call.
    call_id: Option<Uuid>,
    /// Only calls in this W3C trace (32 lowercase hex digits).
    trace_id: Option<String>,
    /// Calls started at or after this time (RFC 3339).
    since: Option<DateTime<Utc>>,
    /// Calls started before this time (RFC 3339).
    until: Option<DateTime<Utc>>,
    /// Opaque cursor from a previous page's `next_cursor`.
    cursor: Option<String>,
    /// Most rows on the page, 1–1000 (default 100). A page also ends once its rows hold
    /// about 4 MiB of arguments and errors (rows as large as a request body can be): follow
    /// `next_cursor` until it is absent rather than counting rows.
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// One recorded call.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntry {
    pub call_id: Uuid,
    /// Position in the tenant's hash chain, from 1.
    pub seq: i64,
    pub principal_id: Uuid,
    pub adapter: String,
    pub tool: String,
    /// Arguments, secret fields masked as `***`.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// SHA-256 of the unmasked arguments.
    pub arguments_hash: String,
    /// `ok` or the error category.
    pub outcome: String,
    pub error: Option<String>,
    pub duration_ms: f64,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub run_id: Option<Uuid>,
    pub step: Option<i32>,
    pub client: Option<String>,
    /// The approval the call asked for, used, or was refused by; for rows of adapter
    /// `approval` (a person's decision), the approval decided.
    pub approval_id: Option<Uuid>,
    /// For a tool whose results are cached: `hit` (answered from the cache, the tool did
    /// not run), `miss` or `bypass` (the tool ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub prev_hash: String,
    pub row_hash: String,
}

impl From<AuditRow> for AuditEntry {
    fn from(r: AuditRow) -> Self {
        Self {
            call_id: r.call_id,
            seq: r.seq,
            principal_id: r.principal.0,
            adapter: r.adapter,
            tool: r.tool,
            arguments: serde_json::from_str(&r.arguments).unwrap_or(serde_json::Value::Null),
            arguments_hash: r.arguments_hash,
            outcome: r.outcome,
            error: r.error,
            duration_ms: r.duration_us as f64 / 1000.0,
            request_id: r.request_id,
            trace_id: r.trace_id,
            run_id: r.run_id.map(|r| r.0),
            step: r.step,
            client: r.client,
            approval_id: r.approval_id,
            cache: r.cache,
            started_at: r.started_at,
            finished_at: r.finished_at,
            prev_hash: r.prev_hash,
            row_hash: r.row_hash,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    /// Where the next page starts; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The caller's tenant's audit log, newest first (needs `audit:read`).
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "audit",
    params(AuditQuery),
    responses(
        (status = 200, body = AuditPage, description = "A page of audit entries, newest first"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Bad filter"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks audit:read"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn list_audit(
    State(app): State<AppState>,
    caller: Caller,
    AppQuery(q): AppQuery<AuditQuery>,
) -> Result<AppJson<AuditPage>, ApiError> {
    caller.require(scopes::AUDIT_READ)?;
    let limit = bounded("limit", q.limit, 100, 1..=1000)?;
    let before_seq = q
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<i64>()
                .map_err(|_| ApiError::Malformed("invalid cursor".into()))
        })
        .transpose()?;
    let filter = AuditFilter {
        tool: q.tool,
        principal: q.principal.map(PrincipalId),
        adapter: q.adapter,
        outcome: q.outcome,
        run_id: q.run_id.map(RunId),
        call_id: q.call_id,
        trace_id: q.trace_id.map(trace_id).transpose()?,
        since: q.since,
        until: q.until,
        before_seq,
        after_seq: None,
    };
    // A page ends early when its rows hold much text (see `READ_BYTES`): the
    // cursor goes on from there.
    let page = app
        .store
        .list_audit(caller.auth.tenant, &filter, limit)
        .await?;
    let entries: Vec<AuditEntry> = page.items.into_iter().map(Into::into).collect();
    let next_cursor = page
        .more
        .then(|| entries.last().map(|e| e.seq.to_string()))
        .flatten();
    Ok(AppJson(AuditPage {
        entries,
        next_cursor,
    }))
}

/// A trace id as the audit stores it: 32 hex digits, lowercased.
fn trace_id(id: String) -> Result<String, ApiError> {
    if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(id.to_ascii_lowercase())
    } else {
        Err(ApiError::Malformed(
            "trace_id must be 32 hexadecimal digits".into(),
        ))
    }
}

/// The `seq` of the tenant's newest audit row (0 before its first): where a stream that
/// resumes nothing starts, and how long an intact chain is.
async fn newest_seq(app: &AppState, tenant: toolgate_core::TenantId) -> Result<i64, ApiError> {
    Ok(app
        .store
        .list_audit(tenant, &AuditFilter::default(), 1)
        .await?
        .items
        .first()
        .map_or(0, |row| row.seq))
}

/// How often the calls stream looks for new rows besides when this instance commits
/// some: rows another instance commits are not announced (see
/// `toolgate_store::Store::announce_local`), so on a shared store it looks every second.
const EVENTS_POLL: std::time::Duration = std::time::Duration::from_secs(1);
/// The same on a store no other instance writes to: only a missed wake-up waits for it.
const EVENTS_FALLBACK: std::time::Duration = std::time::Duration::from_secs(5);
/// Rows the calls stream reads per look.
const EVENTS_BATCH: i64 = 500;

/// Follow the tenant's calls as server-sent events: one `call` event per audit row as it
/// lands, on whichever instance ran the call, oldest first; `data` is the entry as in
/// `GET /v1/audit`, `id` its `seq`. A client that reconnects with `Last-Event-ID` gets
/// the rows it missed; otherwise the stream starts with the next call. For live views
/// (the console); needs `audit:read`.
#[utoipa::path(
    get,
    path = "/v1/audit/events",
    tag = "audit",
    params(("Last-Event-ID" = Option<i64>, Header, description = "The last `seq` received: rows after it come first")),
    responses(
        (status = 200, description = "An SSE stream of `call` events", content_type = "text/event-stream", body = String),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Bad Last-Event-ID"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks audit:read"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "Too many open streams, or your reads per minute are used up (`Retry-After`)"),
        crate::error::Refusals,
    )
)]
async fn audit_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    use axum::response::sse::{Event, KeepAlive, Sse};
    caller.require(scopes::AUDIT_READ)?;
    let resume = headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|seq| *seq >= 0)
                .ok_or_else(|| ApiError::Malformed("Last-Event-ID must be a row's seq".into()))
        })
        .transpose()?;
    let ticket = app
        .streams
        .admit(&caller.auth, toolgate_core::Adapter::Rest)?;
    let tenant = caller.auth.tenant;
    let last = match resume {
        Some(seq) => seq,
        None => newest_seq(&app, tenant).await?,
    };
    struct Follow {
        app: AppState,
        changes: toolgate_core::stores::Changes,
        look_every: std::time::Duration,
        last: i64,
        queue: std::collections::VecDeque<Event>,
    }
    let follow = Follow {
        changes: app.store.watch_changes().await?,
        look_every: if app.store.is_shared() {
            EVENTS_POLL
        } else {
            EVENTS_FALLBACK
        },
        app: app.clone(),
        last,
        queue: Default::default(),
    };
    let stream = futures::stream::unfold(follow, move |mut f| async move {
        loop {
            if let Some(event) = f.queue.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(event), f));
            }
            let filter = AuditFilter {
                after_seq: Some(f.last),
                ..AuditFilter::default()
            };
            let page = match f.app.store.list_audit(tenant, &filter, EVENTS_BATCH).await {
                Ok(page) => page,
                Err(err) => {
                    tracing::warn!(error = %err, "reading the audit log for a stream failed");
                    toolgate_store::Page::default()
                }
            };
            let full = page.more;
            for row in page.items {
                f.last = f.last.max(row.seq);
                let seq = row.seq;
                let data = serde_json::to_string(&AuditEntry::from(row)).unwrap_or_default();
                f.queue.push_back(
                    Event::default()
                        .id(seq.to_string())
                        .event("call")
                        .data(data),
                );
            }
            if full || !f.queue.is_empty() {
                continue;
            }
            tokio::select! {
                () = f.changes.until(|c| c == Change::Audit(tenant)) => {}
                () = tokio::time::sleep(f.look_every) => {}
                () = f.app.shutdown.cancelled() => return None,
            }
        }
    });
    let response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(std::time::Duration::from_secs(15)))
        .into_response();
    Ok(app.streams.follow(
        ticket,
        headers.get(axum::http::header::AUTHORIZATION).cloned(),
        response,
    ))
}

/// What `POST /v1/audit/verify` found.
#[derive(Debug, Serialize, ToSchema)]
pub struct Verification {
    /// The whole chain verifies: every row's hash, every link, the stored chain head and
    /// every checkpoint (and, when `signed_by` is set, each checkpoint's signature).
    pub verified: bool,
    /// Rows in the chain (its newest `seq`).
    pub rows: i64,
    /// The id of the deployment key the checkpoints' signatures were checked against;
    /// `null` when this instance does not hold it (signatures then are not checked).
    pub signed_by: Option<String>,
    /// The ids of keys the deployment signed with before (`audit.previous_public_keys`),
    /// whose signatures were accepted too.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub previous_keys: Vec<String>,
    /// The first break, when the chain does not verify.
    pub problem: Option<ChainProblem>,
    /// The last row pruned (`toolgate audit prune`): the chain is verified from the
    /// signed checkpoint there; `null` when nothing was pruned.
    pub pruned_through: Option<i64>,
    /// When rows were last pruned.
    pub pruned_at: Option<DateTime<Utc>>,
}

/// Where a chain first fails verification.
#[derive(Debug, Serialize, ToSchema)]
pub struct ChainProblem {
    /// `altered`, `relinked`, `gap`, `truncated`, `rewritten` or `forged`.
    pub kind: String,
    /// The first row concerned.
    pub seq: i64,
    pub message: String,
}

/// Verify the caller's tenant's audit chain now, as `toolgate audit verify` does (needs
/// `audit:read`). Reads the whole kept chain, a piece at a time: its time grows with the
/// chain's length, its memory does not. One at a time per tenant on an instance: another
/// asked meanwhile is refused (429, `Retry-After`). For an off-host check, use the
/// command with exported checkpoints.
#[utoipa::path(
    post,
    path = "/v1/audit/verify",
    tag = "audit",
    responses(
        (status = 200, body = Verification, description = "The result, broken or not"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks audit:read"),
        (status = 429, body = Problem, content_type = "application/problem+json", description = "The tenant's log is being verified on this instance already"),
        crate::error::Refusals,
    )
)]
async fn verify_audit(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<Verification>, ApiError> {
    caller.require(scopes::AUDIT_READ)?;
    let tenant = caller.auth.tenant;
    let _verifying = Verifying::begin(&app, tenant)?;
    let broken = app.store.verify_audit(tenant, &app.audit_keys, &[]).await?;
    let base = app.store.audit_base(tenant).await?;
    // Every row may have been pruned: the base's is then the newest.
    let rows = newest_seq(&app, tenant)
        .await?
        .max(base.as_ref().map_or(0, |b| b.seq));
    Ok(AppJson(Verification {
        verified: broken.is_none(),
        rows,
        signed_by: app
            .audit_keys
            .first()
            .map(toolgate_store::checkpoint::key_id),
        previous_keys: app
            .audit_keys
            .iter()
            .skip(1)
            .map(toolgate_store::checkpoint::key_id)
            .collect(),
        problem: broken.map(|b| ChainProblem {
            kind: b.kind().to_owned(),
            seq: b.seq(),
            message: b.to_string(),
        }),
        pruned_through: base.as_ref().map(|b| b.seq),
        pruned_at: base.map(|b| b.pruned_at),
    }))
}

/// How long a verification refused while another runs asks its caller to wait.
const VERIFY_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// A tenant's verification running on this instance: one at a time per tenant. Each reads
/// and hashes the tenant's whole kept chain (seconds of a core for a long log), so
/// concurrent ones by one tenant would only take the instance's cores from the others
/// to compute the same answer.
struct Verifying {
    app: AppState,
    tenant: toolgate_core::TenantId,
}

impl Verifying {
    fn begin(app: &AppState, tenant: toolgate_core::TenantId) -> Result<Self, ApiError> {
        let mut verifying = app.verifying.lock().unwrap_or_else(|p| p.into_inner());
        if verifying.try_add(tenant, 1).is_err() {
            drop(verifying);
            app.executor.metrics().rejected(
                tenant,
                toolgate_core::limits::Limit::Verifications,
                toolgate_core::Adapter::Rest,
            );
            return Err(ApiError::Tool(
                toolgate_core::ToolError::new(
                    toolgate_core::ErrorKind::RateLimited,
                    "your tenant's audit log is being verified on this instance already",
                )
                .with_retry_after(VERIFY_RETRY_AFTER, false)
                .with_suggestion("ask again once that verification has answered"),
            ));
        }
        Ok(Self {
            app: app.clone(),
            tenant,
        })
    }
}

impl Drop for Verifying {
    fn drop(&mut self) {
        let mut verifying = self.app.verifying.lock().unwrap_or_else(|p| p.into_inner());
        verifying.release(&self.tenant);
    }
}
