//! Listing an upstream's tools: vetted, overridden and registered under its prefix;
//! unregistered when it goes.

use super::*;
use crate::vetting::Verdict;

/// A listing lets other tasks run after this many tools.
const YIELD_EVERY: usize = 64;

/// At most this many notes are kept from one listing; an upstream listing thousands of
/// unusable tools gets one more note saying how many were left out.
const MAX_NOTES: usize = 100;

/// Why listed tools were not offered, for the upstream's status: names are the
/// upstream's, so they are shown escaped and cut, as in the logs.
#[derive(Default)]
pub(super) struct Notes {
    kept: Vec<String>,
    more: usize,
}

impl Notes {
    fn add(&mut self, name: &str, why: impl std::fmt::Display) {
        if self.kept.len() < MAX_NOTES {
            self.kept
                .push(format!("{} not offered: {why}", shown(name)));
        } else {
            self.more += 1;
        }
    }

    pub(super) fn into_vec(mut self) -> Vec<String> {
        if self.more > 0 {
            self.kept
                .push(format!("and {} more tools not offered", self.more));
        }
        self.kept
    }
}

/// The definitions an upstream's tools had at its last listing (each one's hash, and
/// whether it was the pinned one), and how many listings in a row changed one, named a
/// new tool or failed. A definition listed again as it was pinned is offered without
/// asking the store. Each change is pinned and audited (in every tenant's chain, for an operator's
/// upstream), so an upstream whose definitions change at every listing is listed less
/// and less often: kept across reconnections, which would otherwise list it anew four
/// times a second.
#[derive(Default)]
pub(super) struct Drift {
    hashes: HashMap<String, (String, bool)>,
    streak: u32,
}

/// The longest pause between listings of an upstream whose definitions keep changing.
const MAX_RELIST_PAUSE: Duration = Duration::from_secs(300);

impl Drift {
    /// A listing failed: counted as one that changed (an upstream announcing a change
    /// after each listing it fails would otherwise be read to its bounds, up to 16 MiB,
    /// every second).
    pub(super) fn failed(&mut self) {
        self.streak = self.streak.saturating_add(1);
    }

    /// How long after a listing the next may come: [`RELIST_AT_MOST_EVERY`], doubled for
    /// each listing in a row that changed a definition (or failed), up to
    /// [`MAX_RELIST_PAUSE`].
    pub(super) fn pause(&self) -> Duration {
        RELIST_AT_MOST_EVERY
            .saturating_mul(1 << self.streak.min(16))
            .min(MAX_RELIST_PAUSE)
    }
}

/// An upstream's name as logs and notes show it: escaped and cut, so that it cannot write
/// lines of its own.
fn shown(name: &str) -> String {
    let cut: String = name.chars().take(128).collect();
    let quoted = format!("{cut:?}");
    if cut.len() < name.len() {
        format!("{quoted}…")
    } else {
        quoted
    }
}

