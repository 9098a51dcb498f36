//! Token counts of model calls, normalized across providers: what a provider reports per
//! call, what a run adds up, what the run's row keeps.

use serde::{Deserialize, Serialize};

/// Token counts of one model call, or of all a run's calls added up. A count a stored
/// record lacks reads as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens served from a cache (part of `input_tokens`).
    pub cached_input_tokens: u64,
    /// Reasoning tokens (part of `output_tokens`, except on Gemini where they are extra and
    /// added here and to `output_tokens`).
    pub reasoning_tokens: u64,
}

impl Usage {
    pub fn total(&self) -> u64 {
        self.input_tokens + self.output_tokens
    }

    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.reasoning_tokens += other.reasoning_tokens;
    }
}
