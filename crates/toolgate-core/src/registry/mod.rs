//! Every tool the gateway knows, by unique name.
//!
//! Sources (built-ins, upstream MCP servers) register and unregister tools at any time.
//! Each tool's input schema is compiled once, at registration, so the per-call path only
//! runs the compiled validator.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::secrets::{SchemaSecrets, SecretNames};
use crate::spec::is_valid_tool_name;
use crate::{TenantId, Tool, ToolError, ToolSpec, Violation};

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tool name {0:?} is invalid: names match ^[A-Za-z0-9_.-]{{1,64}}$")]
    InvalidName(String),
    #[error("a tool named {0:?} is already registered")]
    Duplicate(String),
    /// Differs from a tool already seen by the same callers only by case, by `-`, `.`
    /// against `_`, or by look-alike characters (`0`/`o`, `1`/`l`/`i`): one could pass
    /// for the other, to a person or a model.
    #[error(
        "tool name {name:?} could be mistaken for {existing:?} (differs only by case or look-alike characters)"
    )]
    Confusable { name: String, existing: String },
    #[error("tool {name:?} has an invalid input schema: {reason}")]
    InvalidSchema { name: String, reason: String },
}

/// A tool in the registry, with its compiled input validator.
pub struct RegisteredTool {
    pub tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
    /// The argument fields its input schema marks secret.
    secrets: SchemaSecrets,
}

impl RegisteredTool {
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
    }

    /// `args` as the audit keeps them: the fields its schema or declaration marks secret,
    /// and those `names` matches, masked.
    pub fn mask(&self, args: &Value, names: &SecretNames) -> Value {
        crate::secrets::mask(args, &self.secrets, &self.spec().secret_fields, names)
    }

    /// See [`Tool::available`].
    pub fn available(&self) -> bool {
        self.tool.available()
    }

    /// Checks `args` against the input schema, listing every violation with its JSON
    /// pointer. Messages never echo the offending value (it may be a secret).
    pub fn validate(&self, args: &Value) -> Result<(), ToolError> {
        if self.validator.is_valid(args) {
            return Ok(());
        }
        let violations: Vec<Violation> = self
            .validator
            .iter_errors(args)
            .flat_map(|e| {
                let message = e.masked().to_string();
                violation_pointers(&e)
                    .into_iter()
                    .map(move |pointer| Violation {
                        pointer,
                        message: message.clone(),
                    })
            })
            .collect();
        let summary = match violations.as_slice() {
            [one] => format!(
                "arguments do not match the input schema of {}: {} at \"{}\"",
                self.spec().name,
                one.message,
                one.pointer
            ),
            many => format!(
                "arguments do not match the input schema of {}: {} violations",
                self.spec().name,
                many.len()
            ),
        };
        Err(ToolError::invalid_arguments(summary)
            .with_violations(violations)
            .with_suggestion(
                "fix the listed fields and call again; the tool's input schema is in its listing",
            ))
    }
}

/// Where a violation is, as JSON pointers: the value's own, except for a missing required
/// property or unexpected properties, which are pointed at by name (the object holding
/// them is not what the caller must fix).
fn violation_pointers(error: &jsonschema::ValidationError<'_>) -> Vec<String> {
    use jsonschema::error::ValidationErrorKind as Kind;
    let at = error.instance_path().to_string();
    let child = |name: &str| format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
    match error.kind() {
        Kind::Required {
            property: Value::String(name),
        } => vec![child(name)],
        Kind::AdditionalProperties { unexpected } if !unexpected.is_empty() => {
            unexpected.iter().map(|name| child(name)).collect()
        }
        _ => vec![at],
    }
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.spec().name)
            .finish()
    }
}

/// Whose a tool is: every tenant's (built-ins, operator-configured upstreams) or one
/// tenant's own (an upstream that tenant added).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    Everyone,
    Tenant(TenantId),
}

type Named = BTreeMap<String, Arc<RegisteredTool>>;

#[derive(Default)]
struct Tools {
    shared: Named,
    tenants: HashMap<TenantId, Named>,
}

impl Tools {
    fn of(&mut self, owner: Owner) -> &mut Named {
        match owner {
            Owner::Everyone => &mut self.shared,
            Owner::Tenant(tenant) => self.tenants.entry(tenant).or_default(),
        }
    }

    /// Forgets a tenant left with no tools of its own.
    fn prune(&mut self, owner: Owner) {
        if let Owner::Tenant(tenant) = owner
            && self.tenants.get(&tenant).is_some_and(Named::is_empty)
        {
            self.tenants.remove(&tenant);
        }
    }

    /// Whether `name` is taken for `owner`: a tenant's tool may not take the name of a
    /// tool every tenant sees.
    fn taken(&self, owner: Owner, name: &str) -> bool {
        self.shared.contains_key(name)
            || matches!(owner, Owner::Tenant(t) if self.tenants.get(&t).is_some_and(|m| m.contains_key(name)))
    }