/// Lists every page of the upstream's tools and puts those the allow/deny lists admit in
/// place of the ones registered before, in one step; a name taken by another tool is
/// reported, never overwritten. Returns why listed tools were left out.
pub(super) async fn rediscover(
    config: &UpstreamConfig,
    peer: &Peer<RoleClient>,
    registry: &Arc<Registry>,
    routes: &Arc<Routes>,
    pool: &Option<Arc<SessionPool>>,
    registered: &mut Vec<String>,
    drift: &mut Drift,
) -> Result<Notes, ServiceError> {
    let mut notes = Notes::default();
    let mut hashes = HashMap::new();
    let mut changed = false;
    let tools = pages::all("tools", |params| async move {
        let page = peer.list_tools(Some(params)).await?;
        Ok((page.tools, page.next_cursor))
    })
    .await?;
    // Configurations are checked before they get here; should a bad glob slip through,
    // nothing is registered rather than a `deny` that denies nothing.
    let Some(admitted) = admitted(&config.allow, &config.deny) else {
        tracing::error!(upstream = %config.name, "an allow or deny glob is invalid; no tool of this upstream is offered");
        unregister(config, registry, registered);
        notes
            .kept
            .push("no tool offered: an allow or deny glob is invalid".to_owned());
        return Ok(notes);
    };
    let prefix = config.prefix();
    // Tools of other sources the same callers see: a description naming one may be
    // steering the model to it.
    let others: Vec<String> = match &config.vetting.0 {
        None => Vec::new(),
        Some(_) => {
            let ours: std::collections::HashSet<&String> = registered.iter().collect();
            let seen = match config.owner {
                Owner::Tenant(tenant) => registry.list(tenant),
                Owner::Everyone => registry.list(toolgate_core::TenantId(uuid::Uuid::nil())),
            };
            seen.iter()
                .map(|t| t.spec().name.clone())
                .filter(|n| !ours.contains(n))
                .collect()
        }
    };
    let others = crate::vetting::Others::new(&others);
    let mut found: Vec<Arc<dyn Tool>> = Vec::new();
    // Admitted tools, in listing order: the remote name, the spec, the override applied
    // and (vetting) the definition's hash and its place in `listed` (none: pinned as
    // listed last time).
    let mut candidates = Vec::new();
    let mut listed = crate::vetting::Listed {
        owner: config.owner,
        upstream: config.name.clone(),
        definitions: Vec::new(),
    };
    // One skeleton per name in this listing: a look-alike of a tool offered before (or
    // listed earlier) is refused, even while that tool is withheld for approval.
    let mut looks: HashMap<String, String> = registered
        .iter()
        .map(|n| (toolgate_core::registry::skeleton(n), n.clone()))
        .collect();
    for (at, tool) in tools.into_iter().enumerate() {
        // Each tool is hashed, searched and its schema built: thousands of them would
        // hold this worker (and the calls queued on it) for a few hundred milliseconds.
        if at % YIELD_EVERY == YIELD_EVERY - 1 {
            tokio::task::yield_now().await;
        }
        let remote = tool.name.to_string();
        if !admitted(&remote) {
            continue;
        }
        let applied = config.overrides.get(&remote).cloned();
        let name = format!(
            "{prefix}{}",
            applied
                .as_ref()
                .and_then(|o| o.name.as_deref())
                .unwrap_or(&remote)
        );
        if !is_valid_tool_name(&name) {
            tracing::warn!(upstream = %config.name, tool = %shown(&name), "skipped an upstream tool whose name is not valid here");
            notes.add(&name, "its name is not valid here");
            continue;
        }
        let look = toolgate_core::registry::skeleton(&name);
        match looks.get(&look) {
            Some(other) if other != &name => {
                tracing::warn!(upstream = %config.name, tool = %name, like = %other, "refused an upstream tool whose name could pass for another");
                notes.add(&name, format_args!("its name could pass for {other}"));
                continue;
            }
            _ => {
                looks.insert(look, name.clone());
            }
        }
        let mut spec = spec_for(config, &name, &tool);
        if let Some(o) = &applied {
            if let Some(description) = &o.description {
                spec.description.clone_from(description);
            }
            spec.input_schema = o.schema(&spec.input_schema);
        }
        let mut vetted = None;
        if config.vetting.0.is_some() {
            let definition = crate::vetting::definition(&tool);
            let hash = toolgate_core::audit::hash_json(&definition);
            let before = drift.hashes.get(&remote);
            // A tool not listed before counts too, except at the first listing: names
            // made up anew at every listing would each pin a new row.
            changed |= match before {
                Some((was, _)) => was != &hash,
                None => !drift.hashes.is_empty(),
            };
            let asked = if matches!(before, Some((was, true)) if was == &hash) {
                None
            } else {
                listed.definitions.push(crate::vetting::Definition {
                    tool: remote.clone(),
                    exported: name.clone(),
                    hash: hash.clone(),
                    findings: crate::vetting::findings(
                        tool.description.as_deref().unwrap_or_default(),
                        &others,
                    ),
                    definition,
                });
                Some(listed.definitions.len() - 1)
            };
            vetted = Some((hash, asked));
        }
        candidates.push((remote, spec, applied, vetted));
    }
    // Vetted together: the store is read once for the listing, and its new pins written
    // together.
    let verdicts = match &config.vetting.0 {
        Some(vet) if !listed.definitions.is_empty() => vet.vet(&listed, config.pin).await,
        _ => Vec::new(),
    };
    for (remote, spec, applied, vetted) in candidates {
        if let Some((hash, asked)) = vetted {
            // A verdict missing (not from `Pins`, which gives one each) withholds.
            let verdict = asked.map_or(Verdict::Pinned, |at| {
                verdicts.get(at).copied().unwrap_or(Verdict::Withheld)
            });
            hashes.insert(remote.clone(), (hash, verdict == Verdict::Pinned));
            let name = &spec.name;
            match verdict {
                Verdict::Pinned | Verdict::Offered => {}
                Verdict::Withheld => {
                    tracing::warn!(upstream = %config.name, tool = %name, "upstream tool withheld: its definition awaits approval");
                    notes.add(name, "its definition awaits approval");
                    continue;
                }
                Verdict::Crowded => {
                    notes.add(
                        name,
                        format_args!(
                            "it is new, and its upstream holds {} pinned definitions, the most kept (deleting the upstream forgets them)",
                            crate::pins::MAX_PINS
                        ),
                    );
                    continue;
                }
            }
        }
        found.push(Arc::new(UpstreamTool {
            spec,
            upstream: config.name.clone(),
            remote,
            applied,
            peer: peer.clone(),
            routes: routes.clone(),
            pool: pool.clone(),
        }));
    }
    let previous = std::mem::take(registered);
    // Registering compiles each tool's input schema (10,000 tools: ~100 ms), on a thread
    // of its own rather than a worker the gateway's calls are queued on.
    let (owner, shared) = (config.owner, registry.clone());
    let replaced = tokio::task::spawn_blocking(move || shared.replace(owner, &previous, found))
        .await
        .unwrap_or_else(|err| {
            tracing::error!(upstream = %config.name, error = %err, "registering the upstream's tools failed");
            Vec::new()
        });
    for (name, result) in replaced {
        match result {
            Ok(()) => registered.push(name),
            Err(err) => {
                tracing::warn!(upstream = %config.name, tool = ?name, error = %err, "upstream tool not registered");
                notes.add(&name, &err);
            }
        }
    }
    tracing::info!(upstream = %config.name, tools = registered.len(), "upstream tools registered");
    drift.hashes = hashes;
    drift.streak = if changed {
        drift.streak.saturating_add(1)
    } else {
        0
    };
    if drift.streak >= 2 {
        tracing::warn!(upstream = %config.name, listings = drift.streak, "the upstream's tool definitions changed at every listing; listing it less often");
        notes.kept.push(format!(
            "its tool definitions changed at each of the last {} listings: it is listed again no sooner than {} s after the last",
            drift.streak,
            drift.pause().as_secs()
        ));
    }
    Ok(notes)
}

