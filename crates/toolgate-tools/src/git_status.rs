//! `git_status`: the branch and changed files of a git repository in the workspace.
//!
//! Runs the system `git` through the same sandbox as `execute_command`, read-only: a
//! repository is the tenant's own content, and git obeys configuration found in it
//! (`core.fsmonitor` runs a program). Global and system configuration are ignored, hooks
//! and the file-system monitor are off, and optional locks are not taken.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_core::{CallContext, Tool, ToolError, ToolOutput, ToolSpec};

use crate::execute_command::{CommandOptions, run_sandboxed};
use crate::sandbox::SandboxMode;
use crate::{Workspaces, parse_args};

const GIT: &str = "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_TERMINAL_PROMPT=0 \
    git --no-optional-locks -c core.fsmonitor=false -c core.hooksPath=/dev/null \
    -c core.untrackedCache=false status --porcelain=v1 --branch --untracked-files=all";

/// Most changed files listed; the rest are counted.
const MAX_ENTRIES: usize = 2000;

pub struct GitStatus {
    spec: ToolSpec,
    workspaces: Arc<Workspaces>,
    options: CommandOptions,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// A directory inside the repository, relative to the workspace root; the root when omitted
    #[serde(default)]
    #[schemars(extend("default" = "."))]
    path: String,
}

impl GitStatus {
    pub fn new(workspaces: Arc<Workspaces>, options: CommandOptions) -> Self {
        let spec = ToolSpec::new(
            "git_status",
            "Show the current branch (with commits ahead of and behind its upstream) and the \
             changed, staged and untracked files of a git repository in the workspace.",
            crate::input_schema::<Args>(),
        )
        .with_title("Git status")
        .with_category("workspace")
        .with_output_schema(json!({
            "type": "object",
            "properties": {
                "branch": {"type": ["string", "null"], "description": "null when HEAD is detached"},
                "upstream": {"type": ["string", "null"]},
                "ahead": {"type": "integer"},
                "behind": {"type": "integer"},
                "files": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "index": {"type": "string", "description": "Status in the index (X of git's XY)"},
                        "worktree": {"type": "string", "description": "Status in the work tree (Y of git's XY)"}
                    },
                    "required": ["path", "index", "worktree"]
                }},
                "omitted": {"type": "integer"}
            },
            "required": ["branch", "upstream", "ahead", "behind", "files", "omitted"]
        }));
        Self {
            spec,
            workspaces,
            options,
        }
    }
}

#[async_trait]
impl Tool for GitStatus {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(args)?;
        let path = if args.path.is_empty() {
            "."
        } else {
            &args.path
        };
        let ran = run_sandboxed(
            &self.options,
            &self.workspaces,
            ctx,
            path,
            GIT.to_owned(),
            SandboxMode::ReadOnly,
        )
        .await?;
        let text = String::from_utf8_lossy(&ran.output).into_owned();
        if ran.code != Some(0) {
            let first = text.lines().next().unwrap_or("git failed").trim();
            return Err(if text.contains("not a git repository") {
                ToolError::invalid_arguments(format!("{path:?} is not inside a git repository"))
                    .with_suggestion(
                        "git_status works in a directory of a cloned or initialised repository",
                    )
            } else {
                ToolError::internal(format!("git status failed: {first}"))
            });
        }
        let status = parse(&text);
        Ok(ToolOutput::text(text).with_structured(status))
    }
}

/// Reads `git status --porcelain=v1 --branch`.
fn parse(text: &str) -> Value {
    let mut branch = Value::Null;
    let mut upstream = Value::Null;
    let (mut ahead, mut behind) = (0u64, 0u64);
    let mut files = Vec::new();
    let mut omitted = 0usize;
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("## ") {
            let (names, counts) = match head.split_once(" [") {
                Some((names, counts)) => (names, counts.trim_end_matches(']')),
                None => (head, ""),
            };
            let (local, remote) = match names.split_once("...") {
                Some((local, remote)) => (local, Some(remote)),
                None => (names, None),
            };
            let local = local.strip_prefix("No commits yet on ").unwrap_or(local);
            if !local.starts_with("HEAD (no branch)") {
                branch = json!(local);
            }
            upstream = remote.map_or(Value::Null, |r| json!(r));
            for part in counts.split(", ") {
                if let Some(n) = part.strip_prefix("ahead ") {
                    ahead = n.parse().unwrap_or(0);
                } else if let Some(n) = part.strip_prefix("behind ") {
                    behind = n.parse().unwrap_or(0);
                }
            }
            continue;
        }
        if line.len() < 4 {
            continue;
        }
        if files.len() >= MAX_ENTRIES {
            omitted += 1;
            continue;
        }
        let (xy, path) = line.split_at(3);
        let mut codes = xy.chars();
        let index = codes.next().unwrap_or(' ').to_string();
        let worktree = codes.next().unwrap_or(' ').to_string();
        files.push(json!({"path": path, "index": index, "worktree": worktree}));
    }
    json!({
        "branch": branch,
        "upstream": upstream,
        "ahead": ahead,
        "behind": behind,
        "files": files,
        "omitted": omitted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn porcelain_output_is_read() {
        let status = parse(
            "## main...origin/main [ahead 2, behind 1]\n M src/lib.rs\nA  new.txt\n?? notes/todo.md\n",
        );
        assert_eq!(status["branch"], "main");
        assert_eq!(status["upstream"], "origin/main");
        assert_eq!(
            (status["ahead"].as_u64(), status["behind"].as_u64()),
            (Some(2), Some(1))
        );
        assert_eq!(
            status["files"],
            json!([
                {"path": "src/lib.rs", "index": " ", "worktree": "M"},
                {"path": "new.txt", "index": "A", "worktree": " "},
                {"path": "notes/todo.md", "index": "?", "worktree": "?"}
            ])
        );
        let fresh = parse("## No commits yet on main\n");
        assert_eq!(fresh["branch"], "main");
        assert_eq!(fresh["upstream"], Value::Null);
        assert_eq!(parse("## HEAD (no branch)\n")["branch"], Value::Null);
    }
}
