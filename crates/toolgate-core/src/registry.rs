//! Every tool the gateway knows, by unique name.
//!
//! Sources (built-ins, upstream MCP servers) register and unregister tools at any time.
//! Each tool's input schema is compiled once, at registration, so the per-call path only
//! runs the compiled validator.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use serde_json::Value;

use crate::spec::is_valid_tool_name;
use crate::{Tool, ToolError, ToolSpec, Violation};

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tool name {0:?} is invalid: names match ^[A-Za-z0-9_.-]{{1,64}}$")]
    InvalidName(String),
    #[error("a tool named {0:?} is already registered")]
    Duplicate(String),
    #[error("tool {name:?} has an invalid input schema: {reason}")]
    InvalidSchema { name: String, reason: String },
}

/// A tool in the registry, with its compiled input validator.
pub struct RegisteredTool {
    pub tool: Arc<dyn Tool>,
    validator: jsonschema::Validator,
}

impl RegisteredTool {
    pub fn spec(&self) -> &ToolSpec {
        self.tool.spec()
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
            .map(|e| Violation {
                pointer: e.instance_path().to_string(),
                message: e.masked().to_string(),
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

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("name", &self.spec().name)
            .finish()
    }
}

/// The set of all registered tools. Cheap to share behind an `Arc`; reads take a short
/// read lock and clone an `Arc`.
pub struct Registry {
    tools: RwLock<BTreeMap<String, Arc<RegisteredTool>>>,
    /// Bumped on every change, for adapters that tell clients (MCP `list_changed`).
    version: tokio::sync::watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            tools: RwLock::default(),
            version: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Wakes whenever a tool is registered or unregistered.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.version.subscribe()
    }

    fn changed(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    /// Adds a tool. Fails on an invalid name, a name already taken, or an input schema
    /// that does not compile. Compiling is CPU work: call from `spawn_blocking` when
    /// registering many tools from async code.
    pub fn register(&self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let spec = tool.spec();
        if !is_valid_tool_name(&spec.name) {
            return Err(RegistryError::InvalidName(spec.name.clone()));
        }
        let validator = jsonschema::validator_for(&spec.input_schema).map_err(|e| {
            RegistryError::InvalidSchema {
                name: spec.name.clone(),
                reason: e.to_string(),
            }
        })?;
        let name = spec.name.clone();
        let mut tools = self
            .tools
            .write()
            .unwrap_or_else(|poison| poison.into_inner());
        if tools.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        tools.insert(name, Arc::new(RegisteredTool { tool, validator }));
        drop(tools);
        self.changed();
        Ok(())
    }

    /// Swaps the tools named `old` for `new` in one step, so no caller sees neither (a
    /// source re-listing its tools). Each new tool is checked as by
    /// [`register`](Self::register); the result says, per new tool, whether it went in.
    pub fn replace(
        &self,
        old: &[String],
        new: Vec<Arc<dyn Tool>>,
    ) -> Vec<(String, Result<(), RegistryError>)> {
        let compiled: Vec<(String, Result<RegisteredTool, RegistryError>)> = new
            .into_iter()
            .map(|tool| {
                let name = tool.spec().name.clone();
                let checked = if is_valid_tool_name(&name) {
                    jsonschema::validator_for(&tool.spec().input_schema)
                        .map(|validator| RegisteredTool { tool, validator })
                        .map_err(|e| RegistryError::InvalidSchema {
                            name: name.clone(),
                            reason: e.to_string(),
                        })
                } else {
                    Err(RegistryError::InvalidName(name.clone()))
                };
                (name, checked)
            })
            .collect();
        let mut tools = self
            .tools
            .write()
            .unwrap_or_else(|poison| poison.into_inner());
        for name in old {
            tools.remove(name);
        }
        let results = compiled
            .into_iter()
            .map(|(name, checked)| {
                let result = checked.and_then(|registered| {
                    if tools.contains_key(&name) {
                        return Err(RegistryError::Duplicate(name.clone()));
                    }
                    tools.insert(name.clone(), Arc::new(registered));
                    Ok(())
                });
                (name, result)
            })
            .collect();
        drop(tools);
        self.changed();
        results
    }

    /// Removes a tool; returns whether it was there. Calls already running finish.
    pub fn unregister(&self, name: &str) -> bool {
        let mut tools = self
            .tools
            .write()
            .unwrap_or_else(|poison| poison.into_inner());
        let removed = tools.remove(name).is_some();
        drop(tools);
        if removed {
            self.changed();
        }
        removed
    }

    pub fn get(&self, name: &str) -> Option<Arc<RegisteredTool>> {
        let tools = self
            .tools
            .read()
            .unwrap_or_else(|poison| poison.into_inner());
        tools.get(name).cloned()
    }

    /// Every tool, sorted by name.
    pub fn list(&self) -> Vec<Arc<RegisteredTool>> {
        let tools = self
            .tools
            .read()
            .unwrap_or_else(|poison| poison.into_inner());
        tools.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::{CallContext, ToolOutput};

    struct Named(ToolSpec);

    #[async_trait]
    impl Tool for Named {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        async fn call(&self, _: &CallContext, _: Value) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::default())
        }
    }

    fn tool(name: &str, schema: Value) -> Arc<dyn Tool> {
        Arc::new(Named(ToolSpec::new(name, "test tool", schema)))
    }

    #[test]
    fn duplicate_names_are_refused() {
        let reg = Registry::new();
        reg.register(tool("a", json!({"type": "object"})))
            .expect("first registration");
        let err = reg
            .register(tool("a", json!({"type": "object"})))
            .expect_err("duplicate");
        assert!(matches!(err, RegistryError::Duplicate(n) if n == "a"));
    }

    #[test]
    fn replace_swaps_a_sources_tools_and_keeps_others_names() {
        let reg = Registry::new();
        let obj = || json!({"type": "object"});
        for name in ["up__a", "up__b", "local"] {
            reg.register(tool(name, obj())).expect("register");
        }
        let results = reg.replace(
            &["up__a".into(), "up__b".into()],
            vec![
                tool("up__b", obj()),
                tool("up__c", obj()),
                tool("local", obj()),
            ],
        );
        let ok: Vec<(&str, bool)> = results
            .iter()
            .map(|(n, r)| (n.as_str(), r.is_ok()))
            .collect();
        assert_eq!(ok, [("up__b", true), ("up__c", true), ("local", false)]);
        let names: Vec<String> = reg.list().iter().map(|t| t.spec().name.clone()).collect();
        assert_eq!(names, ["local", "up__b", "up__c"]);
    }

    #[test]
    fn invalid_names_and_schemas_are_refused() {
        let reg = Registry::new();
        assert!(matches!(
            reg.register(tool("bad name", json!({}))),
            Err(RegistryError::InvalidName(_))
        ));
        assert!(matches!(
            reg.register(tool("t", json!({"type": "no-such-type"}))),
            Err(RegistryError::InvalidSchema { .. })
        ));
        assert!(reg.list().is_empty());
    }

    #[test]
    fn validation_lists_every_violation_with_its_pointer() {
        let reg = Registry::new();
        let schema = json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}},
            "required": ["path"],
            "additionalProperties": false
        });
        reg.register(tool("t", schema)).expect("register");
        let t = reg.get("t").expect("registered");
        let err = t
            .validate(&json!({"limit": 0, "extra": "s3cret-value"}))
            .expect_err("invalid");
        let pointers: Vec<&str> = err.violations.iter().map(|v| v.pointer.as_str()).collect();
        assert_eq!(err.violations.len(), 3, "{:?}", err.violations);
        assert!(pointers.contains(&"/limit"), "{pointers:?}");
        assert!(pointers.contains(&""), "{pointers:?}");
        let text = serde_json::to_string(&err).expect("serializes");
        assert!(
            !text.contains("s3cret-value"),
            "values must not be echoed: {text}"
        );
    }
}
