//! `web_search`: a query against the search API the operator configured, in SearXNG's
//! JSON format (`GET <url>?q=…&format=json` answering `{"results": [{"title", "url",
//! "content"}]}`). Absent from the registry when no search API is configured. The API's
//! address is the operator's choice, so it is not subject to `web_fetch`'s address checks.

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_core::{CallContext, Effects, ErrorKind, Risk, Tool, ToolError, ToolOutput, ToolSpec};

use crate::parse_args;

/// Most results returned.
pub const MAX_RESULTS: usize = 20;

/// Where `web_search` sends queries.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// The search endpoint, e.g. `https://searx.example.org/search`.
    pub url: reqwest::Url,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
}

pub struct WebSearch {
    spec: ToolSpec,
    options: SearchOptions,
    client: reqwest::Client,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    #[schemars(length(min = 1, max = 500))]
    query: String,
    #[serde(default = "default_count")]
    #[schemars(range(min = 1, max = MAX_RESULTS))]
    count: usize,
    /// Language code, e.g. "en"
    #[serde(default)]
    #[schemars(length(max = 16))]
    language: Option<String>,
}

fn default_count() -> usize {
    8
}

#[derive(Deserialize)]
struct SearxResponse {
    #[serde(default)]
    results: Vec<SearxResult>,
}

#[derive(Deserialize)]
struct SearxResult {
    #[serde(default)]
    title: String,
    url: String,
    #[serde(default)]
    content: String,
}

/// What `web_search` found.
#[derive(Serialize, JsonSchema)]
struct Results {
    results: Vec<Hit>,
}

#[derive(Serialize, JsonSchema)]
struct Hit {
    title: String,
    url: String,
    snippet: String,
}

impl WebSearch {
    pub fn new(options: SearchOptions) -> Result<Self, ToolError> {
        let spec = ToolSpec::new(
            "web_search",
            "Search the web. Returns the top results with title, URL and a snippet; fetch a \
             result with web_fetch to read it.",
            crate::input_schema::<Args>(),
        )
        .with_title("Web search")
        .with_category("web")
        .with_risk(
            Risk::High,
            Effects {
                writes: false,
                destructive: false,
                idempotent: true,
                open_world: true,
            },
        )
        .with_timeouts(Duration::from_secs(20), Duration::from_secs(60))
        .with_output_schema(crate::output_schema::<Results>());
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::limited(3))
            .connect_timeout(Duration::from_secs(10))
            .user_agent(format!(
                "toolgate/{} (web_search)",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(ToolError::internal)?;
        Ok(Self {
            spec,
            options,
            client,
        })
    }
}

#[async_trait]
impl Tool for WebSearch {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(args)?;
        let mut url = self.options.url.clone();
        url.query_pairs_mut()
            .append_pair("q", &args.query)
            .append_pair("format", "json");
        if let Some(language) = &args.language {
            url.query_pairs_mut().append_pair("language", language);
        }
        let mut request = self.client.get(url);
        if let Some(key) = &self.options.api_key {
            request = request.bearer_auth(key);
        }
        let upstream = |message: String| ToolError::new(ErrorKind::Upstream, message);
        let response = request
            .send()
            .await
            .map_err(|e| upstream(format!("the search API did not answer: {e}")))?;
        let status = response.status();
        if !status.is_success() {
            let mut err = upstream(format!("the search API answered {status}"));
            err.recoverable = status.is_server_error() || status.as_u16() == 429;
            return Err(err);
        }
        let body: SearxResponse = response
            .json()
            .await
            .map_err(|e| upstream(format!("the search API's answer is not SearXNG JSON: {e}")))?;
        let results: Vec<Hit> = body
            .results
            .into_iter()
            .take(args.count.min(MAX_RESULTS))
            .map(|r| Hit {
                title: r.title,
                url: r.url,
                snippet: r.content,
            })
            .collect();
        let mut text = String::new();
        for (n, r) in results.iter().enumerate() {
            text.push_str(&format!(
                "{}. {}\n   {}\n   {}\n",
                n + 1,
                r.title,
                r.url,
                r.snippet
            ));
        }
        if results.is_empty() {
            text.push_str("no results\n");
        }
        Ok(ToolOutput::text(text).with_structured(crate::structured(&Results { results })))
    }
}