    /// What the tools `owner`'s callers see look like: each [`skeleton`] and the first
    /// name (shared tools first, by name) that has it. Made once for many names: made
    /// for each, a listing of n tools cost n² skeletons under the registry's write lock
    /// (10,000 tools: seconds in which no call anywhere could find its tool).
    fn looks(&self, owner: Owner) -> HashMap<String, String> {
        let own = match owner {
            Owner::Tenant(t) => self.tenants.get(&t),
            Owner::Everyone => None,
        };
        let mut looks = HashMap::new();
        for name in self
            .shared
            .keys()
            .chain(own.into_iter().flat_map(|m| m.keys()))
        {
            looks.entry(skeleton(name)).or_insert_with(|| name.clone());
        }
        looks
    }

    /// Why `name` may not join `owner`'s tools: taken, or confusable with a tool the same
    /// callers see (`looks`, from [`looks`](Self::looks)).
    fn refuse(
        &self,
        owner: Owner,
        name: &str,
        looks: &HashMap<String, String>,
    ) -> Option<RegistryError> {
        if self.taken(owner, name) {
            return Some(RegistryError::Duplicate(name.to_owned()));
        }
        looks
            .get(&skeleton(name))
            .map(|existing| RegistryError::Confusable {
                name: name.to_owned(),
                existing: existing.clone(),
            })
    }
}

/// What a tool name looks like: lower case, `-` and `.` as `_`, `0` as `o`, `1` and `i`
/// as `l`, `5` as `s`. Two names with one skeleton could pass for each other.
pub fn skeleton(name: &str) -> String {
    name.chars()
        .map(|c| match c.to_ascii_lowercase() {
            '-' | '.' => '_',
            '0' => 'o',
            '1' | 'i' => 'l',
            '5' => 's',
            other => other,
        })
        .collect()
}

/// The set of all registered tools, each owned by everyone or by one tenant. A tenant
/// sees the shared tools and its own, never another tenant's. Names are unique among
/// what one tenant sees: a tenant's tool cannot take a shared tool's name (a shared tool
/// registered later under a tenant's name hides it). Cheap to share behind an `Arc`;
/// reads take a short read lock and clone an `Arc`.
#[derive(Default)]
pub struct Registry {
    tools: RwLock<Tools>,
    /// Every change, for adapters that tell clients (MCP `list_changed`).
    log: ChangeLog,
}

/// Changes to something each owner (everyone, or one tenant) has a part of — the
/// registry's tools, upstreams' resources and prompts — for adapters that tell clients:
/// every change wakes the [`subscribe`](Self::subscribe)rs, and
/// [`generation`](Self::generation) says whether a tenant would notice.
pub struct ChangeLog {
    version: tokio::sync::watch::Sender<u64>,
    /// How many times each owner's part changed.
    per_owner: std::sync::Mutex<HashMap<Owner, u64>>,
}

impl Default for ChangeLog {
    fn default() -> Self {
        Self {
            version: tokio::sync::watch::Sender::new(0),
            per_owner: std::sync::Mutex::default(),
        }
    }
}

impl ChangeLog {
    /// `owner`'s part changed.
    pub fn changed(&self, owner: Owner) {
        *self
            .per_owner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(owner)
            .or_default() += 1;
        self.version.send_modify(|v| *v += 1);
    }

    /// Wakes on every change, whoever's part changed.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// Grows with every change to what `tenant` sees (everyone's part and its own), and
    /// only then.
    pub fn generation(&self, tenant: TenantId) -> u64 {
        let per_owner = self.per_owner.lock().unwrap_or_else(|p| p.into_inner());
        let of = |owner| per_owner.get(&owner).copied().unwrap_or(0);
        of(Owner::Everyone) + of(Owner::Tenant(tenant))
    }
}

/// `schema` compiled for checking callers' values, or why it cannot be.
///
/// Its `pattern`s run on the `regex` crate's engine, in time linear in the input: with
/// the backtracking engine jsonschema takes by default, a pattern with backreferences or
/// lookaround (from an upstream, or a tenant's agent) took 1.7 s of a runtime thread
/// for 40 strings of 25 characters, and a whole request body of them minutes. A schema
/// whose patterns need those features is refused, saying so.
pub fn schema_validator(schema: &Value) -> Result<jsonschema::Validator, String> {
    let linear = jsonschema::PatternOptions::regex();
    jsonschema::options()
        .with_pattern_options(linear)
        .build(schema)
        .map_err(|e| {
            if jsonschema::validator_for(schema).is_ok() {
                format!(
                    "{e}: a pattern that needs backreferences or lookaround, which toolgate does not run (matching them can take exponential time on a caller's input)"
                )
            } else {
                e.to_string()
            }
        })
}

