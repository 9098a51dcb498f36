//! The audit log's integrity over time: verifying a tenant's chain against its head,
//! checkpoints and signing keys (in pieces, never the whole chain in memory), signing
//! checkpoints, and retention (pruning rows up to a signed base, and the rest of the
//! past: finished runs, failed-authentication records).

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use toolgate_core::TenantId;

use crate::batches::{BATCH, in_batches};
use crate::model::{AuditBase, AuditRow, ChainBreak, Page, Pruned, PrunedHistory};
use crate::{Store, StoreError, chain, checkpoint};

impl Store {
    /// A tenant's kept chain in order: every row after its base (all of them when
    /// nothing was pruned).
    pub async fn audit_chain(&self, tenant: TenantId) -> Result<Vec<AuditRow>, StoreError> {
        let mut after = self.audit_base(tenant).await?.map_or(0, |b| b.seq);
        let mut chain = Vec::new();
        loop {
            let page = dispatch!(self, s => s.audit_chain(tenant, after, i64::MAX).await)?;
            after = page.items.last().map_or(after, |row| row.seq);
            chain.extend(page.items);
            if !page.more {
                return Ok(chain);
            }
        }
    }

    /// A tenant's stored chain head (its newest row's seq and hash), `None` before its
    /// first row.
    pub async fn audit_head(&self, tenant: TenantId) -> Result<Option<(i64, String)>, StoreError> {
        dispatch!(self, s => s.audit_head(tenant).await)
    }

    /// Where a tenant's kept chain starts, when rows were pruned.
    pub async fn audit_base(&self, tenant: TenantId) -> Result<Option<AuditBase>, StoreError> {
        dispatch!(self, s => s.audit_base(tenant).await)
    }

    /// Walks a tenant's chain, then checks that it reaches the stored chain head; the
    /// first break, if any. (See [`Store::verify_audit`] for checkpoints too.)
    pub async fn verify_chain(&self, tenant: TenantId) -> Result<Option<ChainBreak>, StoreError> {
        self.verify_audit(tenant, &[], &[]).await
    }

    /// [`Store::verify_chain`], and every checkpoint — the stored ones and `exported`
    /// (kept off the host) — must name a row that is there with its hash; with `keys`
    /// (the deployment's key, and those it replaced), each must also carry a valid
    /// signature by one of them. A pruned chain is verified from its base, a signed
    /// checkpoint: checkpoints below it name rows that are gone, and only their
    /// signatures are checked.
    pub async fn verify_audit(
        &self,
        tenant: TenantId,
        keys: &[ed25519_dalek::VerifyingKey],
        exported: &[checkpoint::Checkpoint],
    ) -> Result<Option<ChainBreak>, StoreError> {
        // A prune moving the base meanwhile removes rows this read expected: a break
        // found while the base moved is looked at again from the new base.
        let mut base = self.audit_base(tenant).await?;
        let mut reads = 0;
        loop {
            let broken = self
                .verify_from_base(tenant, base.as_ref(), keys, exported)
                .await?;
            reads += 1;
            if broken.is_none() || reads == 3 {
                return Ok(broken);
            }
            let now = self.audit_base(tenant).await?;
            if now == base {
                return Ok(broken);
            }
            base = now;
        }
    }

    async fn verify_from_base(
        &self,
        tenant: TenantId,
        base: Option<&AuditBase>,
        keys: &[ed25519_dalek::VerifyingKey],
        exported: &[checkpoint::Checkpoint],
    ) -> Result<Option<ChainBreak>, StoreError> {
        let (after, anchor) = base.map_or((0, chain::GENESIS), |b| (b.seq, b.row_hash.as_str()));
        // The newest checkpoint and the head first: rows appended meanwhile (a live
        // gateway) only lengthen the chain read after them, and checkpoints signed
        // meanwhile (past the newest) are not this verification's.
        let newest = dispatch!(self, s => s.newest_checkpoint(tenant).await)?;
        let head = self.audit_head(tenant).await?;
        let exported: Vec<&checkpoint::Checkpoint> =
            exported.iter().filter(|c| c.tenant == tenant).collect();
        // The chain is read in pieces and checked as it comes, keeping only the hashes
        // of the rows the head and the exported checkpoints name: a long chain is never
        // held whole (it was, and a tenant's verify could take the gateway's memory).
        let mut named: HashMap<i64, Option<String>> = head
            .iter()
            .map(|(seq, _)| *seq)
            .chain(exported.iter().map(|c| c.seq))
            .filter(|&seq| seq > after)
            .map(|seq| (seq, None))
            .collect();
        let mut walk = chain::Walk::from(after, anchor);
        loop {
            let page =
                dispatch!(self, s => s.audit_chain(tenant, walk.last(), VERIFY_BATCH).await)?;
            for row in &page.items {
                if let Some(broken) = walk.step(row) {
                    return Ok(Some(broken));
                }
                if let Some(hash) = named.get_mut(&row.seq) {
                    *hash = Some(row.row_hash.clone());
                }
            }
            if !page.more {
                break;
            }
        }
        let last_seq = walk.last();
        // Where the chain must reach, with the hash it must have there (below the base:
        // pruned, nothing to compare). `row`: the hash the walk found there.
        let compare = |seq: i64, hash: &str, row: Option<&str>| {
            let found = match seq - after {
                ..0 => return None,
                0 => Some(anchor),
                _ => row,
            };
            match found {
                Some(h) if h == hash => None,
                Some(_) => Some(ChainBreak::Rewritten { seq }),
                None => Some(ChainBreak::Truncated {
                    recorded: seq,
                    found: last_seq,
                }),
            }
        };
        let check = |cp: &checkpoint::Checkpoint, row: Option<&str>| {
            if !keys.is_empty() && !keys.iter().any(|key| cp.is_signed_by(key)) {
                return Some(ChainBreak::Forged { seq: cp.seq });
            }
            compare(cp.seq, &cp.row_hash, row)
        };
        let walked = |seq: i64| named.get(&seq).and_then(Option::as_deref);
        if let Some((seq, hash)) = &head
            && let Some(broken) = compare(*seq, hash, walked(*seq))
        {
            return Ok(Some(broken));
        }
        // The stored checkpoints a part at a time, each with its row's hash as stored now
        // (the walk above proved those rows): a year of one checkpoint a minute is half a
        // million, and they were read whole.
        let (mut from, until) = (0, newest.unwrap_or(0));
        loop {
            let part = dispatch!(self, s => s.checkpoints_with_rows(tenant, from, until, CHECKPOINTS_PER_READ).await)?;
            for (cp, row) in &part.items {
                // A row past the walk's end was appended after it: the walk's view is
                // what is compared, as for the head.
                let row = row.as_deref().filter(|_| cp.seq <= last_seq);
                if let Some(broken) = check(cp, row) {
                    return Ok(Some(broken));
                }
                from = cp.seq;
            }
            if !part.more {
                break;
            }
        }
        for cp in exported {
            if let Some(broken) = check(cp, walked(cp.seq)) {
                return Ok(Some(broken));
            }
        }
        Ok(None)
    }

