//! Keeping this instance's runs alive and taking over the rest: leases renewed, cancel
//! requests and lapsed credentials passed on, approvals expired, and runs whose
//! instance stopped (or that a decision lets go on) claimed and driven on here.

use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use toolgate_core::stores::{RunFinish, RunRecord};
use toolgate_core::{AuthContext, Event, RunId, TenantId};
use uuid::Uuid;

use crate::{AgentConfig, RunEvent, RunState, RunStatus};

use super::journal::StoreJournal;
use super::{Error, LEASE, ORPHAN_BATCH, ORPHAN_SCAN_EVERY, RENEW_EVERY, Runs, Stop, Store};
use crate::Journal;

impl<S: Store> Runs<S> {
    /// Takes over the runs a stopped gateway left. Call before serving: on SQLite every
    /// running run counts, and a run this instance started would be driven twice.
    pub async fn adopt_orphans(self: &Arc<Self>) {
        // An SQLite file has one gateway: at start-up every running run is an orphan,
        // even one whose lease has not run out (its gateway was killed).
        let startup_cutoff = if self.store.is_shared() {
            self.clock.now()
        } else {
            self.clock.now() + LEASE + chrono::Duration::seconds(1)
        };
        self.claim_orphans(startup_cutoff).await;
    }

    /// Renews leases, passes on cancel requests and takes over orphaned runs until
    /// `shutdown`; then stops this instance's drivers and frees their runs at once for
    /// the next instance. Start it after [`adopt_orphans`](Self::adopt_orphans).
    pub async fn supervise(self: Arc<Self>, shutdown: CancellationToken) {
        let mut renew = tokio::time::interval(RENEW_EVERY);
        let mut scan = tokio::time::interval(ORPHAN_SCAN_EVERY);
        renew.tick().await;
        scan.tick().await;
        loop {
            tokio::select! {
                _ = renew.tick() => {
                    self.renew().await;
                    self.cancel_lapsed().await;
                }
                _ = scan.tick() => {
                    self.expire_approvals().await;
                    self.claim_orphans(self.clock.now()).await;
                }
                () = shutdown.cancelled() => break,
            }
        }
        let runs: Vec<RunId> = {
            let active = self.lock_active();
            for a in active.values() {
                a.task.abort();
            }
            active.keys().copied().collect()
        };
        if !runs.is_empty() {
            // An expired lease: the next instance to look takes them over.
            let past = self.clock.now() - chrono::Duration::seconds(1);
            match self
                .store
                .renew_run_leases(&self.instance, &runs, past)
                .await
            {
                Ok(_) => tracing::info!(
                    runs = runs.len(),
                    "released running agent runs for another instance"
                ),
                Err(err) => {
                    tracing::warn!(error = %err, "could not release run leases; they expire on their own")
                }
            }
        }
    }

    async fn renew(&self) {
        let runs: Vec<RunId> = self.lock_active().keys().copied().collect();
        if runs.is_empty() {
            return;
        }
        match self
            .store
            .renew_run_leases(&self.instance, &runs, self.clock.now() + LEASE)
            .await
        {
            Ok(cancelled) => {
                let active = self.lock_active();
                for run in cancelled {
                    if let Some(a) = active.get(&run) {
                        a.stop.cancel.cancel();
                    }
                }
            }
            Err(err) => tracing::warn!(error = %err, "could not renew run leases"),
        }
    }

    /// Cancels the runs driven here whose credential no longer stands (its API key was
    /// revoked): one check per key.
    async fn cancel_lapsed(self: &Arc<Self>) {
        if self.standing.get().is_none() {
            return;
        }
        let owners: Vec<(RunId, Uuid, Arc<AuthContext>)> = self
            .lock_active()
            .iter()
            .filter_map(|(run, a)| Some((*run, a.auth.key?, a.auth.clone())))
            .collect();
        let mut verdicts: HashMap<Uuid, Option<String>> = HashMap::new();
        for (run, key, auth) in owners {
            let lapsed = match verdicts.get(&key) {
                Some(verdict) => verdict.clone(),
                None => {
                    let verdict = self.lapsed(&auth).await;
                    verdicts.insert(key, verdict.clone());
                    verdict
                }
            };
            if let Some(reason) = lapsed {
                self.stop_lapsed(auth.tenant, run, reason).await;
            }
        }
    }

    /// Stops `run`, driven here, because its credential no longer stands: the approvals
    /// it waits for expire, and it ends cancelled, saying why.
    async fn stop_lapsed(self: &Arc<Self>, tenant: TenantId, run: RunId, reason: String) {
        tracing::info!(run_id = %run, reason = %reason, "cancelling an agent run whose credential no longer stands");
        if let Err(err) = self.expire_approvals_of(tenant, run, &reason).await {
            tracing::warn!(run_id = %run, error = %err, "could not expire the approvals of a run being cancelled");
        }
        if let Some(active) = self.lock_active().get(&run) {
            active.stop.because(reason);
        }
    }

