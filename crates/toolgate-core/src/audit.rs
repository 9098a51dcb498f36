//! The audit seam: what the executor records for every call, and the trait a store
//! implements to keep it durably.
//!
//! The executor awaits the sink before it returns a result, so a row is durable before
//! the caller sees the outcome. For tools that declare side effects it first records an
//! intent ([`AuditSink::record_intent`]) and runs the tool only once that is durable, so a crash
//! mid-call still leaves a trace. If the sink fails, the call fails closed.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::{Adapter, ApprovalId, CallContext, CallId, Outcome, PrincipalId, RunStep, TenantId};

pub use crate::secrets::MASK;

/// One call, as recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct AuditRecord {
    pub call_id: CallId,
    pub tenant: TenantId,
    pub principal: PrincipalId,
    pub adapter: Adapter,
    pub tool: String,
    /// The arguments with the tool's secret fields replaced by [`MASK`].
    pub arguments: Value,
    /// The unmasked arguments' [digest](ArgumentsDigest) (hex): equal calls can be
    /// matched without storing secrets.
    pub arguments_hash: String,
    pub outcome: Outcome,
    /// The error message shown to the caller, when the call failed.
    pub error: Option<String>,
    pub duration: Duration,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub run: Option<RunStep>,
    /// MCP clientInfo name (and version), or the HTTP user agent.
    pub client: Option<String>,
    /// The approval this call asked for, used, or was refused by.
    pub approval: Option<ApprovalId>,
    /// For a tool whose results are cached: whether this call was answered from the
    /// cache.
    pub cache: Option<crate::cache::CacheStatus>,
    pub started_at: SystemTime,
    pub finished_at: SystemTime,
}

impl AuditRecord {
    /// A record for `ctx`'s call of `tool`, keeping `masked` (its arguments with their
    /// secrets masked, see [`crate::secrets`]) and `arguments_hash` (the unmasked
    /// arguments' [`ArgumentsDigest`]). Outcome and times are filled in by
    /// [`AuditRecord::finish`].
    pub fn start(ctx: &CallContext, tool: &str, masked: Value, arguments_hash: String) -> Self {
        let now = SystemTime::now();
        Self {
            call_id: ctx.call_id,
            tenant: ctx.auth.tenant,
            principal: ctx.auth.principal.id,
            adapter: ctx.adapter,
            tool: tool.chars().take(128).collect(),
            arguments: masked,
            arguments_hash,
            outcome: Outcome::Ok,
            error: None,
            duration: Duration::ZERO,
            request_id: ctx.request_id.clone(),
            trace_id: ctx.trace_id.clone(),
            run: ctx.run,
            client: ctx.client.as_ref().map(|c| match &c.version {
                Some(v) => format!("{}/{v}", c.name),
                None => c.name.clone(),
            }),
            approval: None,
            cache: None,
            started_at: now,
            finished_at: now,
        }
    }

    /// The row of an administrative change made by `ctx`'s caller (adapter
    /// [`Adapter::Admin`]): `operation` (`keys.revoke`, `policy.update`…) as its tool,
    /// what the change named or set as its arguments. Those hold no secret, so their
    /// plain hash names them.
    pub fn admin_change(ctx: &CallContext, operation: &str, arguments: Value) -> Self {
        let hash = hash_json(&arguments);
        Self::start(ctx, operation, arguments, hash).finish(Outcome::Ok, None, Duration::ZERO)
    }

    pub fn finish(mut self, outcome: Outcome, error: Option<String>, duration: Duration) -> Self {
        self.outcome = outcome;
        self.error = error;
        self.duration = duration;
        self.finished_at = self.started_at + duration;
        self
    }
}

/// The one canonical JSON text of a value: object keys sorted at every level, no
/// whitespace, whatever the map order of the process that wrote it or of a store that
/// reorders keys (Postgres `jsonb`). What the audit stores and hashes, and how the agent
/// tells two calls apart. serde_json's `Map` is a `BTreeMap` here (no crate in the
/// workspace enables `preserve_order`; the unit test below fails if one does), so its
/// text already is canonical and costs no copy.
pub fn canonical_json(value: &Value) -> String {
    value.to_string()
}

