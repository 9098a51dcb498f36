//! `workspace_tree`: the workspace (or a directory in it) as an indented tree, to a depth,
//! honouring `.gitignore` and skipping hidden entries unless asked. Symbolic links are
//! shown, never followed.

use ignore::WalkBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::ToolError;

use crate::file_tool::{At, FileWork, WorkspaceTool};
use crate::workspace::{EntryKind, display_path, io_error};

/// Most entries shown; the walk stops there.
pub const MAX_ENTRIES: usize = 2000;
pub const DEFAULT_DEPTH: usize = 3;
pub const MAX_DEPTH: usize = 10;

pub type WorkspaceTree = WorkspaceTool<Args>;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Directory relative to the workspace root; the root when omitted
    #[serde(default)]
    #[schemars(extend("default" = "."))]
    path: String,
    /// Levels below the directory to show
    #[serde(default = "default_depth")]
    #[schemars(range(min = 1, max = MAX_DEPTH))]
    depth: usize,
    #[serde(default)]
    include_hidden: bool,
}

fn default_depth() -> usize {
    DEFAULT_DEPTH
}

/// What `workspace_tree` walked.
#[derive(Serialize, JsonSchema)]
pub struct Tree {
    path: String,
    entries: Vec<TreeEntry>,
    /// More entries exist than were shown
    truncated: bool,
}

#[derive(Serialize, JsonSchema)]
struct TreeEntry {
    path: String,
    #[serde(rename = "type")]
    kind: EntryKind,
}

impl FileWork for Args {
    type Output = Tree;
    const NAME: &str = "workspace_tree";
    const TITLE: &str = "Workspace tree";
    const DESCRIPTION: &str = "Show the workspace (or a directory in it) as an indented \
        tree, a few levels deep. Honours .gitignore; hidden entries only when asked. \
        Directories end with '/', symbolic links with '@'.";

    fn path(&self) -> &str {
        &self.path
    }

    fn run(self, At { ws, rel, cancel }: At<'_>) -> Result<(String, Tree), ToolError> {
        // Checked through the capability first: `..` and symlinks out are refused.
        let meta = ws.dir().metadata(&rel).map_err(|e| io_error(&rel, e))?;
        if !meta.is_dir() {
            return Err(ToolError::invalid_arguments(format!(
                "{:?} is not a directory",
                display_path(&rel)
            )));
        }
        let base = ws.root().join(&rel);
        let walk = WalkBuilder::new(&base)
            .hidden(!self.include_hidden)
            .require_git(false)
            .follow_links(false)
            .max_depth(Some(self.depth.clamp(1, MAX_DEPTH)))
            .filter_entry(|e| e.file_name() != ".git")
            .sort_by_file_name(|a, b| a.cmp(b))
            .build();
        let mut text = format!("{}/\n", display_path(&rel));
        let mut entries = Vec::new();
        let mut truncated = false;
        for entry in walk {
            let Ok(entry) = entry else { continue };
            if entry.depth() == 0 {
                continue;
            }
            if entries.len() >= MAX_ENTRIES || cancel.is_cancelled() {
                truncated = true;
                break;
            }
            let kind = entry.file_type().map_or(EntryKind::Other, |t| {
                EntryKind::new(t.is_symlink(), t.is_dir(), t.is_file())
            });
            let path = entry
                .path()
                .strip_prefix(ws.root())
                .map(display_path)
                .unwrap_or_default();
            text.push_str(&"  ".repeat(entry.depth()));
            text.push_str(&entry.file_name().to_string_lossy());
            text.push_str(kind.suffix());
            text.push('\n');
            entries.push(TreeEntry { path, kind });
        }
        if truncated {
            text.push_str(&format!("[stopped after {MAX_ENTRIES} entries]\n"));
        }
        let tree = Tree {
            path: display_path(&rel),
            entries,
            truncated,
        };
        Ok((text, tree))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolgate_core::Tool;

    #[tokio::test]
    async fn shows_a_depth_limited_tree_honouring_gitignore() {
        let (_tmp, wss, root) = crate::read_file::tests::workspaces();
        let ctx = crate::read_file::tests::ctx();
        std::fs::create_dir_all(root.join("src/deep/deeper")).expect("mkdir");
        std::fs::write(root.join("src/deep/deeper/x.rs"), "").expect("write");
        std::fs::write(root.join("src/main.rs"), "").expect("write");
        std::fs::write(root.join(".gitignore"), "target/\n").expect("write");
        std::fs::create_dir_all(root.join("target")).expect("mkdir");
        std::fs::write(root.join("README.md"), "").expect("write");
        let tool = WorkspaceTree::new(wss);
        let out = tool.call(&ctx, json!({"depth": 2})).await.expect("tree");
        let toolgate_core::Content::Text { text } = &out.content[0] else {
            panic!("text")
        };
        assert_eq!(text, "./\n  README.md\n  src/\n    deep/\n    main.rs\n");
        let err = tool
            .call(&ctx, json!({"path": "../"}))
            .await
            .expect_err("escape");
        assert_eq!(err.kind, toolgate_core::ErrorKind::InvalidArguments);
    }
}