    /// Expires what `run` waits for or has yet to use, with `reason`, and says so.
    pub(super) async fn expire_approvals_of(
        &self,
        tenant: TenantId,
        run: RunId,
        reason: &str,
    ) -> Result<(), Error<S>> {
        for approval in self.store.expire_run_approvals(tenant, run, reason).await? {
            self.executor.events().emit(&Event::ApprovalExpired {
                tenant,
                approval,
                run: Some(run),
            });
        }
        Ok(())
    }

    /// Marks approvals past their time expired (= denied); runs waiting on them are
    /// taken over by the next claim.
    async fn expire_approvals(&self) {
        match self.store.expire_approvals().await {
            Ok(expired) => {
                for (tenant, approval) in expired {
                    self.executor.events().emit(&Event::ApprovalExpired {
                        tenant,
                        approval,
                        run: None,
                    });
                }
            }
            Err(err) => tracing::warn!(error = %err, "could not expire approvals"),
        }
    }

    /// Takes over, at once, runs that can go on after a decision (on this instance,
    /// whichever instance paused them).
    pub async fn resume_decided(self: &Arc<Self>) {
        self.claim_orphans(self.clock.now()).await;
    }

    async fn claim_orphans(self: &Arc<Self>, expired_before: chrono::DateTime<chrono::Utc>) {
        let claimed = match self
            .store
            .claim_orphaned_runs(
                &self.instance,
                self.clock.now() + LEASE,
                ORPHAN_BATCH,
                expired_before,
            )
            .await
        {
            Ok(claimed) => claimed,
            Err(err) => {
                tracing::warn!(error = %err, "could not look for orphaned runs");
                return;
            }
        };
        for record in claimed {
            let run = record.id;
            if let Err(reason) = self.resume(record).await {
                tracing::warn!(run_id = %run, reason = %reason, "an interrupted run could not be resumed");
            }
        }
    }

    /// Drives a run another instance left, from its journal; a run that cannot go on is
    /// marked failed with the reason, never left dangling.
    async fn resume(self: &Arc<Self>, record: RunRecord) -> Result<(), String> {
        let events = self
            .store
            .run_events(record.tenant, record.id, 0)
            .await
            .map_err(|e| e.to_string())?;
        let next_seq = events.last().map_or(1, |e| e.seq + 1);
        let parsed: Result<Vec<RunEvent>, _> = events
            .iter()
            .map(|e| serde_json::from_value::<RunEvent>(e.payload.clone()))
            .collect();
        let setup = (|| {
            let events = parsed.map_err(|e| format!("its journal cannot be read: {e}"))?;
            let auth = record.auth.clone();
            let agent: AgentConfig = serde_json::from_value(record.agent_config.clone())
                .map_err(|e| format!("its agent configuration cannot be read: {e}"))?;
            let provider = self.provider(&agent).map_err(|e| e.to_string())?;
            let toolset = agent.toolset()?;
            Ok::<_, String>((events, auth, agent, provider, toolset))
        })();
        match setup {
            Ok((events, auth, agent, provider, toolset)) => {
                let state = RunState::fold(&events);
                let lapsed = self.lapsed(&auth).await;
                // Stopped before its task starts: a held call is not made again first.
                let stop = Stop::default();
                match &lapsed {
                    Some(reason) => stop.because(reason.clone()),
                    // Cancelled while it waited for approval (or between renewals).
                    None if record.cancel_requested => stop.cancel.cancel(),
                    None => {}
                }
                tracing::info!(run_id = %record.id, next_seq, "resuming an interrupted agent run");
                self.spawn(
                    record.id,
                    self.driven.count(record.tenant),
                    Arc::new(auth),
                    toolset,
                    agent,
                    provider,
                    state,
                    next_seq,
                    None,
                    stop,
                );
                if let Some(reason) = lapsed {
                    self.stop_lapsed(record.tenant, record.id, reason).await;
                }
                Ok(())
            }
            Err(reason) => {
                let event = RunEvent::RunFinished(RunFinish {
                    status: RunStatus::Failed,
                    output: None,
                    best_effort: false,
                    usage: Default::default(),
                    error: Some(format!("interrupted and not resumable: {reason}")),
                });
                let journal = StoreJournal::new(self.clone(), record.tenant, record.id, next_seq);
                journal.append(&event, true).await?;
                Err(reason)
            }
        }
    }
}
