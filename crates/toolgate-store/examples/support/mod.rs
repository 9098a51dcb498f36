//! What the store's examples share.

use std::time::{Duration, SystemTime};

use serde_json::json;
use toolgate_core::audit::{AuditRecord, hash_json};
use toolgate_core::{Adapter, CallId, Outcome, PrincipalId, TenantId};

/// A record as the executor builds one for the benchmarks' echo call.
pub fn record(tenant: TenantId, principal: PrincipalId) -> AuditRecord {
    let args = json!({"message": "hello, toolgate"});
    let now = SystemTime::now();
    AuditRecord {
        call_id: CallId::new(),
        tenant,
        principal,
        adapter: Adapter::Mcp,
        tool: "echo".into(),
        arguments_hash: hash_json(&args),
        arguments: args,
        outcome: Outcome::Ok,
        error: None,
        duration: Duration::from_micros(40),
        request_id: Some("1".into()),
        trace_id: None,
        run: None,
        client: Some("wrk/4".into()),
        approval: None,
        cache: None,
        started_at: now,
        finished_at: now,
    }
}
