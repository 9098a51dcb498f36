//! # toolgate-core
//!
//! The tool model and the one path every tool call takes. **No HTTP, no SQL**: this crate
//! knows no adapter (REST, MCP, agent), no database and no web framework. Adapters depend
//! on it; it depends on none of them.
//!
//! The entry point is [`Executor::call`]: an adapter builds a [`CallContext`] from its
//! request, scopes the [`Registry`] to the caller with [`Toolset::scope`], and hands both
//! to the executor, which resolves, validates, authorizes, runs under a deadline and a
//! cancellation token, truncates, emits [`Event`]s and returns a [`ToolOutput`] or a
//! [`ToolError`].
//!
//! # Layout
//!
//! - [`ids`]: newtypes for tenant, principal, call and run ids.
//! - [`error`]: [`ToolError`], the one error taxonomy every adapter maps.
//! - [`spec`]: [`ToolSpec`], what a tool declares (schema, risk, effects, timeouts…).
//! - [`tool`]: the [`Tool`] trait and [`ToolOutput`].
//! - [`auth`]: [`AuthContext`], who calls.
//! - [`context`]: [`CallContext`], one call.
//! - [`client`]: [`ClientChannel`], the calling client as a tool's server may reach it
//!   mid-call (log messages, sampling, elicitation).
//! - [`registry`]: [`Registry`], every tool by unique name, schemas compiled once.
//! - [`toolset`]: [`Toolset`] filters and the [`ScopedToolset`] capability.
//! - [`executor`]: [`Executor`], the one path.
//! - [`policy`]: [`Policy`] (ratification level and rules) and the [`Approvals`] seam the
//!   executor asks before a call that needs a person's approval.
//! - [`cache`]: [`cache::ResultCache`], results of idempotent read-only tools kept for
//!   a while, opt-in per tool.
//! - [`approvals`]: [`approvals::StoredApprovals`], the [`Approvals`] seam over a store,
//!   and [`approvals::Decisions`], the rules of a person's decision for every front door.
//! - [`audit`]: [`audit::AuditRecord`] and the [`audit::AuditSink`] the executor awaits.
//! - [`secrets`]: which argument values the audit masks (schema marks, declared fields,
//!   the deployment's secret-name pattern).
//! - [`event`]: [`Event`] and the [`EventSink`] seam (tracing now; audit and SSE later).
//! - [`stores`]: the seams orchestration needs from durable storage
//!   ([`stores::RunStore`], [`stores::ApprovalStore`], [`stores::SessionStore`],
//!   [`stores::UpstreamStore`], [`stores::PinStore`]) and the records crossing them;
//!   `toolgate-store` implements them.
//! - [`clock::Clock`]: the wall clock orchestration reads (leases, expiries), a seam
//!   tests move instead of sleeping.
//! - [`per_key::PerKey`]: counts per key against a cap (runs, calls, streams in flight).
//! - [`backoff::Backoff`]: the one backoff policy of retry and reconnect loops;
//!   [`group_commit::next_group`]: how the durable writers batch.
//! - [`declarations`]: a toolset rendered as OpenAI, Anthropic, Gemini or MCP tool
//!   declarations, generated from the specs.
//! - [`settings`]: what every crate's configuration section is made of ([`settings::Secret`],
//!   shared checks, [`settings::Problems`]).

pub mod approvals;
pub mod audit;
pub mod auth;
pub mod backoff;
pub mod cache;
pub mod client;
pub mod clock;
pub mod context;
pub mod declarations;
pub mod error;
pub mod event;
pub mod executor;
pub mod group_commit;
pub mod ids;
pub mod limits;
pub mod metrics;
pub mod per_key;
pub mod policy;
pub mod registry;
pub mod secrets;
pub mod settings;
pub mod spec;
pub mod stores;
pub mod tool;
pub mod toolset;
pub mod usage;

pub use auth::{AuthContext, Principal, PrincipalKind, SubjectToken};
pub use client::{Client, ClientChannel, ClientError, ClientRequest};
pub use context::{Adapter, CallContext, ClientInfo, Progress, ProgressSink, RunStep};
pub use declarations::DeclarationFormat;
pub use error::{ErrorKind, ToolError, Violation};
pub use event::{DefinitionEvent, Event, EventSink, GateEvent, Outcome, TracingSink};
pub use executor::{Completed, Executor, ExecutorLimits};
pub use ids::{ApprovalId, CallId, PrincipalId, RunId, TenantId};
pub use policy::{Action, Approvals, Gate, NoApprovals, Policy};
pub use registry::{ChangeLog, Owner, RegisteredTool, Registry, RegistryError, schema_validator};
pub use secrets::SecretNames;
pub use spec::{Effects, Risk, ToolSpec};
pub use tool::{Content, Tool, ToolOutput};
pub use toolset::{ScopedToolset, Toolset};
pub use usage::Usage;

/// SHA-256 of `bytes` (audit rows and arguments, API keys, checkpoint keys), by ring: its
/// assembly takes the SHA extensions where the CPU has them, else AVX or SSSE3. The sha2
/// crate has only the SHA extensions' path besides scalar code, and this project's
/// machines have no SHA extensions: there it took 4.05 µs for a 700-byte row against
/// ring's 2.23 (docs/BENCHMARKS.md).
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Lower-case hex of [`sha256`] of `bytes`: how API keys, arguments and audit rows are
/// stored.
pub fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&sha256(bytes))
}

/// Lower-case hex of `bytes`. Used on every call (key, argument and row hashes, trace
/// ids): `hex::encode` collects an iterator of `char`s into its `String` one push at a
/// time, this writes the digits into one buffer.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut digits = vec![0; bytes.len() * 2];
    // Cannot fail: the buffer is exactly twice the input's length.
    let _ = hex::encode_to_slice(bytes, &mut digits);
    String::from_utf8(digits).unwrap_or_default()
}

#[cfg(test)]
mod sha256_tests {
    #[test]
    fn sha256_is_the_sha2_crates_digest_at_every_block_boundary() {
        use sha2::Digest as _;
        for len in [0, 1, 55, 56, 63, 64, 65, 119, 120, 700, 4096] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            assert_eq!(
                super::sha256(&bytes)[..],
                sha2::Sha256::digest(&bytes)[..],
                "{len} bytes"
            );
        }
    }
}

#[cfg(test)]
mod hex_tests {
    #[test]
    fn to_hex_matches_the_hex_crate() {
        for bytes in [
            &b""[..],
            &[0, 1, 0x7f, 0x80, 0xab, 0xff][..],
            &[0x5a; 33][..],
        ] {
            assert_eq!(super::to_hex(bytes), hex::encode(bytes));
        }
    }
}