fn compile(tool: Arc<dyn Tool>) -> Result<RegisteredTool, RegistryError> {
    let spec = tool.spec();
    if !is_valid_tool_name(&spec.name) {
        return Err(RegistryError::InvalidName(spec.name.clone()));
    }
    let validator =
        schema_validator(&spec.input_schema).map_err(|reason| RegistryError::InvalidSchema {
            name: spec.name.clone(),
            reason,
        })?;
    let secrets = SchemaSecrets::of(&spec.input_schema);
    Ok(RegisteredTool {
        tool,
        validator,
        secrets,
    })
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes whenever a tool is registered or unregistered, whoever owns it; see
    /// [`generation`](Self::generation) for whether `tenant` would notice.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.log.subscribe()
    }

    /// Tells whoever sees `owner`'s tools that their list changed though no declaration
    /// did: a source's tools became unavailable, or available again.
    pub fn touch(&self, owner: Owner) {
        self.log.changed(owner);
    }

    /// Grows with every change to what `tenant` sees (shared tools and its own), and
    /// only then.
    pub fn generation(&self, tenant: TenantId) -> u64 {
        self.log.generation(tenant)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Tools> {
        self.tools
            .write()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Tools> {
        self.tools
            .read()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Adds a tool every tenant sees (see [`register_as`](Self::register_as)).
    pub fn register(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        self.register_as(Owner::Everyone, tool)
    }

    /// Adds a tool for `owner`. Fails on an invalid name, a name already taken, or an
    /// input schema that does not compile. Compiling is CPU work: call from
    /// `spawn_blocking` when registering many tools from async code.
    pub fn register_as(&self, owner: Owner, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let registered = compile(tool)?;
        let name = registered.spec().name.clone();
        let mut tools = self.write();
        if let Some(refused) = tools.refuse(owner, &name, &tools.looks(owner)) {
            return Err(refused);
        }
        tools.of(owner).insert(name, Arc::new(registered));
        drop(tools);
        self.log.changed(owner);
        Ok(())
    }

    /// Swaps `owner`'s tools named `old` for `new` in one step, so no caller sees neither
    /// (a source re-listing its tools). Each new tool is checked as by
    /// [`register_as`](Self::register_as); the result says, per new tool, whether it went
    /// in.
    pub fn replace(
        &self,
        owner: Owner,
        old: &[String],
        new: Vec<Arc<dyn Tool>>,
    ) -> Vec<(String, Result<(), RegistryError>)> {
        let compiled: Vec<(String, Result<RegisteredTool, RegistryError>)> = new
            .into_iter()
            .map(|tool| (tool.spec().name.clone(), compile(tool)))
            .collect();
        let mut tools = self.write();
        let previous: HashMap<String, Arc<RegisteredTool>> = old
            .iter()
            .filter_map(|name| Some((name.clone(), tools.of(owner).remove(name)?)))
            .collect();
        let mut same = true;
        let mut looks = tools.looks(owner);
        let results: Vec<_> = compiled
            .into_iter()
            .map(|(name, checked)| {
                let result = checked.and_then(|registered| {
                    if let Some(refused) = tools.refuse(owner, &name, &looks) {
                        return Err(refused);
                    }
                    same &= previous
                        .get(&name)
                        .is_some_and(|was| was.spec() == registered.spec());
                    tools.of(owner).insert(name.clone(), Arc::new(registered));
                    looks.entry(skeleton(&name)).or_insert_with(|| name.clone());
                    Ok(())
                });
                (name, result)
            })
            .collect();
        tools.prune(owner);
        drop(tools);
        // The same declarations again (a source re-listed after a reconnection, or for
        // its resources' sake) are no news to anyone's tool list.
        let listed = results.iter().filter(|(_, r)| r.is_ok()).count();
        if !(same && listed == previous.len()) {
            self.log.changed(owner);
        }
        results
    }

    /// Removes `owner`'s tool; returns whether it was there. Calls already running
    /// finish.
    pub fn unregister(&self, owner: Owner, name: &str) -> bool {
        let mut tools = self.write();
        let removed = tools.of(owner).remove(name).is_some();
        tools.prune(owner);
        drop(tools);
        if removed {
            self.log.changed(owner);
        }
        removed
    }

    /// The named tool as `tenant` sees it: a shared tool, or one of the tenant's own.
    pub fn get(&self, tenant: TenantId, name: &str) -> Option<Arc<RegisteredTool>> {
        let tools = self.read();
        tools
            .shared
            .get(name)
            .or_else(|| tools.tenants.get(&tenant)?.get(name))
            .cloned()
    }

    /// Every tool `tenant` sees, sorted by name.
    pub fn list(&self, tenant: TenantId) -> Vec<Arc<RegisteredTool>> {
        let tools = self.read();
        let Some(own) = tools.tenants.get(&tenant) else {
            return tools.shared.values().cloned().collect();
        };
        let mut merged: Named = own.clone();
        merged.extend(tools.shared.iter().map(|(k, v)| (k.clone(), v.clone())));
        merged.into_values().collect()
    }

    /// The longest any tool, shared or a tenant's, may run: its `max_timeout` (progress
    /// extends a call no further).
    pub fn longest_timeout(&self) -> std::time::Duration {
        let tools = self.read();
        tools
            .shared
            .values()
            .chain(tools.tenants.values().flat_map(|named| named.values()))
            .map(|tool| tool.spec().max_timeout)
            .max()
            .unwrap_or(crate::spec::DEFAULT_MAX_TIMEOUT)
    }
}

#[cfg(test)]
mod tests;
