//! The per-tenant hash chain over audit rows, and canonical JSON for hashing.
//!
//! `row_hash = sha256(canonical JSON of the row's fields, including prev_hash)`; the first
//! row of a tenant has `prev_hash` = 64 zeros. Verification recomputes every hash in
//! sequence order and names the first row that does not match.

use serde::Serialize;
use uuid::Uuid;

use crate::model::{AuditRow, ChainBreak};

/// `prev_hash` of a tenant's first row.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The one canonical JSON text (core's), re-exported where the chain uses it.
pub use toolgate_core::audit::canonical_json;

/// The hashed fields. Ids serialize as the hyphenated text their `to_string` gives,
/// without a string allocated for each (the text hashed is unchanged: see the test).
#[derive(Serialize)]
struct Hashed<'a> {
    call_id: Uuid,
    tenant: Uuid,
    seq: i64,
    principal: Uuid,
    adapter: &'a str,
    tool: &'a str,
    arguments: &'a str,
    arguments_hash: &'a str,
    outcome: &'a str,
    error: Option<&'a str>,
    duration_us: i64,
    request_id: Option<&'a str>,
    trace_id: Option<&'a str>,
    run_id: Option<Uuid>,
    step: Option<i32>,
    client: Option<&'a str>,
    /// Absent from rows without one, so rows written before the column existed keep
    /// their hashes.
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_id: Option<Uuid>,
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
        call_id: row.call_id,
        tenant: row.tenant.0,
        seq: row.seq,
        principal: row.principal.0,
        adapter: &row.adapter,
        tool: &row.tool,
        arguments: &row.arguments,
        arguments_hash: &row.arguments_hash,
        outcome: &row.outcome,
        error: row.error.as_deref(),
        duration_us: row.duration_us,
        request_id: row.request_id.as_deref(),
        trace_id: row.trace_id.as_deref(),
        run_id: row.run_id.map(|r| r.0),
        step: row.step,
        client: row.client.as_deref(),
        approval_id: row.approval_id,
        cache: row.cache.as_deref(),
        started_at_us: row.started_at.timestamp_micros(),
        finished_at_us: row.finished_at.timestamp_micros(),
        prev_hash: &row.prev_hash,
    };
    // Serialized whole, then hashed in one go. Serializing these fields cannot fail.
    let text = serde_json::to_vec(&hashed).unwrap_or_default();
    toolgate_core::sha256_hex(&text)
}

/// Checks rows of one tenant given in `seq` order; the first break, if any.
pub fn verify<'a>(rows: impl IntoIterator<Item = &'a AuditRow>) -> Option<ChainBreak> {
    let mut walk = Walk::from(0, GENESIS);
    rows.into_iter().find_map(|row| walk.step(row))
}

/// A chain checked row by row as it is read, in `seq` order: what a verification of a
/// long chain holds instead of the whole of it.
#[derive(Debug)]
pub struct Walk {
    last: i64,
    prev: String,
}

impl Walk {
    /// A walk starting after row `after`, whose hash is `anchor` (a pruned chain's base;
    /// 0 and [`GENESIS`] for a whole one).
    pub fn from(after: i64, anchor: &str) -> Self {
        Self {
            last: after,
            prev: anchor.to_owned(),
        }
    }

    /// The last row checked (`after` before the first).
    pub fn last(&self) -> i64 {
        self.last
    }

    /// Checks the next row; the break it shows, if any.
    pub fn step(&mut self, row: &AuditRow) -> Option<ChainBreak> {
        let expected = self.last + 1;
        if row.seq != expected {
            return Some(ChainBreak::Gap {
                expected,
                found: row.seq,
            });
        }
        if row.prev_hash != self.prev {
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
        self.last = row.seq;
        self.prev.clone_from(&row.row_hash);
        None
    }
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
    // What a client sent (tool name, MCP client name) or a tool said (its error) is
    // stored and hashed with any NUL replaced (see `text::NUL_STANDIN`): a row that
    // cannot be stored must not exist.
    let clean = |s: &str| crate::text::without_nul(s).into_owned();
    let mut row = AuditRow {
        call_id: record.call_id.0,
        tenant: record.tenant,
        seq,
        principal: record.principal,
        adapter: record.adapter.as_str().to_owned(),
        tool: clean(&record.tool),
        arguments: canonical_json(&record.arguments),
        arguments_hash: record.arguments_hash.clone(),
        outcome: record.outcome.as_str().to_owned(),
        error: record.error.as_deref().map(clean),
        duration_us: i64::try_from(record.duration.as_micros()).unwrap_or(i64::MAX),
        request_id: record.request_id.as_deref().map(clean),
        trace_id: record.trace_id.as_deref().map(clean),
        run_id: record.run.map(|r| r.run_id),
        step: record
            .run
            .map(|r| i32::try_from(r.step).unwrap_or(i32::MAX)),
        client: record.client.as_deref().map(clean),
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

    /// A row as written by earlier releases keeps its hash: the hashed text must never
    /// change, or stored chains stop verifying.
    #[test]
    fn a_rows_hash_is_what_earlier_releases_computed() {
        let id = |s: &str| Uuid::parse_str(s).expect("uuid");
        let at = |s: &str| {
            chrono::DateTime::parse_from_rfc3339(s)
                .expect("time")
                .with_timezone(&chrono::Utc)
        };
        let mut row = AuditRow {
            call_id: id("01a21a26-adb4-7372-9b3b-5a851b9f55fc"),
            tenant: toolgate_core::TenantId(id("01a21a1b-7552-711a-858b-0b6355bb520a")),
            seq: 42,
            principal: toolgate_core::PrincipalId(id("01a21a26-ecc6-71ef-bb66-4ee2ce766526")),
            adapter: "mcp".into(),
            tool: "fx__echo".into(),
            arguments: r#"{"api_key":"***","message":"hi \"there\""}"#.into(),
            arguments_hash: "adbd982b8fe0bbd8477f09262028d3ac264001dc36e3c7579905e72c0b718755"
                .into(),
            outcome: "error:timeout".into(),
            error: Some("took too long".into()),
            duration_us: 1_234_567,
            request_id: Some("req-1".into()),
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
            run_id: Some(toolgate_core::RunId(id(
                "01a21a26-ed65-7730-a286-411e52f34094",
            ))),
            step: Some(3),
            client: Some("claude-code/1.0".into()),
            approval_id: None,
            cache: None,
            started_at: at("2026-11-26T23:18:08.326847Z"),
            finished_at: at("2026-11-26T23:18:09.561414Z"),
            prev_hash: GENESIS.into(),
            row_hash: String::new(),
        };
        assert_eq!(
            row_hash(&row),
            "084cf638ac2d341abe184a78b34a625700dd7b5cf8ee0c9766fb93b0095892ed"
        );
        row.approval_id = Some(id("01a21a26-8fbc-7098-8c08-c8f1229018c1"));
        row.cache = Some("miss".into());
        row.run_id = None;
        row.step = None;
        row.error = None;
        assert_eq!(
            row_hash(&row),
            "dcc0e74a90b1a9cf5c8600e2f13ec8412a699e39298656b01477e041749211e1"
        );
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"d": [ {"z": 1, "y": 2} ], "c": null}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"c":null,"d":[{"y":2,"z":1}]},"b":1}"#
        );
    }
}
