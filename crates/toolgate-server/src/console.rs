//! `/console`: the operators' console, served by the gateway itself.
//!
//! **Stack: none.** One HTML page, one stylesheet and one plain ES module, embedded in
//! the binary with `include_str!`: no build step, no bundler, no lockfile to keep, no CDN
//! (works offline), and nothing to audit but ~850 lines the browser runs as written. The
//! console holds no authority of its own: it signs in with an API key (kept in
//! `sessionStorage`, gone when the tab closes) and calls the same REST API as everyone,
//! so it shows only what the key's scopes and tenant allow; a page the key may not read
//! says so. Live views read the SSE streams with `fetch` (an `EventSource` cannot send
//! the `Authorization` header).
//!
//! The page may load nothing but its own assets (`Content-Security-Policy`), cannot be
//! framed, and is never cached with a key in it (there is none: the key lives in the
//! tab's storage, not the page).
//!
//! **Single sign-on.** Where the operator names an OpenID Provider (`[console.oidc]`),
//! the sign-in page also offers it: the authorization code flow with PKCE, run by the
//! page itself as a public client (no secret to keep; the code verifier and state stay
//! in the tab's storage). The access token it gets back (a JWT for the gateway's
//! audience, named by a `resource` indicator where the provider needs one) is used as a
//! key is, and checked as every JWT is (`[auth.jwt]`, which must name the same issuer):
//! the console still holds no authority of its own. The policy lets the page reach the
//! provider's origin (discovery and the token endpoint) and nothing else.

use std::sync::Arc;

use axum::Router;
use axum::http::HeaderValue;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_FRAME_OPTIONS};
use axum::response::IntoResponse;
use axum::routing::get;
use serde::{Deserialize, Serialize};

const INDEX: &str = include_str!("../assets/console/index.html");
const APP_JS: &str = include_str!("../assets/console/app.js");
const APP_CSS: &str = include_str!("../assets/console/app.css");

/// `[console]` in the configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConsoleConfig {
    /// Offer single sign-on with this OpenID Provider beside API keys.
    pub oidc: Option<OidcConfig>,
}

/// `[console.oidc]`: the OpenID Provider the console signs people in with. The client
/// is public (no secret): register it with the provider as a single-page application
/// whose redirect URI is `<gateway>/console/`, with PKCE.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL; `<issuer>/.well-known/openid-configuration` is read.
    pub issuer: String,
    pub client_id: String,
    /// Scopes asked for: `openid` and the gateway scopes people should get.
    #[serde(default = "default_scope")]
    pub scope: String,
    /// RFC 8707 resource indicator sent with the request, for providers that mint access
    /// tokens per resource (the token's audience: `auth.jwt.audience`).
    #[serde(default)]
    pub resource: Option<String>,
    /// What the sign-in button says.
    #[serde(default = "default_label")]
    pub label: String,
}

fn default_scope() -> String {
    "openid".into()
}

fn default_label() -> String {
    "Sign in with single sign-on".into()
}

impl ConsoleConfig {
    /// Problems that make the settings unusable; `jwt` is `[auth.jwt]`, which must
    /// accept the provider's tokens.
    pub fn problems(&self, jwt: Option<&crate::jwt::JwtConfig>) -> Vec<(String, String)> {
        let Some(oidc) = &self.oidc else {
            return Vec::new();
        };
        let mut problems = Vec::new();
        if let Err(problem) = toolgate_core::settings::http_url(&oidc.issuer) {
            problems.push(("console.oidc.issuer".into(), problem));
        }
        if oidc.client_id.is_empty() {
            problems.push(("console.oidc.client_id".into(), "must not be empty".into()));
        }
        match jwt {
            None => problems.push((
                "console.oidc".into(),
                "needs [auth.jwt] accepting the provider's tokens (its issuer and JWKS)".into(),
            )),
            Some(jwt) if jwt.issuer.trim_end_matches('/') != oidc.issuer.trim_end_matches('/') => {
                problems.push((
                    "console.oidc.issuer".into(),
                    format!(
                        "must be auth.jwt.issuer ({}): the gateway accepts tokens from that issuer only",
                        jwt.issuer
                    ),
                ));
            }
            Some(_) => {}
        }
        problems
    }
}