/// Hex SHA-256 of a JSON value's [canonical text](canonical_json), so a value read back
/// from a store that reorders keys hashes the same. Plain: for values without secrets
/// (a call's arguments go through [`ArgumentsDigest`]).
pub fn hash_json(value: &Value) -> String {
    crate::sha256_hex(canonical_json(value).as_bytes())
}

/// Characters of a long string an audit row keeps when its arguments are cut.
pub const CUT_KEEPS: usize = 1_024;

/// Cuts what a row keeps of a call's (masked) arguments and error to about `limit` bytes
/// each (`0`: keeps them whole), so that one call's megabyte of arguments is not a
/// megabyte of audit log: arguments over the limit keep each string's first
/// [`CUT_KEEPS`] bytes followed by `…[cut: N bytes]` (N, the string's whole length),
/// and become one such string if that is still too long; an error over it is cut the
/// same way. The row's `arguments_hash` still names the whole. True when it cut.
pub fn cut_record(record: &mut AuditRecord, limit: usize) -> bool {
    let (arguments, error) = over(record, limit);
    if let Some(total) = arguments {
        shorten(&mut record.arguments, CUT_KEEPS.min(limit));
        if json_len(&record.arguments) > limit {
            record.arguments = Value::String(format!("…[cut: {total} bytes of arguments]"));
        }
    }
    if let Some(text) = record.error.as_mut().filter(|_| error) {
        *text = cut_text(text, CUT_KEEPS.min(limit));
    }
    arguments.is_some() || error
}

/// Whether [`cut_record`] would cut `record`.
pub fn needs_cut(record: &AuditRecord, limit: usize) -> bool {
    let (arguments, error) = over(record, limit);
    arguments.is_some() || error
}

/// What of `record` is past `limit` (0: nothing ever is): its arguments' length when
/// they are, and whether its error is.
fn over(record: &AuditRecord, limit: usize) -> (Option<usize>, bool) {
    if limit == 0 {
        return (None, false);
    }
    let total = json_len(&record.arguments);
    let error = record.error.as_ref().is_some_and(|e| e.len() > limit);
    ((total > limit).then_some(total), error)
}

/// About the length of `value`'s JSON text (escapes aside), without writing it.
fn json_len(value: &Value) -> usize {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items.iter().map(|v| json_len(v) + 1).sum::<usize>() + 2,
        Value::Object(map) => {
            map.iter()
                .map(|(k, v)| k.len() + 4 + json_len(v))
                .sum::<usize>()
                + 2
        }
    }
}

fn shorten(value: &mut Value, keep: usize) {
    match value {
        Value::String(s) if s.len() > keep => *s = cut_text(s, keep),
        Value::Array(items) => items.iter_mut().for_each(|v| shorten(v, keep)),
        Value::Object(map) => map.values_mut().for_each(|v| shorten(v, keep)),
        _ => {}
    }
}

