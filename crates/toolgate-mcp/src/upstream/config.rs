//! What an upstream is, as the operator (or a tenant) configured it, and its tool-name
//! globs.

use super::*;

/// One upstream MCP server, as the operator configured it.
#[derive(Clone, Debug)]
pub struct UpstreamConfig {
    /// `^[A-Za-z0-9_.-]+$`; names the upstream in logs, errors and the default prefix.
    pub name: String,
    /// Put before each upstream tool's name; `<name>__` when `None`, nothing when empty.
    pub prefix: Option<String>,
    pub transport: UpstreamTransport,
    /// Globs over the upstream's own tool names: only these (all when empty)…
    pub allow: Vec<String>,
    /// …and never these.
    pub deny: Vec<String>,
    /// Deadline of a call when the caller asks for none, and the longest one allowed.
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// Each progress report of a call moves its deadline to at least this long from
    /// then, up to `max_timeout` ([`ToolSpec::progress_extends`]).
    pub progress_extends: Option<Duration>,
    /// Who sees its tools: every tenant (the operator's upstreams) or the tenant that
    /// added it.
    pub owner: Owner,
    /// Whether log messages and requests that the transport does not tie to a call go
    /// to the one call in flight, when exactly one is (see [`Routes`]).
    pub relay_unattributed: bool,
    /// Whose MCP session an HTTP upstream's calls run in (stdio upstreams: always one
    /// shared session, their one process).
    pub sessions: SessionScope,
    /// What a changed or suspicious tool definition does; `None`: the owning tenant's
    /// policy says (tenant upstreams).
    pub pin: Option<crate::vetting::PinMode>,
    /// Who vets its tool definitions before they are offered (none: all are).
    pub vetting: crate::vetting::Vetting,
    /// Per tool (by its name at the upstream): another name, description, and
    /// arguments fixed or defaulted by the gateway.
    pub overrides: BTreeMap<String, ToolOverride>,
    /// Where each principal's own credential for this upstream is kept, when calls go
    /// out with the caller's credential rather than the upstream's (HTTP only; each
    /// principal then has a session of its own).
    pub personal: Personal,
}

/// Whose MCP session the calls of an HTTP upstream run in. What an upstream keeps per
/// session (a counter, a login, a cart) is seen by everyone who shares the session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionScope {
    /// One session for every caller: the supervisor's own, which lists the tools.
    Shared,
    /// One session per tenant (the default for the operator's HTTP upstreams): no state
    /// an upstream keeps per session crosses tenants.
    #[default]
    PerTenant,
    /// One session per principal.
    PerPrincipal,
}

/// How to reach an upstream. Its `Debug` form names the keys of `env` and `headers` but
/// never their values, nor the bearer token.
#[derive(Clone)]
pub enum UpstreamTransport {
    /// A child process speaking MCP on stdin/stdout. Its environment is only `env` (plus
    /// `PATH`), never the gateway's own.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint, with static headers and an optional bearer token.
    /// `client` is the HTTP client to reach it with (a tenant's upstream gets one that
    /// connects only to vetted addresses); a plain one when `None`.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        bearer: Option<String>,
        client: Option<reqwest::Client>,
    },
}

impl std::fmt::Debug for UpstreamTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamTransport::Stdio {
                command,
                args,
                env,
                cwd,
            } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            UpstreamTransport::Http {
                url,
                headers,
                bearer,
                ..
            } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>())
                .field("bearer", &bearer.as_ref().map(|_| "***"))
                .finish(),
        }
    }
}

impl UpstreamConfig {
    pub fn prefix(&self) -> String {
        self.prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", self.name))
    }

    /// What the catalog files this upstream's resources and prompts under.
    pub(crate) fn source(&self) -> crate::catalog::Source<'_> {
        crate::catalog::Source {
            name: &self.name,
            owner: self.owner,
            prefix: self.prefix(),
            timeout: self.default_timeout,
        }
    }
}

/// An upstream's name: `^[A-Za-z0-9_.-]{1,32}$`.
pub fn is_valid_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The most globs one `allow` or `deny` list may hold; each is at most as long as any
/// glob over tool names (core's `MAX_PATTERN_BYTES`, as for agents' toolsets). A list
/// is matched as one set, built on every listing; its cost grows with both: a single
/// 1 MB glob took 1 s to build and then failed, 100 globs of 128 bytes take ~10 ms.
pub const MAX_GLOBS: usize = 100;
pub use toolgate_core::toolset::MAX_PATTERN_BYTES as MAX_GLOB_BYTES;

/// What is wrong with one `allow` or `deny` list: each invalid glob by its index, then
/// (`None`) the list as a whole, too long or too large to match as one set.
pub fn glob_problems(patterns: &[String]) -> Vec<(Option<usize>, String)> {
    let mut problems: Vec<(Option<usize>, String)> = patterns
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            if p.len() > MAX_GLOB_BYTES {
                return Some((Some(i), format!("longer than {MAX_GLOB_BYTES} bytes")));
            }
            Some((Some(i), globset::Glob::new(p).err()?.to_string()))
        })
        .collect();
    if patterns.len() > MAX_GLOBS {
        problems.push((None, format!("at most {MAX_GLOBS} globs")));
    } else if problems.is_empty()
        && let Err(err) = globs(patterns)
    {
        problems.push((None, format!("the globs cannot be matched together: {err}")));
    }
    problems
}

/// Whether a source's tool of this (remote, unprefixed) name is offered: matched by an
/// `allow` glob (any name when there are none) and by no `deny` glob. `None` when a
/// glob is invalid.
pub fn admitted(allow: &[String], deny: &[String]) -> Option<impl Fn(&str) -> bool + use<>> {
    let (Ok(allow_set), Ok(deny_set)) = (globs(allow), globs(deny)) else {
        return None;
    };
    let any = allow.is_empty();
    Some(move |name: &str| (any || allow_set.is_match(name)) && !deny_set.is_match(name))
}

fn globs(patterns: &[String]) -> Result<globset::GlobSet, globset::Error> {
    let mut set = globset::GlobSetBuilder::new();
    for pattern in patterns {
        set.add(globset::Glob::new(pattern)?);
    }
    set.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(globs: &[&str]) -> Vec<String> {
        globs.iter().map(|g| (*g).to_owned()).collect()
    }

    #[test]
    fn a_glob_list_is_valid_bounded_and_matchable_as_one_set() {
        assert!(glob_problems(&list(&["search*", "get_?"])).is_empty());
        let bad = glob_problems(&list(&["ok*", "a[b"]));
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert_eq!(bad[0].0, Some(1));
        let many: Vec<String> = (0..=MAX_GLOBS).map(|i| format!("t{i}*")).collect();
        assert_eq!(
            glob_problems(&many),
            vec![(None, format!("at most {MAX_GLOBS} globs"))]
        );
        assert!(glob_problems(&many[..MAX_GLOBS]).is_empty());
        // A long glob is refused without being parsed, nor repeated.
        let long = glob_problems(&["a*".repeat(MAX_GLOB_BYTES)]);
        assert_eq!(
            long,
            vec![(Some(0), format!("longer than {MAX_GLOB_BYTES} bytes"))]
        );
    }
}
