//! The per-tenant hash chain over audit rows, and canonical JSON for hashing.
//!
//! `row_hash = sha256(canonical JSON of the row's fields, including prev_hash)`; the first
//! row of a tenant has `prev_hash` = 64 zeros. Verification recomputes every hash in
//! sequence order and names the first row that does not match.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::model::{AuditRow, ChainBreak};

/// `prev_hash` of a tenant's first row.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The one canonical JSON text (core's), re-exported where the chain uses it.
pub use toolgate_core::audit::canonical_json;

#[derive(Serialize)]
struct Hashed<'a> {
    call_id: String,
    tenant: String,
    seq: i64,
    principal: String,
    adapter: &'a str,
    tool: &'a str,
    arguments: &'a str,
    arguments_hash: &'a str,
    outcome: &'a str,
    error: Option<&'a str>,
    duration_us: i64,
    request_id: Option<&'a str>,
    trace_id: Option<&'a str>,
    run_id: Option<String>,
    step: Option<i32>,
    client: Option<&'a str>,
    /// Absent from rows without one, so rows written before the column existed keep
    /// their hashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_id: Option<String>,
    /// Likewise absent from rows of tools that are not cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    cache: Option<&'a str>,
    started_at_us: i64,
    finished_at_us: i64,
    prev_hash: &'a str,
}

/// The hash `row` should carry, given its `prev_hash`.
pub fn row_hash(row: &AuditRow) -> String {
    let hashed = Hashed {
        call_id: row.call_id.to_string(),
        tenant: row.tenant.to_string(),
        seq: row.seq,
        principal: row.principal.to_string(),
        adapter: &row.adapter,
        tool: &row.tool,
        arguments: &row.arguments,
        arguments_hash: &row.arguments_hash,
        outcome: &row.outcome,
        error: row.error.as_deref(),
        duration_us: row.duration_us,
        request_id: row.request_id.as_deref(),
        trace_id: row.trace_id.as_deref(),
        run_id: row.run_id.map(|r| r.to_string()),
        step: row.step,
        client: row.client.as_deref(),
        approval_id: row.approval_id.map(|a| a.to_string()),
        cache: row.cache.as_deref(),
        started_at_us: row.started_at.timestamp_micros(),
        finished_at_us: row.finished_at.timestamp_micros(),
        prev_hash: &row.prev_hash,
    };
    let text = serde_json::to_string(&hashed).unwrap_or_default();
    toolgate_core::to_hex(&Sha256::digest(text.as_bytes()))
}

/// Checks rows of one tenant given in `seq` order; the first break, if any.
pub fn verify<'a>(rows: impl IntoIterator<Item = &'a AuditRow>) -> Option<ChainBreak> {
    let mut prev = GENESIS.to_owned();
    for (expected_seq, row) in (1..).zip(rows) {
        if row.seq != expected_seq {
            return Some(ChainBreak::Gap {
                expected: expected_seq,
                found: row.seq,
            });
        }
        if row.prev_hash != prev {
            return Some(ChainBreak::Relinked {
                seq: row.seq,
                call_id: row.call_id,
            });
        }
        if row_hash(row) != row.row_hash {
            return Some(ChainBreak::Altered {
                seq: row.seq,
                call_id: row.call_id,
            });
        }
        prev = row.row_hash.clone();
    }
    None
}

/// The row a finished call becomes at position `seq` after `prev_hash`, hash included.
pub fn row_from_record(
    record: &toolgate_core::audit::AuditRecord,
    seq: i64,
    prev_hash: String,
) -> AuditRow {
    let micros = |t: std::time::SystemTime| {
        let dt: chrono::DateTime<chrono::Utc> = t.into();
        chrono::DateTime::from_timestamp_micros(dt.timestamp_micros()).unwrap_or(dt)
    };
    let mut row = AuditRow {
        call_id: record.call_id.0,
        tenant: record.tenant,
        seq,
        principal: record.principal,
        adapter: record.adapter.as_str().to_owned(),
        tool: record.tool.clone(),
        arguments: canonical_json(&record.arguments),
        arguments_hash: record.arguments_hash.clone(),
        outcome: record.outcome.as_str().to_owned(),
        error: record.error.clone(),
        duration_us: i64::try_from(record.duration.as_micros()).unwrap_or(i64::MAX),
        request_id: record.request_id.clone(),
        trace_id: record.trace_id.clone(),
        run_id: record.run.map(|r| r.run_id),
        step: record
            .run
            .map(|r| i32::try_from(r.step).unwrap_or(i32::MAX)),
        client: record.client.clone(),
        approval_id: record.approval.map(|a| a.0),
        cache: record.cache.map(|c| c.as_str().to_owned()),
        started_at: micros(record.started_at),
        finished_at: micros(record.finished_at),
        prev_hash,
        row_hash: String::new(),
    };
    row.row_hash = row_hash(&row);
    row
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"d": [ {"z": 1, "y": 2} ], "c": null}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":null,"d":[{"y":2,"z":1}]},"b":1}"#
        );
    }
}