/// `text`'s first `keep` bytes (to a character's end) and how long it was.
fn cut_text(text: &str, keep: usize) -> String {
    let end = (0..=keep.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…[cut: {} bytes]", &text[..end], text.len())
}

/// What names a call's unmasked arguments in its audit row, its approval and the result
/// cache: equal arguments (in any key order) get equal digests, so an approved call is
/// recognised when made again without its secrets being stored.
///
/// A plain hash would give the secrets away: beside the masked arguments, every other
/// field is known, and a short password or PIN in the masked one is found by hashing
/// guesses until one matches. So the gateway keys it (HMAC-SHA-256, under a key derived
/// from the deployment's audit signing key, which instances sharing a database already
/// share): without the key, a digest says nothing about the arguments. Unkeyed
/// (SHA-256), the default, only where no key is given (tests, tools run in-process).
#[derive(Clone, Default)]
pub struct ArgumentsDigest {
    key: Option<ring::hmac::Key>,
}

impl ArgumentsDigest {
    /// Digests under a key derived from `secret` (the audit signing key's seed): the
    /// signing key itself is never used for anything else.
    pub fn keyed(secret: &[u8; 32]) -> Self {
        let mut material = b"toolgate/arguments-digest/v1\0".to_vec();
        material.extend_from_slice(secret);
        let derived = crate::sha256(&material);
        Self {
            key: Some(ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &derived)),
        }
    }

    /// The hex digest of `value`'s [canonical text](canonical_json).
    pub fn digest(&self, value: &Value) -> String {
        let text = canonical_json(value);
        match &self.key {
            Some(key) => crate::to_hex(ring::hmac::sign(key, text.as_bytes()).as_ref()),
            None => crate::sha256_hex(text.as_bytes()),
        }
    }
}

impl std::fmt::Debug for ArgumentsDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.key.is_some() {
            "ArgumentsDigest(keyed)"
        } else {
            "ArgumentsDigest(unkeyed)"
        })
    }
}

#[derive(Debug, thiserror::Error)]
#[error("audit store unavailable: {message}")]
pub struct AuditError {
    pub message: String,
    /// The store could not commit for now (unreachable, overloaded, locked): the call
    /// may succeed if made again shortly.
    pub transient: bool,
}

impl AuditError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: false,
        }
    }

    pub fn transient(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            transient: true,
        }
    }
}

/// Where audit records go. Implemented by `toolgate-store`.
#[async_trait]
pub trait AuditSink: Send + Sync {
    /// Durably notes that a call with side effects is about to run.
    async fn record_intent(&self, record: &AuditRecord) -> Result<(), AuditError>;
    /// Durably records a finished call (and clears its intent, if any). Returns only once
    /// the record is committed.
    async fn record(&self, record: AuditRecord) -> Result<(), AuditError>;
    /// Records waiting to be committed: the executor sheds new calls when it nears the
    /// queue's capacity rather than let them wait.
    fn backlog(&self) -> usize {
        0
    }
}

/// Records nothing: for tests of the executor alone and for tools that run outside any
/// gateway.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoAudit;

#[async_trait]
impl AuditSink for NoAudit {
    async fn record_intent(&self, _: &AuditRecord) -> Result<(), AuditError> {
        Ok(())
    }
    async fn record(&self, _: AuditRecord) -> Result<(), AuditError> {
        Ok(())
    }
}

#[cfg(test)]
mod cut_tests {
    use serde_json::json;

    use super::*;

    fn record(arguments: Value, error: Option<&str>) -> AuditRecord {
        let auth = crate::AuthContext::recording_in(TenantId::new(), None);
        let ctx = CallContext::new(auth, Adapter::Rest);
        AuditRecord::start(&ctx, "write_file", arguments, "digest".into()).finish(
            Outcome::Ok,
            error.map(str::to_owned),
            Duration::ZERO,
        )
    }

    #[test]
    fn arguments_within_the_limit_are_kept_whole() {
        let args = json!({"path": "a.txt", "content": "x".repeat(60_000), "n": [1, 2]});
        let mut r = record(args.clone(), Some("no"));
        assert!(!cut_record(&mut r, 64 * 1024));
        assert_eq!(r.arguments, args);
        assert!(!cut_record(&mut r, 0), "0 keeps everything");
    }

