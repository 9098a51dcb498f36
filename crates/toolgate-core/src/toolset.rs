//! Toolsets: what one principal or one agent may see and call.
//!
//! A [`Toolset`] is a filter (name globs and categories). Scoping it to a caller with
//! [`Toolset::scope`] yields a [`ScopedToolset`], the capability the executor takes: a
//! code path that never resolved the caller's toolset has nothing to hand the executor.

use std::sync::Arc;

use globset::{Glob, GlobSet, GlobSetBuilder};

use crate::{AuthContext, RegisteredTool, Registry, TenantId};

/// One filter: a tool passes when its name matches a glob or its category is listed.
#[derive(Debug)]
struct Filter {
    names: GlobSet,
    categories: Vec<String>,
}

impl Filter {
    fn allows(&self, tool: &RegisteredTool) -> bool {
        let spec = tool.spec();
        self.names.is_match(&spec.name) || self.categories.contains(&spec.category)
    }
}

/// The most names (or globs), and categories, one toolset lists; the longest name or glob
/// (tool names have at most 64 characters). 256 globs of 128 bytes built into one set in
/// ~25-50 ms; unbounded, one 1 MB glob took a second.
pub const MAX_PATTERNS: usize = 256;
pub const MAX_PATTERN_BYTES: usize = 128;

/// A filter over the registry. Cheap to clone. Filters combine by intersection: a tool is
/// in the toolset only when every filter lets it through.
#[derive(Clone, Debug, Default)]
pub struct Toolset {
    filters: Vec<Arc<Filter>>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid tool pattern {pattern:?}: {reason}")]
pub struct ToolsetError {
    pub pattern: String,
    pub reason: String,
}

impl Toolset {
    /// Every registered tool.
    pub fn all() -> Self {
        Self::default()
    }

    /// Tools whose name matches one of `names` (exact names or globs such as `fs.*`) or
    /// whose category is in `categories`. Both empty means no tools at all. At most
    /// [`MAX_PATTERNS`] names of at most [`MAX_PATTERN_BYTES`] each: the globs are built
    /// into one set for every run, at a cost that grows with both.
    pub fn only<S: AsRef<str>>(names: &[S], categories: &[S]) -> Result<Self, ToolsetError> {
        if names.len() > MAX_PATTERNS || categories.len() > MAX_PATTERNS {
            return Err(ToolsetError {
                pattern: String::new(),
                reason: format!("at most {MAX_PATTERNS} names and {MAX_PATTERNS} categories"),
            });
        }
        let mut builder = GlobSetBuilder::new();
        for pattern in names {
            let pattern = pattern.as_ref();
            if pattern.len() > MAX_PATTERN_BYTES {
                return Err(ToolsetError {
                    pattern: pattern.chars().take(32).chain(['…']).collect(),
                    reason: format!("longer than {MAX_PATTERN_BYTES} bytes"),
                });
            }
            let glob = Glob::new(pattern).map_err(|e| ToolsetError {
                pattern: pattern.to_owned(),
                reason: e.kind().to_string(),
            })?;
            builder.add(glob);
        }
        let names = builder.build().map_err(|e| ToolsetError {
            pattern: String::new(),
            reason: e.to_string(),
        })?;
        let filter = Filter {
            names,
            categories: categories.iter().map(|c| c.as_ref().to_owned()).collect(),
        };
        Ok(Self {
            filters: vec![Arc::new(filter)],
        })
    }

    /// The tools in both `self` and `other` (an agent's toolset within its caller's).
    pub fn intersect(&self, other: &Toolset) -> Toolset {
        let mut filters = self.filters.clone();
        filters.extend(other.filters.iter().cloned());
        Toolset { filters }
    }

    pub fn allows(&self, tool: &RegisteredTool) -> bool {
        self.filters.iter().all(|f| f.allows(tool))
    }

