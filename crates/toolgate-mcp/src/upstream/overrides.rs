//! How the gateway presents an upstream tool: renamed, described anew, arguments
//! fixed or defaulted.

use super::*;

/// How the gateway presents one upstream tool: renamed, described anew, with some
/// arguments fixed (hidden from the schema callers see, always sent as set here; a
/// caller sending one is refused) or defaulted (sent when the caller gives none).
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ToolOverride {
    /// The tool's name after the upstream's prefix (the prefix still applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub fixed: serde_json::Map<String, Value>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub defaults: serde_json::Map<String, Value>,
}

impl ToolOverride {
    /// Problems with the overrides of an upstream whose tools are prefixed `prefix`,
    /// each with the field it concerns (`<tool>/name`, …): names that are not valid, or
    /// longer than 64 characters once prefixed (never cut short), or shared by two tools.
    pub fn problems(
        overrides: &BTreeMap<String, ToolOverride>,
        prefix: &str,
    ) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut names: BTreeMap<String, &String> = BTreeMap::new();
        for (tool, o) in overrides {
            if let Some(name) = &o.name {
                let full = format!("{prefix}{name}");
                if !is_valid_tool_name(&full) {
                    problems.push((
                        format!("{tool}/name"),
                        format!("{full:?} is not a valid tool name (1-64 letters, digits, '_', '.', '-', prefix included)"),
                    ));
                } else if let Some(other) = names.insert(full.clone(), tool) {
                    problems.push((
                        format!("{tool}/name"),
                        format!("{other} is renamed {full:?} too"),
                    ));
                }
            }
            if let Some(both) = o.fixed.keys().find(|k| o.defaults.contains_key(*k)) {
                problems.push((format!("{tool}/defaults/{both}"), "is fixed already".into()));
            }
        }
        problems
    }

    /// `schema` as callers see it: fixed arguments gone, defaulted ones optional and
    /// showing their default.
    pub(super) fn schema(&self, schema: &Value) -> Value {
        let mut schema = schema.clone();
        if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            for name in self.fixed.keys() {
                properties.remove(name);
            }
            for (name, value) in &self.defaults {
                if let Some(property) = properties.get_mut(name).and_then(Value::as_object_mut) {
                    property.insert("default".into(), value.clone());
                }
            }
        }
        if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|r| {
                r.as_str()
                    .is_none_or(|r| !self.fixed.contains_key(r) && !self.defaults.contains_key(r))
            });
        }
        schema
    }

    /// The arguments sent: the caller's, defaults filled in, fixed ones set.
    pub(super) fn arguments(
        &self,
        mut args: serde_json::Map<String, Value>,
    ) -> Result<serde_json::Map<String, Value>, ToolError> {
        if let Some(name) = self.fixed.keys().find(|k| args.contains_key(*k)) {
            return Err(ToolError::invalid_arguments(format!(
                "the argument {name:?} is set by the gateway for this tool and cannot be given"
            )));
        }
        for (name, value) in &self.defaults {
            args.entry(name.clone()).or_insert_with(|| value.clone());
        }
        args.extend(self.fixed.clone());
        Ok(args)
    }
}
