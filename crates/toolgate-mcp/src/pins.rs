//! Tool pinning, the store's side of [`crate::vetting`]: definitions pinned in the store
//! (through core's [`PinStore`] seam), changes and findings recorded, approvals applied.
//!
//! The first definition seen of an upstream tool is pinned (unless its description
//! reads as written at the model and the mode quarantines). A later definition with
//! another hash is, by the mode — the operator's setting for their upstreams, the
//! tenant's policy `pin` for its own —: `off`, taken silently; `warn`, taken and
//! recorded; `quarantine`, recorded and withheld (not offered) until a person approves
//! it. Recorded means the `definition.*` event and, for a tenant's upstream, an audit
//! row of adapter `definition` in that tenant's chain holding the diff (the operator's
//! upstreams belong to no tenant's chain: their changes are events only). When the store
//! cannot be read, a quarantining upstream's tools are withheld (failing closed) and a
//! warning one's offered.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{Value, json};
use toolgate_core::audit::{AuditRecord, AuditSink};
use toolgate_core::stores::{Change, Changes, PinHashes, PinRecord, PinStore};
use toolgate_core::{
    Adapter, Approvals, AuthContext, CallContext, DefinitionEvent, ErrorKind, Event, Executor,
    Outcome, Owner, TenantId,
};
use uuid::Uuid;

use crate::vetting::{Listed, PinMode, Verdict, Vet, diff};

/// The owner column of the operator's upstreams' pins.
pub const OPERATOR: Uuid = Uuid::nil();

/// The most pins kept of one upstream: two full listings (`MAX_LISTED`). Past it, a tool
/// not pinned before is not pinned, and (quarantining) not offered: an upstream naming
/// new tools at every listing would otherwise fill the store, a row per name, for as long
/// as it is configured. Pins of tools an upstream no longer lists are kept (forgetting
/// one would let the tool come back changed as if first seen); deleting the upstream
/// forgets them all. Instances listing the same upstream at once may each take the room
/// left, so the bound holds to one listing per such instance.
pub const MAX_PINS: usize = 2 * crate::upstream::pages::MAX_LISTED;

/// Changes recorded at once (events and audit rows) after a listing.
const RECORDED_AT_ONCE: usize = 16;

/// Pins definitions in the store, records what changed, and applies approvals.
pub struct Pins<S> {
    store: S,
    audit: Arc<dyn AuditSink>,
    executor: Executor,
    /// Where tenants' policies (their `pin` mode) are read.
    policies: Arc<dyn Approvals>,
    approved: tokio::sync::watch::Sender<u64>,
}

impl<S: PinStore> Pins<S> {
    pub fn new(
        store: S,
        audit: Arc<dyn AuditSink>,
        executor: Executor,
        policies: Arc<dyn Approvals>,
    ) -> Self {
        Self {
            store,
            audit,
            executor,
            policies,
            approved: tokio::sync::watch::channel(0).0,
        }
    }

    async fn mode(&self, owner: Owner, configured: Option<PinMode>) -> PinMode {
        match (configured, owner) {
            (Some(mode), _) => mode,
            (None, Owner::Tenant(tenant)) => match self.policies.policy(tenant).await {
                Ok(policy) => policy.pin,
                Err(_) => PinMode::Quarantine,
            },
            (None, Owner::Everyone) => PinMode::Warn,
        }
    }

