//! OAuth 2.0 Token Exchange (RFC 8693) for upstreams that must see each caller as
//! itself: the caller's own token from the identity provider (the JWT it signed in to
//! the gateway with) is traded at the authorization server the operator names for a
//! token minted for the upstream (its `audience`, `resource`, `scope`), and the upstream
//! is called with that. The caller's token itself never reaches the upstream, and API
//! keys, which no authorization server issued, cannot be exchanged.
//!
//! The gateway authenticates to the token endpoint as a confidential client
//! (`client_secret_basic`), with the operator's upstreams' HTTP client (redirects only
//! within the same origin). Exchanged tokens are kept, per caller token, until shortly
//! before they expire.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;
use toolgate_core::CallContext;

use super::PersonalCredential;

/// `grant_type` of a token exchange (RFC 8693 §2.1).
pub const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
/// The caller's token is an OAuth access token (the JWT the gateway accepted).
const ACCESS_TOKEN: &str = "urn:ietf:params:oauth:token-type:access_token";
/// An exchanged token is used until this long before it expires…
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// …and one issued without `expires_in` for this long.
const UNSTATED_LIFETIME: Duration = Duration::from_secs(60);
/// Most exchanged tokens kept; past it, expired ones go, then everything.
const CACHE_MAX: usize = 10_000;
/// The longest a token endpoint may take to answer.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how an upstream's tokens are exchanged: set by the operator.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeConfig {
    /// The authorization server's token endpoint.
    pub token_url: String,
    /// The gateway's client at that server, and its secret.
    pub client_id: String,
    pub client_secret: String,
    /// What the new token is for (RFC 8693 §2.1 `audience`, `resource`, `scope`).
    #[serde(default)]
    pub audience: Option<String>,
    #[serde(default)]
    pub resource: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
}

impl std::fmt::Debug for ExchangeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExchangeConfig")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"***")
            .field("audience", &self.audience)
            .field("resource", &self.resource)
            .field("scope", &self.scope)
            .finish()
    }
}

impl ExchangeConfig {
    /// What is wrong with it, if anything: `(field, problem)`.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        match url::Url::parse(&self.token_url) {
            Ok(url) if matches!(url.scheme(), "https" | "http") => {}
            _ => problems.push(("token_url", "must be an http(s) URL".to_owned())),
        }
        if self.client_id.is_empty() {
            problems.push(("client_id", "must not be empty".to_owned()));
        }
        problems
    }
}

/// One upstream's token exchange, with its exchanged tokens.
pub struct TokenExchange {
    upstream: String,
    config: ExchangeConfig,
    /// Per caller token (its SHA-256), the token exchanged for it and until when it is
    /// used.
    tokens: Mutex<HashMap<[u8; 32], (String, Instant)>>,
}

/// The token endpoint's answer (RFC 8693 §2.2.1), or its error (RFC 6749 §5.2).
#[derive(Deserialize)]
struct Issued {
    access_token: String,
    token_type: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

#[derive(Deserialize)]
struct Refusal {
    error: String,
    #[serde(default)]
    error_description: Option<String>,
}

impl TokenExchange {
    pub fn new(upstream: &str, config: ExchangeConfig) -> Self {
        Self {
            upstream: upstream.to_owned(),
            config,
            tokens: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], (String, Instant)>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Trades `subject` for a token for the upstream, at the token endpoint.
    async fn exchange(&self, subject: &str) -> Result<(String, Duration), String> {
        let form = {
            let mut form = url::form_urlencoded::Serializer::new(String::new());
            form.append_pair("grant_type", GRANT_TYPE)
                .append_pair("subject_token", subject)
                .append_pair("subject_token_type", ACCESS_TOKEN)
                .append_pair("requested_token_type", ACCESS_TOKEN);
            for (name, value) in [
                ("audience", &self.config.audience),
                ("resource", &self.config.resource),
                ("scope", &self.config.scope),
            ] {
                if let Some(value) = value {
                    form.append_pair(name, value);
                }
            }
            form.finish()
        };
        // RFC 6749 §2.3.1: the id and secret are form-encoded before Basic encoding.
        let encode =
            |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let response = super::operator_client()
            .post(&self.config.token_url)
            .timeout(EXCHANGE_TIMEOUT)
            .basic_auth(
                encode(&self.config.client_id),
                Some(encode(&self.config.client_secret)),
            )
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(reqwest::header::ACCEPT, "application/json")
            .body(form)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "{}: the token exchange at its authorization server failed: {}",
                    self.upstream,
                    toolgate_core::error::chain(&e)
                )
            })?;
        let status = response.status();
        let body = response.bytes().await.map_err(|e| {
            format!(
                "{}: the token exchange answer could not be read: {e}",
                self.upstream
            )
        })?;
        if !status.is_success() {
            let why = serde_json::from_slice::<Refusal>(&body).map_or_else(
                |_| format!("HTTP {status}"),
                |r| match r.error_description {
                    Some(description) => format!("{}: {description}", r.error),
                    None => r.error,
                },
            );
            return Err(format!(
                "{}: its authorization server refused to exchange your token ({why})",
                self.upstream
            ));
        }
        let issued: Issued = serde_json::from_slice(&body).map_err(|e| {
            format!(
                "{}: the token exchange answer is not a token response: {e}",
                self.upstream
            )
        })?;
        // A token usable as a bearer token only (RFC 8693 §2.2.1: `N_A` is not one).
        if !issued.token_type.eq_ignore_ascii_case("bearer") {
            return Err(format!(
                "{}: the exchanged token is of type {:?}, not a bearer token",
                self.upstream, issued.token_type
            ));
        }
        let lifetime = issued
            .expires_in
            .map_or(UNSTATED_LIFETIME, Duration::from_secs);
        Ok((issued.access_token, lifetime))
    }
}

#[async_trait::async_trait]
impl super::PersonalCredentials for TokenExchange {
    async fn credential(&self, ctx: &CallContext) -> Result<PersonalCredential, String> {
        let Some(subject) = &ctx.subject_token else {
            return Err(format!(
                "{} is called with your own identity, exchanged for a token of its own (RFC 8693): sign in with a token from the identity provider (an API key, or a call made later on your behalf, has none to exchange)",
                self.upstream
            ));
        };
        let key = toolgate_core::sha256(subject.expose().as_bytes());
        if let Some((token, until)) = self.lock().get(&key)
            && Instant::now() < *until
        {
            return Ok(bearer(token.clone()));
        }
        let (token, lifetime) = self.exchange(subject.expose()).await?;
        let until = Instant::now() + lifetime.saturating_sub(EXPIRY_MARGIN);
        let mut tokens = self.lock();
        if tokens.len() >= CACHE_MAX {
            let now = Instant::now();
            tokens.retain(|_, (_, until)| now < *until);
            if tokens.len() >= CACHE_MAX {
                tokens.clear();
            }
        }
        tokens.insert(key, (token.clone(), until));
        Ok(bearer(token))
    }
}

fn bearer(token: String) -> PersonalCredential {
    PersonalCredential {
        headers: Default::default(),
        bearer: Some(token),
    }
}
