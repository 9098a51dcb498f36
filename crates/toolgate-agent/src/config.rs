//! `[providers.<name>]`: the LLM providers agents are driven through, and what is wrong
//! with one ([`ProviderEntry::problems`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use toolgate_core::settings::{Problems, Secret};

/// One `[providers.<name>]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// The wire format: `openai` (also OpenRouter, vLLM, llama.cpp, LM Studio),
    /// `anthropic`, `gemini` or `ollama`.
    pub kind: crate::ProviderKind,
    /// Taken verbatim: `https://api.openai.com/v1`, `https://openrouter.ai/api/v1`,
    /// `https://api.anthropic.com`, `https://generativelanguage.googleapis.com`,
    /// `http://127.0.0.1:11434`.
    pub base_url: String,
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// The environment variable holding the API key (e.g. `OPENAI_API_KEY`), read at
    /// start-up when `api_key` is unset.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Extra headers on every request (OpenRouter's `HTTP-Referer`, `X-Title`).
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// One attempt's time limit, seconds.
    #[serde(default = "default_provider_timeout")]
    pub timeout_secs: u64,
    /// Retries after the first attempt on 429, 5xx and timeouts.
    #[serde(default = "default_provider_retries")]
    pub max_retries: u32,
    /// First backoff delay (doubled each retry, with jitter), milliseconds.
    #[serde(default = "default_provider_backoff")]
    pub retry_base_ms: u64,
    /// Longest wait between attempts, also capping `Retry-After`, seconds.
    #[serde(default = "default_provider_max_backoff")]
    pub retry_max_secs: u64,
}

fn default_provider_timeout() -> u64 {
    120
}

fn default_provider_retries() -> u32 {
    4
}

fn default_provider_backoff() -> u64 {
    500
}

fn default_provider_max_backoff() -> u64 {
    30
}

impl ProviderEntry {
    /// The provider as `toolgate-agent` takes it.
    pub fn to_provider(&self) -> crate::ProviderConfig {
        crate::ProviderConfig {
            kind: self.kind,
            base_url: self.base_url.clone(),
            api_key: self.api_key.as_ref().map(|k| k.expose().to_owned()),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                .collect(),
            timeout: std::time::Duration::from_secs(self.timeout_secs),
            retry: crate::RetryPolicy {
                max_retries: self.max_retries,
                base_delay: std::time::Duration::from_millis(self.retry_base_ms),
                max_delay: std::time::Duration::from_secs(self.retry_max_secs),
            },
        }
    }
}

impl ProviderEntry {
    /// What is wrong with this entry, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if !(self.base_url.starts_with("http://") || self.base_url.starts_with("https://")) {
            problems.push((
                "base_url".into(),
                "must be an http:// or https:// URL".into(),
            ));
        }
        if self.timeout_secs == 0 {
            problems.push(("timeout_secs".into(), "must be at least 1".into()));
        }
        if let Err(e) = crate::provider::http::HttpClient::new(&self.to_provider()) {
            problems.push(("headers".into(), e));
        }
        problems
    }
}
