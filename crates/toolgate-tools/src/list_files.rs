//! `list_files`: the entries of one workspace directory.

use std::path::PathBuf;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolgate_core::{ToolError, ToolOutput, ToolSpec};

use tokio_util::sync::CancellationToken;

use crate::file_tool::{FileWork, WorkspaceTool};
use crate::workspace::{display_path, io_error};
use crate::{Workspace, Workspaces};

/// Most entries returned; the rest are counted.
pub const MAX_ENTRIES: usize = 1000;

pub type ListFiles = WorkspaceTool<Args>;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Directory relative to the workspace root; the root when omitted
    #[serde(default)]
    #[schemars(extend("default" = "."))]
    path: String,
    /// Include names starting with '.'
    #[serde(default)]
    include_hidden: bool,
}

impl ListFiles {
    pub fn new(workspaces: Arc<Workspaces>) -> Self {
        let spec = ToolSpec::new(
            "list_files",
            "List the entries of a directory in the workspace, sorted by name. Directories end \
             with '/', symbolic links with '@'. Paths are relative to the workspace root.",
            crate::input_schema::<Args>(),
        )
        .with_title("List files")
        .with_category("workspace")
        .with_output_schema(json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "entries": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "type": {"enum": ["file", "dir", "symlink", "other"]},
                        "size": {"type": "integer"}
                    },
                    "required": ["name", "type"]
                }},
                "omitted": {"type": "integer", "description": "Entries beyond the listing limit"}
            },
            "required": ["path", "entries", "omitted"]
        }));
        Self::with_spec(spec, workspaces)
    }
}

impl FileWork for Args {
    fn path(&self) -> &str {
        &self.path
    }

    fn run(
        args: Self,
        ws: &Workspace,
        rel: PathBuf,
        _cancel: &CancellationToken,
    ) -> Result<ToolOutput, ToolError> {
        let entries = ws.dir().read_dir(&rel).map_err(|e| io_error(&rel, e))?;
        let mut listed = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&rel, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !args.include_hidden && name.starts_with('.') {
                continue;
            }
            let file_type = entry.file_type().map_err(|e| io_error(&rel, e))?;
            let (kind, size) = if file_type.is_symlink() {
                ("symlink", None)
            } else if file_type.is_dir() {
                ("dir", None)
            } else if file_type.is_file() {
                ("file", entry.metadata().ok().map(|m| m.len()))
            } else {
                ("other", None)
            };
            listed.push((name, kind, size));
        }
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        let omitted = listed.len().saturating_sub(MAX_ENTRIES);
        listed.truncate(MAX_ENTRIES);
        let mut text = String::new();
        for (name, kind, _) in &listed {
            text.push_str(name);
            text.push_str(match *kind {
                "dir" => "/",
                "symlink" => "@",
                _ => "",
            });
            text.push('\n');
        }
        if omitted > 0 {
            text.push_str(&format!("[{omitted} more entries not shown]\n"));
        }
        let entries: Vec<Value> = listed
            .into_iter()
            .map(|(name, kind, size)| match size {
                Some(size) => json!({"name": name, "type": kind, "size": size}),
                None => json!({"name": name, "type": kind}),
            })
            .collect();
        Ok(ToolOutput::text(text).with_structured(json!({
            "path": display_path(&rel),
            "entries": entries,
            "omitted": omitted,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::ErrorKind;
    use toolgate_core::Tool;

    #[tokio::test]
    async fn lists_sorted_with_kinds_and_hides_dotfiles() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let wss = Arc::new(Workspaces::new(tmp.path()).expect("ws"));
        let root = wss
            .for_caller(&crate::read_file::tests::ctx().auth)
            .expect("ws")
            .root()
            .to_path_buf();
        std::fs::create_dir(root.join("src")).expect("mkdir");
        std::fs::write(root.join("b.txt"), "bb").expect("write");
        std::fs::write(root.join(".env"), "x").expect("write");
        std::os::unix::fs::symlink("b.txt", root.join("a-link")).expect("symlink");
        let tool = ListFiles::new(wss);
        let out = tool
            .call(&crate::read_file::tests::ctx(), json!({}))
            .await
            .expect("list");
        assert_eq!(
            out,
            ToolOutput::text("a-link@\nb.txt\nsrc/\n").with_structured(json!({
                "path": ".",
                "entries": [
                    {"name": "a-link", "type": "symlink"},
                    {"name": "b.txt", "type": "file", "size": 2},
                    {"name": "src", "type": "dir"}
                ],
                "omitted": 0
            }))
        );
        let err = tool
            .call(&crate::read_file::tests::ctx(), json!({"path": ".."}))
            .await
            .expect_err("escape");
        assert_eq!(err.kind, ErrorKind::InvalidArguments);
    }
}