    /// The event and the audit rows of what happened to a definition: a tenant's
    /// upstream's change is recorded in that tenant's chain, the operator's in every
    /// tenant's (all of them are offered its tools). `by` approved it (else the gateway
    /// noticed it).
    async fn record(
        &self,
        pin: &PinRecord,
        what: DefinitionEvent,
        withheld: bool,
        details: Value,
        by: Option<&Arc<AuthContext>>,
    ) {
        let tenant = (pin.owner != OPERATOR).then_some(TenantId(pin.owner));
        let hash = pin
            .pending_hash
            .as_deref()
            .or(pin.pinned_hash.as_deref())
            .unwrap_or_default();
        self.executor.events().emit(&Event::Definition {
            tenant,
            upstream: &pin.upstream,
            tool: &pin.exported,
            hash,
            what,
            withheld,
        });
        let chains = match tenant {
            Some(tenant) => vec![tenant],
            None => match self.store.tenant_ids().await {
                Ok(tenants) => tenants,
                Err(err) => {
                    tracing::error!(error = %err, upstream = %pin.upstream, tool = %pin.exported, "the tenants could not be read: an operator upstream's tool definition change is not audited");
                    return;
                }
            },
        };
        let mut arguments = json!({
            "upstream": pin.upstream,
            "tool": pin.tool,
            "event": match what {
                DefinitionEvent::Changed => "changed",
                DefinitionEvent::Flagged => "flagged",
                DefinitionEvent::Approved => "approved",
            },
            "hash": hash,
        });
        if let (Some(map), Value::Object(extra)) = (arguments.as_object_mut(), details) {
            map.extend(extra);
        }
        let (outcome, note) = if withheld {
            let who = if tenant.is_some() {
                "a tenant admin"
            } else {
                "the operator"
            };
            (
                Outcome::Error(ErrorKind::ApprovalRequired),
                Some(format!("withheld until {who} approves the new definition")),
            )
        } else {
            (Outcome::Ok, None)
        };
        // Handed to the writer together, so one commit takes every tenant's row (one
        // after another, an operator upstream's change would wait a commit per tenant).
        let recorded = chains.into_iter().map(|chain| {
            let ctx = CallContext::new(AuthContext::recording_in(chain, by), Adapter::Definition);
            // A definition's change holds no secret: its plain hash names it.
            let hash = toolgate_core::audit::hash_json(&arguments);
            let record = AuditRecord::start(&ctx, &pin.exported, arguments.clone(), hash);
            self.audit
                .record(record.finish(outcome, note.clone(), Duration::ZERO))
        });
        for result in futures::future::join_all(recorded).await {
            if let Err(err) = result {
                tracing::error!(error = %err, upstream = %pin.upstream, tool = %pin.exported, "a tool definition change could not be audited");
            }
        }
    }

    /// A person approves the pending definition hashing to `hash` of `tool` of
    /// `upstream` (owned by `owner`): it becomes the pin, the change is recorded, and
    /// every supervisor lists its tools again. `None` when no such definition waits.
    pub async fn approve(
        &self,
        owner: Uuid,
        upstream: &str,
        tool: &str,
        hash: &str,
        by: &Arc<AuthContext>,
    ) -> Result<Option<PinRecord>, S::Error> {
        let Some(pin) = self
            .store
            .approve_tool_pin(owner, upstream, tool, hash, by.principal.id)
            .await?
        else {
            return Ok(None);
        };
        self.record(
            &pin,
            DefinitionEvent::Approved,
            false,
            json!({"approved_by": by.principal.id}),
            Some(by),
        )
        .await;
        self.approved.send_modify(|n| *n += 1);
        Ok(Some(pin))
    }
}

impl<S: PinStore> Pins<S> {
    /// Until `shutdown`: an approval made on another instance (the last approval's time
    /// moved) wakes this instance's supervisors to list again. It looks when the store
    /// announces an approval, and at least every `every` (an announcement missed).
    pub async fn follow(
        self: Arc<Self>,
        every: Duration,
        shutdown: tokio_util::sync::CancellationToken,
    ) {
        let mut changes = self.store.watch_changes().await.unwrap_or_else(|err| {
            tracing::warn!(error = %err, "cannot watch the store; reading tool definition approvals on a timer");
            Changes::silent()
        });
        let mut seen = self.store.last_pin_approval().await.ok().flatten();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = changes.until(|c| c == Change::PinApproved) => {}
                () = tokio::time::sleep(every) => {}
            }
            match self.store.last_pin_approval().await {
                Ok(last) if last != seen => {
                    seen = last;
                    self.approved.send_modify(|n| *n += 1);
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(error = %err, "could not read the last tool definition approval");
                }
            }
        }
    }
}

/// What vetting a listing decided for one definition it pins (the pin beside it).
struct Write {
    /// Its place in the listing.
    at: usize,
    verdict: Verdict,
    /// What to record once it is written: a change, or a suspicious first definition.
    recorded: Option<(DefinitionEvent, Value)>,
}