const POLICY: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The page's policy: [`POLICY`], with the provider's origin added to `connect-src`
/// when single sign-on is on.
fn policy(oidc: Option<&OidcConfig>) -> HeaderValue {
    let origin = oidc
        .and_then(|o| url::Url::parse(&o.issuer).ok())
        .map(|u| u.origin().ascii_serialization())
        .filter(|o| o != "null");
    let text = match origin {
        Some(origin) => POLICY.replace(
            "connect-src 'self'",
            &format!("connect-src 'self' {origin}"),
        ),
        None => POLICY.to_owned(),
    };
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(POLICY))
}

fn asset(
    policy: &HeaderValue,
    content_type: &'static str,
    body: &'static str,
) -> impl IntoResponse + use<> {
    (
        [
            (CONTENT_TYPE, HeaderValue::from_static(content_type)),
            (CACHE_CONTROL, HeaderValue::from_static("no-cache")),
            (CONTENT_SECURITY_POLICY, policy.clone()),
            (X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        ],
        body,
    )
}

/// What the page learns before sign-in (`/console/config.json`): whether, and with
/// whom, it may offer single sign-on.
#[derive(Serialize)]
struct PageConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    oidc: Option<OidcConfig>,
}

/// The console's routes.
pub fn router<S: Clone + Send + Sync + 'static>(config: &ConsoleConfig) -> Router<S> {
    let policy = Arc::new(policy(config.oidc.as_ref()));
    let page = Arc::new(
        serde_json::to_string(&PageConfig {
            oidc: config.oidc.clone(),
        })
        .unwrap_or_else(|_| "{}".into()),
    );
    let index = {
        let policy = policy.clone();
        move || {
            let policy = policy.clone();
            async move { asset(&policy, "text/html; charset=utf-8", INDEX) }
        }
    };
    let js = {
        let policy = policy.clone();
        move || {
            let policy = policy.clone();
            async move { asset(&policy, "text/javascript; charset=utf-8", APP_JS) }
        }
    };
    let css = {
        let policy = policy.clone();
        move || {
            let policy = policy.clone();
            async move { asset(&policy, "text/css; charset=utf-8", APP_CSS) }
        }
    };
    let settings = move || {
        let page = page.clone();
        async move {
            (
                [
                    (CONTENT_TYPE, "application/json"),
                    (CACHE_CONTROL, "no-cache"),
                ],
                page.to_string(),
            )
        }
    };
    Router::new()
        .route("/console", get(index.clone()))
        .route("/console/", get(index))
        .route("/console/app.js", get(js))
        .route("/console/app.css", get(css))
        .route("/console/config.json", get(settings))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn oidc(issuer: &str) -> ConsoleConfig {
        ConsoleConfig {
            oidc: Some(
                serde_json::from_value(json!({"issuer": issuer, "client_id": "console"}))
                    .expect("oidc"),
            ),
        }
    }

    fn jwt(issuer: &str) -> crate::jwt::JwtConfig {
        serde_json::from_value(json!({"issuer": issuer, "audience": "toolgate",
                                      "jwks_url": format!("{issuer}jwks")}))
        .expect("jwt")
    }

    #[test]
    fn single_sign_on_needs_the_gateway_to_accept_the_providers_tokens() {
        assert!(ConsoleConfig::default().problems(None).is_empty());
        let fields = |c: &ConsoleConfig, j: Option<&crate::jwt::JwtConfig>| -> Vec<String> {
            c.problems(j).into_iter().map(|(f, _)| f).collect()
        };
        let config = oidc("https://idp.example.com/");
        assert_eq!(fields(&config, None), ["console.oidc"]);
        let other = jwt("https://other.example.com/");
        assert_eq!(fields(&config, Some(&other)), ["console.oidc.issuer"]);
        let same = jwt("https://idp.example.com");
        assert!(fields(&config, Some(&same)).is_empty());
        assert_eq!(fields(&oidc("idp.example.com"), Some(&same)).len(), 2);
    }

    #[test]
    fn the_page_may_reach_the_provider_and_nothing_else() {
        let config = oidc("https://idp.example.com/realms/acme");
        let with_sso = policy(config.oidc.as_ref());
        assert!(
            with_sso
                .to_str()
                .expect("ascii")
                .contains("connect-src 'self' https://idp.example.com;"),
            "{with_sso:?}"
        );
        assert_eq!(policy(None).to_str().expect("ascii"), POLICY);
    }
}