pub(super) fn unregister(
    config: &UpstreamConfig,
    registry: &Registry,
    registered: &mut Vec<String>,
) {
    registry.replace(config.owner, registered, Vec::new());
    registered.clear();
}

/// The gateway's declaration of an upstream tool. Risk follows the upstream's hints, read
/// the way the MCP specification defaults them (a tool that does not say it only reads is
/// taken to write, destructively, reaching the open world): read-only → low, destructive
/// → high, other writes → medium.
pub(super) fn spec_for(config: &UpstreamConfig, name: &str, tool: &rmcp::model::Tool) -> ToolSpec {
    let hints = tool.annotations.as_ref();
    let read_only = hints.and_then(|a| a.read_only_hint).unwrap_or(false);
    let destructive = !read_only && hints.and_then(|a| a.destructive_hint).unwrap_or(true);
    let effects = Effects {
        writes: !read_only,
        destructive,
        idempotent: hints.and_then(|a| a.idempotent_hint).unwrap_or(false),
        open_world: hints.and_then(|a| a.open_world_hint).unwrap_or(true),
    };
    let risk = if read_only {
        Risk::Low
    } else if destructive {
        Risk::High
    } else {
        Risk::Medium
    };
    let mut spec = ToolSpec::new(
        name,
        tool.description.as_deref().unwrap_or_default(),
        Value::Object((*tool.input_schema).clone()),
    )
    .with_category(format!("upstream.{}", config.name))
    .with_risk(risk, effects)
    .with_timeouts(config.default_timeout, config.max_timeout)
    .with_progress_extension(config.progress_extends);
    if let Some(title) = tool
        .title
        .as_deref()
        .or_else(|| hints.and_then(|a| a.title.as_deref()))
    {
        spec = spec.with_title(title);
    }
    if let Some(output) = &tool.output_schema {
        spec = spec.with_output_schema(Value::Object((**output).clone()));
    }
    if let Some(meta) = &tool.meta {
        spec.vendor_meta = meta.0.clone();
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_whose_definitions_keep_changing_waits_longer_between_listings() {
        let mut drift = Drift::default();
        let pauses: Vec<u64> = (0..12)
            .map(|streak| {
                drift.streak = streak;
                drift.pause().as_secs()
            })
            .collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        drift.streak = u32::MAX;
        assert_eq!(drift.pause(), MAX_RELIST_PAUSE);
    }

    #[test]
    fn notes_are_bounded_and_show_names_escaped_and_cut() {
        let mut notes = Notes::default();
        notes.add("bad\nname", "its name is not valid here");
        notes.add(&"x".repeat(300), "too long");
        for i in 0..MAX_NOTES {
            notes.add(&format!("t{i}"), "refused");
        }
        let notes = notes.into_vec();
        assert_eq!(notes.len(), MAX_NOTES + 1);
        assert_eq!(
            notes[0],
            r#""bad\nname" not offered: its name is not valid here"#
        );
        assert_eq!(
            notes[1],
            format!("\"{}\"… not offered: too long", "x".repeat(128))
        );
        assert_eq!(notes[MAX_NOTES], "and 2 more tools not offered");
    }
}