#[async_trait]
impl<S: PinStore> Vet for Pins<S> {
    async fn vet(&self, listed: &Listed, configured: Option<PinMode>) -> Vec<Verdict> {
        let n = listed.definitions.len();
        if n == 0 {
            return Vec::new();
        }
        let mode = self.mode(listed.owner, configured).await;
        if mode == PinMode::Off {
            return vec![Verdict::Offered; n];
        }
        let quarantine = mode == PinMode::Quarantine;
        let unpinned = if quarantine {
            Verdict::Withheld
        } else {
            Verdict::Offered
        };
        let owner = match listed.owner {
            Owner::Tenant(tenant) => tenant.0,
            Owner::Everyone => OPERATOR,
        };
        let upstream = &listed.upstream;
        let known: HashMap<String, PinHashes> = match self.store.pin_hashes(owner, upstream).await {
            Ok(known) => known.into_iter().map(|h| (h.tool.clone(), h)).collect(),
            Err(err) => {
                tracing::warn!(error = %err, upstream = %upstream, "could not read the upstream's pinned definitions");
                return vec![unpinned; n];
            }
        };
        // Room for this many more pins; a racing instance may take some of it too.
        let mut room = MAX_PINS.saturating_sub(known.len());
        let mut verdicts = vec![unpinned; n];
        // The pins to write, and beside each what it decided.
        let (mut pins, mut writes) = (Vec::new(), Vec::new());
        // New tools past the bound: logged once for the listing, not a line each.
        let mut crowded = 0;
        let now = chrono::Utc::now();
        for (at, definition) in listed.definitions.iter().enumerate() {
            let stored = match known.get(&definition.tool) {
                Some(k) if k.pinned_hash.as_deref() == Some(&definition.hash) => {
                    verdicts[at] = Verdict::Pinned;
                    continue;
                }
                // Waiting already: recorded when it first came.
                Some(k) if k.pending_hash.as_deref() == Some(&definition.hash) && quarantine => {
                    verdicts[at] = Verdict::Withheld;
                    continue;
                }
                // Changed: the whole pin, for the diff (rare, unlike the hashes).
                Some(_) => match self.store.tool_pin(owner, upstream, &definition.tool).await {
                    Ok(stored) => stored,
                    Err(err) => {
                        tracing::warn!(error = %err, upstream = %upstream, tool = %definition.exported, "could not read a tool's pinned definition");
                        continue;
                    }
                },
                None if room == 0 => {
                    crowded += 1;
                    verdicts[at] = if quarantine {
                        Verdict::Crowded
                    } else {
                        Verdict::Offered
                    };
                    continue;
                }
                None => {
                    room -= 1;
                    None
                }
            };
            let mut pin = stored.unwrap_or_else(|| PinRecord {
                owner,
                upstream: upstream.clone(),
                tool: definition.tool.clone(),
                exported: definition.exported.clone(),
                pinned_hash: None,
                pinned: None,
                pending_hash: None,
                pending: None,
                findings: Vec::new(),
                updated_at: now,
                approved_by: None,
                approved_at: None,
            });
            let first = pin.pinned_hash.is_none() && pin.pending_hash.is_none();
            let flagged = !definition.findings.is_empty();
            // Seen for the first time and unremarkable: pinned, nothing to tell.
            let withhold = quarantine && (!first || flagged);
            let recorded = (!first || flagged).then(|| {
                let what = if first {
                    DefinitionEvent::Flagged
                } else {
                    DefinitionEvent::Changed
                };
                let details = json!({
                    "previous_hash": pin.pinned_hash,
                    "diff": diff(pin.pinned.as_ref().unwrap_or(&Value::Null), &definition.definition),
                    "findings": definition.findings,
                    "mode": mode.as_str(),
                });
                (what, details)
            });
            pin.exported.clone_from(&definition.exported);
            pin.findings.clone_from(&definition.findings);
            pin.updated_at = now;
            if withhold {
                pin.pending_hash = Some(definition.hash.clone());
                pin.pending = Some(definition.definition.clone());
            } else {
                pin.pinned_hash = Some(definition.hash.clone());
                pin.pinned = Some(definition.definition.clone());
                pin.pending_hash = None;
                pin.pending = None;
            }
            let verdict = if withhold {
                Verdict::Withheld
            } else {
                Verdict::Pinned
            };
            pins.push(pin);
            writes.push(Write {
                at,
                verdict,
                recorded,
            });
        }
        if crowded > 0 {
            tracing::warn!(upstream = %upstream, tools = crowded, pins = MAX_PINS, "new upstream tools are not pinned: their upstream holds as many pins as are kept");
        }
        if let Err(err) = self.store.save_tool_pins(&pins).await {
            tracing::warn!(error = %err, upstream = %upstream, pins = pins.len(), "could not pin the upstream's tool definitions");
            return verdicts;
        }
        for write in &writes {
            verdicts[write.at] = write.verdict;
        }
        // Recorded a few at a time: a listing may change thousands.
        futures::stream::iter(pins.into_iter().zip(writes).filter_map(|(pin, w)| {
            let withheld = w.verdict == Verdict::Withheld;
            w.recorded
                .map(move |(what, details)| (pin, what, withheld, details))
        }))
        .for_each_concurrent(
            RECORDED_AT_ONCE,
            |(pin, what, withheld, details)| async move {
                self.record(&pin, what, withheld, details, None).await;
            },
        )
        .await;
        verdicts
    }

    fn approvals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.approved.subscribe()
    }
}
