//! `list_files`: the entries of one workspace directory.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::ToolError;

use crate::file_tool::{At, FileWork, WorkspaceTool};
use crate::workspace::{EntryKind, display_path, io_error};

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

/// What `list_files` found.
#[derive(Serialize, JsonSchema)]
pub struct Listing {
    path: String,
    entries: Vec<Entry>,
    /// Entries beyond the listing limit
    omitted: usize,
}

#[derive(Serialize, JsonSchema)]
struct Entry {
    name: String,
    #[serde(rename = "type")]
    kind: EntryKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
}

impl FileWork for Args {
    type Output = Listing;
    const NAME: &str = "list_files";
    const TITLE: &str = "List files";
    const DESCRIPTION: &str = "List the entries of a directory in the workspace, sorted \
        by name. Directories end with '/', symbolic links with '@'. Paths are relative to \
        the workspace root.";

    fn path(&self) -> &str {
        &self.path
    }

    fn run(self, At { ws, rel, .. }: At<'_>) -> Result<(String, Listing), ToolError> {
        let entries = ws.dir().read_dir(&rel).map_err(|e| io_error(&rel, e))?;
        let mut listed = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error(&rel, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !self.include_hidden && name.starts_with('.') {
                continue;
            }
            let t = entry.file_type().map_err(|e| io_error(&rel, e))?;
            let kind = EntryKind::new(t.is_symlink(), t.is_dir(), t.is_file());
            let size = match kind {
                EntryKind::File => entry.metadata().ok().map(|m| m.len()),
                _ => None,
            };
            listed.push(Entry { name, kind, size });
        }
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        let omitted = listed.len().saturating_sub(MAX_ENTRIES);
        listed.truncate(MAX_ENTRIES);
        let mut text = String::new();
        for entry in &listed {
            text.push_str(&entry.name);
            text.push_str(entry.kind.suffix());
            text.push('\n');
        }
        if omitted > 0 {
            text.push_str(&format!("[{omitted} more entries not shown]\n"));
        }
        let listing = Listing {
            path: display_path(&rel),
            entries: listed,
            omitted,
        };
        Ok((text, listing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolgate_core::ErrorKind;
    use toolgate_core::Tool;
    use toolgate_core::ToolOutput;

    #[tokio::test]
    async fn lists_sorted_with_kinds_and_hides_dotfiles() {
        let (_tmp, wss, root) = crate::read_file::tests::workspaces();
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