    #[test]
    fn long_strings_keep_their_start_and_say_how_long_they_were() {
        let content = format!("{}{}", "é".repeat(600), "y".repeat(200_000));
        let args = json!({"path": "a.txt", "content": content, "lines": ["z".repeat(70_000)]});
        let mut r = record(args, Some(&"e".repeat(100_000)));
        assert!(cut_record(&mut r, 64 * 1024));
        assert_eq!(r.arguments["path"], "a.txt");
        let kept = r.arguments["content"].as_str().expect("string");
        // 512 two-byte characters make 1,024 bytes: the cut ends on a character.
        assert_eq!(kept, format!("{}…[cut: 201200 bytes]", "é".repeat(512)));
        assert_eq!(
            r.arguments["lines"][0],
            format!("{}…[cut: 70000 bytes]", "z".repeat(1024))
        );
        assert_eq!(
            r.error.as_deref(),
            Some(format!("{}…[cut: 100000 bytes]", "e".repeat(1024)).as_str())
        );
        assert_eq!(
            r.arguments_hash, "digest",
            "the digest still names the whole"
        );
    }

    #[test]
    fn many_short_values_over_the_limit_become_one_note() {
        let args = Value::Array((0..20_000).map(|i| json!(i)).collect());
        let mut r = record(args, None);
        assert!(cut_record(&mut r, 64 * 1024));
        let note = r.arguments.as_str().expect("a string");
        assert!(
            note.starts_with("…[cut: ") && note.ends_with(" bytes of arguments]"),
            "{note}"
        );
        assert_eq!(r.error, None);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_keyed_digest_matches_equal_arguments_and_only_under_its_key() {
        let args = json!({"user": "ann", "password": "hunter2"});
        let reordered: Value =
            serde_json::from_str(r#"{"password":"hunter2","user":"ann"}"#).expect("json");
        let keyed = ArgumentsDigest::keyed(&[7; 32]);
        assert_eq!(keyed.digest(&args), keyed.digest(&reordered));
        assert_eq!(keyed.digest(&args).len(), 64);
        assert_ne!(keyed.digest(&args), hash_json(&args), "a guess checks out");
        assert_ne!(
            keyed.digest(&args),
            ArgumentsDigest::keyed(&[8; 32]).digest(&args)
        );
        assert_ne!(
            keyed.digest(&args),
            keyed.digest(&json!({"user": "ann", "password": "hunter3"}))
        );
        assert_eq!(ArgumentsDigest::default().digest(&args), hash_json(&args));
        assert_eq!(format!("{keyed:?}"), "ArgumentsDigest(keyed)");
    }

    #[test]
    fn json_hashes_are_those_of_the_value_as_displayed() {
        // Approvals stored before the hash was written straight from bytes must still match.
        let value =
            json!({"b": [1, 2.5, null, true], "a": "é \" \n \u{1}", "c": {"z": {}, "y": []}});
        assert_eq!(
            hash_json(&value),
            // sha2, another implementation, as the reference.
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
                value.to_string().as_bytes()
            ))
        );
    }

    #[test]
    fn secret_fields_are_masked_but_hashed() {
        let args = json!({"url": "https://x", "auth": {"token": "s3cret"}});
        let masked = crate::secrets::mask(
            &args,
            &crate::secrets::SchemaSecrets::default(),
            &["/auth/token".to_owned(), "/missing".to_owned()],
            &crate::SecretNames::new("^$").expect("pattern"),
        );
        assert_eq!(
            masked,
            json!({"url": "https://x", "auth": {"token": "***"}})
        );
        assert_ne!(hash_json(&args), hash_json(&masked));
        assert_eq!(hash_json(&args).len(), 64);
    }

    #[test]
    fn canonical_text_sorts_keys_at_every_level() {
        let reordered: Value =
            serde_json::from_str(r#"{"b": [{"z": 1, "y": null}], "a": {"d": "x", "c": 2.5}}"#)
                .expect("json");
        assert_eq!(
            canonical_json(&reordered),
            r#"{"a":{"c":2.5,"d":"x"},"b":[{"y":null,"z":1}]}"#
        );
    }

    #[test]
    fn key_order_does_not_change_the_hash() {
        let written = json!({"b": 1, "a": {"d": 2, "c": 3}});
        let reordered: Value =
            serde_json::from_str(r#"{"a": {"c": 3, "d": 2}, "b": 1}"#).expect("json");
        assert_eq!(hash_json(&written), hash_json(&reordered));
    }
}