    /// Removes `tenant`'s rows up to its newest checkpoint signed before `before`, once
    /// the whole chain verifies against `keys` (a chain that does not is left whole: its
    /// rows could be the evidence). The checkpoint becomes the tenant's base, recorded
    /// for good; rows go in batches, then the checkpoints below the base (they sign rows
    /// that are gone), and what a stopped prune left below the base goes on the next one.
    /// A prune running beside it is no error: one of them moves the base. Deleting needs
    /// the connecting role on Postgres, as migrating does.
    pub async fn prune_audit(
        &self,
        tenant: TenantId,
        before: DateTime<Utc>,
        keys: &[ed25519_dalek::VerifyingKey],
    ) -> Result<Pruned, StoreError> {
        let current = self.audit_base(tenant).await?.map(|b| b.seq);
        let target = dispatch!(self, s => s.checkpoint_before(tenant, before).await)?
            .filter(|&seq| current.is_none_or(|base| seq > base));
        if target.is_some()
            && let Some(broken) = self.verify_audit(tenant, keys, &[]).await?
        {
            return Ok(Pruned {
                base: current,
                refused: Some(broken),
                ..Pruned::default()
            });
        }
        let moved = match target {
            Some(seq) => dispatch!(self, s => s.move_audit_base(tenant, seq).await)?,
            None => false,
        };
        // Moved by this prune, or by whichever moved it meanwhile.
        let base = match (moved, target) {
            (true, _) => target,
            (false, Some(_)) => self.audit_base(tenant).await?.map(|b| b.seq),
            (false, None) => current,
        };
        let Some(through) = base else {
            return Ok(Pruned::default());
        };
        let deleted = in_batches(|| async move {
            dispatch!(self, s => s.delete_pruned(tenant, through, BATCH).await)
        })
        .await?;
        let checkpoints = in_batches(|| async move {
            dispatch!(self, s => s.delete_pruned_checkpoints(tenant, through, BATCH).await)
        })
        .await?;
        Ok(Pruned {
            base,
            moved,
            deleted,
            checkpoints,
            refused: None,
        })
    }

    /// Signs and stores a checkpoint of every tenant's chain head that moved since its
    /// last one; returns how many were written. Cheap when nothing moved.
    pub async fn write_checkpoints(
        &self,
        signer: &checkpoint::AuditSigner,
    ) -> Result<usize, StoreError> {
        let heads = dispatch!(self, s => s.unsigned_heads().await)?;
        for (tenant, seq, hash) in &heads {
            let cp = signer.sign(*tenant, *seq, hash);
            dispatch!(self, s => s.insert_checkpoint(&cp).await)?;
        }
        Ok(heads.len())
    }

    /// A tenant's stored checkpoints after `after_seq`, in chain order (for export): at
    /// most `limit`, and [`Page::more`] when the next read has more.
    pub async fn checkpoints(
        &self,
        tenant: TenantId,
        after_seq: i64,
        limit: i64,
    ) -> Result<Page<checkpoint::Checkpoint>, StoreError> {
        dispatch!(self, s => s.checkpoints(tenant, after_seq, limit).await)
    }

    /// Deletes the rest of the past the store keeps from before `before`: runs that
    /// finished (with their event journals), failed-authentication records, and
    /// approvals settled before it (decided, used or expired) that no kept audit row
    /// names (run after the tenants' audit prunes, so those go with the rows that named
    /// them). Runs still going or waiting for approval stay, as do pending approvals.
    /// MCP sessions and their events expire on their own.
    pub async fn prune_history(&self, before: DateTime<Utc>) -> Result<PrunedHistory, StoreError> {
        let runs = in_batches(|| async move {
            dispatch!(self, s => s.delete_finished_runs(before, BATCH).await)
        })
        .await?;
        let security_events = in_batches(|| async move {
            dispatch!(self, s => s.delete_security_events(before, BATCH).await)
        })
        .await?;
        let approvals = in_batches(|| async move {
            dispatch!(self, s => s.delete_settled_approvals(before, BATCH).await)
        })
        .await?;
        Ok(PrunedHistory {
            runs,
            security_events,
            approvals,
        })
    }
}

/// Rows a verification reads at a time.
const VERIFY_BATCH: i64 = 5_000;
/// Stored checkpoints one read of a verification takes.
const CHECKPOINTS_PER_READ: i64 = 1_000;
