//! `git_status`: the branch and changed files of a git repository in the workspace.
//!
//! Runs the system `git` through the same sandbox as `execute_command`, read-only: a
//! repository is the tenant's own content, and git obeys configuration found in it
//! (`core.fsmonitor` runs a program). Global and system configuration are ignored, hooks
//! and the file-system monitor are off, and optional locks are not taken.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
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
        .with_output_schema(crate::output_schema::<Status>());
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
        let status = crate::structured(&parse(&text));
        Ok(ToolOutput::text(text).with_structured(status))
    }
}

/// The repository's state, as `git status --porcelain=v1 --branch` tells it.
#[derive(Default, Serialize, JsonSchema)]
struct Status {
    /// null when HEAD is detached
    branch: Option<String>,
    upstream: Option<String>,
    ahead: u64,
    behind: u64,
    files: Vec<FileStatus>,
    omitted: usize,
}

#[derive(Serialize, JsonSchema)]
struct FileStatus {
    path: String,
    /// Status in the index (X of git's XY)
    index: String,
    /// Status in the work tree (Y of git's XY)
    worktree: String,
}

/// Reads `git status --porcelain=v1 --branch`.
fn parse(text: &str) -> Status {
    let mut status = Status::default();
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
                status.branch = Some(local.to_owned());
            }
            status.upstream = remote.map(str::to_owned);
            for part in counts.split(", ") {
                if let Some(n) = part.strip_prefix("ahead ") {
                    status.ahead = n.parse().unwrap_or(0);
                } else if let Some(n) = part.strip_prefix("behind ") {
                    status.behind = n.parse().unwrap_or(0);
                }
            }
            continue;
        }
        if line.len() < 4 {
            continue;
        }
        if status.files.len() >= MAX_ENTRIES {
            status.omitted += 1;
            continue;
        }
        let (xy, path) = line.split_at(3);
        let mut codes = xy.chars();
        let index = codes.next().unwrap_or(' ').to_string();
        let worktree = codes.next().unwrap_or(' ').to_string();
        status.files.push(FileStatus {
            path: path.to_owned(),
            index,
            worktree,
        });
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The structured result for `text`.
    fn parse(text: &str) -> Value {
        crate::structured(&super::parse(text))
    }

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