    /// This toolset, bound to one caller over one registry.
    pub fn scope(&self, registry: Arc<Registry>, auth: &AuthContext) -> ScopedToolset {
        ScopedToolset {
            registry,
            toolset: self.clone(),
            tenant: auth.tenant,
        }
    }
}

/// A toolset bound to one caller's tenant: the only way to reach tools from the
/// executor.
#[derive(Clone)]
pub struct ScopedToolset {
    registry: Arc<Registry>,
    toolset: Toolset,
    tenant: TenantId,
}

impl ScopedToolset {
    pub fn tenant(&self) -> TenantId {
        self.tenant
    }

    /// Whether this toolset admits every tool (no filter at all).
    pub fn admits_all(&self) -> bool {
        self.toolset.filters.is_empty()
    }

    /// The named tool, if it exists and is in this toolset. Callers cannot tell the two
    /// apart, so names outside the toolset do not leak.
    pub fn get(&self, name: &str) -> Option<Arc<RegisteredTool>> {
        self.registry
            .get(self.tenant, name)
            .filter(|t| self.toolset.allows(t))
    }

    /// Every tool in this toolset, sorted by name.
    pub fn list(&self) -> Vec<Arc<RegisteredTool>> {
        let mut tools = self.registry.list(self.tenant);
        tools.retain(|t| self.toolset.allows(t));
        tools
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;
    use serde_json::{Value, json};

    use super::*;
    use crate::{
        CallContext, Principal, PrincipalId, PrincipalKind, Tool, ToolError, ToolOutput, ToolSpec,
    };

    struct T(ToolSpec);
    #[async_trait]
    impl Tool for T {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        async fn call(&self, _: &CallContext, _: Value) -> Result<ToolOutput, ToolError> {
            Ok(ToolOutput::default())
        }
    }

    fn registry() -> Arc<Registry> {
        let reg = Registry::new();
        for (name, cat) in [
            ("fs.read", "workspace"),
            ("fs.write", "workspace"),
            ("echo", "diagnostics"),
        ] {
            reg.register(Arc::new(T(
                ToolSpec::new(name, "d", json!({})).with_category(cat)
            )))
            .expect("register");
        }
        Arc::new(reg)
    }

    fn auth() -> AuthContext {
        AuthContext {
            tenant: TenantId::new(),
            tenant_name: "acme".into(),
            principal: Principal {
                id: PrincipalId::new(),
                kind: PrincipalKind::User,
                name: "u".into(),
            },
            roles: vec![],
            scopes: vec![],
            key: None,
        }
    }

    fn names(set: &ScopedToolset) -> Vec<String> {
        set.list().iter().map(|t| t.spec().name.clone()).collect()
    }

    #[test]
    fn globs_and_categories_select_tools() {
        let reg = registry();
        let a = auth();
        let set = Toolset::only(&["fs.r*"], &["diagnostics"])
            .expect("valid")
            .scope(reg.clone(), &a);
        assert_eq!(names(&set), ["echo", "fs.read"]);
        assert!(set.get("fs.write").is_none());
        assert!(
            Toolset::only::<&str>(&[], &[])
                .expect("valid")
                .scope(reg, &a)
                .list()
                .is_empty()
        );
    }

    #[test]
    fn a_toolset_lists_a_bounded_number_of_bounded_patterns() {
        let many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("t{i}*")).collect();
        let err = Toolset::only(&many, &[]).expect_err("too many");
        assert!(err.reason.contains("at most 256"), "{err}");
        assert!(Toolset::only(&many[..MAX_PATTERNS], &[]).is_ok());
        let long = "a*".repeat(MAX_PATTERN_BYTES);
        let err = Toolset::only(&[long.as_str()], &[]).expect_err("too long");
        assert!(err.to_string().len() < 100, "not repeated whole: {err}");
    }

    #[test]
    fn intersection_never_widens() {
        let reg = registry();
        let caller = Toolset::only(&["fs.*"], &[]).expect("valid");
        let agent = Toolset::only(&[], &["workspace", "diagnostics"]).expect("valid");
        let set = caller.intersect(&agent).scope(reg, &auth());
        assert_eq!(names(&set), ["fs.read", "fs.write"]);
    }
}
