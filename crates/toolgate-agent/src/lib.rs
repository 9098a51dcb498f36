//! # toolgate-agent
//!
//! The agent adapter: a run drives an LLM through turns and executes the tool calls it
//! asks for through the one [`toolgate_core::Executor`] (adapter `agent`), journaling
//! every step. Depends on `toolgate-core` only; the server gives [`runs::Runs`] the store
//! (through core's store seams) and the providers the operator configured.
//!
//! ## Why our own provider clients
//!
//! The gateway is a wire-format product: each provider's tool-calling format must be
//! spoken exactly (Anthropic `is_error` and `disable_parallel_tool_use`, Ollama
//! `tool_name`, Gemini thought signatures echoed unchanged, OpenAI-compatible servers'
//! `finish_reason: ""`), raw replies and usage kept per step, and parsing lenient. The
//! multi-provider crates each miss some of this (`genai` has no tool-result error flag
//! and no Ollama `tool_name`; `async-openai` is strict about enum values that
//! OpenAI-compatible servers break; `rig` needs a newer compiler than ours and breaks
//! every few weeks), and all would add 30–100 crates for code we would wrap anyway. So
//! each wire format is a thin client over `reqwest`, a few hundred lines each (see
//! `shared/AGENT-NOTES.md` §2).
//!
//! # Layout
//!
//! - [`config`]: `[providers.<name>]` entries and what is wrong with one.
//! - [`message`]: the neutral conversation (user, assistant with tool calls, tool
//!   results, gateway notes).
//! - [`provider`]: the [`provider::Provider`] trait, retries with backoff and
//!   `Retry-After` ([`provider::http`]), and one module per wire format:
//!   [`provider::openai`], [`provider::anthropic`], [`provider::gemini`],
//!   [`provider::ollama`].
//! - [`protocol`]: text tool-call protocols for models without function calling
//!   ([`protocol::react`], [`protocol::xml`]).
//! - [`agent`]: [`agent::AgentConfig`], what an agent is.
//! - [`output`]: structured output, the JSON Schema a final answer must match.
//! - [`run`]: the loop ([`run::drive`]); its events ([`run::RunEvent`]) and the pure fold
//!   that rebuilds a run from them ([`run::RunState::fold`]) in `run/state.rs`, with
//!   that fold's unit tests.
//! - [`runs`]: [`runs::Runs`], the runs of one gateway instance: starting them,
//!   journaling their events through the store seam ([`toolgate_core::stores`]), leases,
//!   cancellation, and taking over runs whose instance stopped.

pub mod agent;
pub mod config;
pub mod message;
pub mod output;
pub mod protocol;
pub mod provider;
pub mod run;
pub mod runs;

pub use agent::AgentConfig;
pub use protocol::Protocol;
pub use provider::{Provider, ProviderConfig, ProviderKind, RetryPolicy};
pub use run::{Journal, RunContext, RunEvent, RunFinish, RunState, RunStatus, drive};
