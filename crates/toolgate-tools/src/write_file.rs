//! `write_file`, `edit_file` and `create_directory`: the workspace tools that change
//! files. Every write goes to a temporary file beside the target, then replaces it in one
//! `rename`, so a reader (or a crash) never sees half a file; an edited file keeps its
//! permissions.

use std::io::Write;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, OpenOptions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::{Effects, Risk, ToolError};

use crate::file_tool::{At, FileWork, WorkspaceTool};
use crate::read_file::MAX_FILE_BYTES;
use crate::workspace::{display_path, io_error};

/// Longest content written in one call, in characters.
pub const MAX_CONTENT_CHARS: u64 = 10_000_000;

const CHANGES: Effects = Effects {
    writes: true,
    destructive: true,
    idempotent: true,
    open_world: false,
};

pub type WriteFile = WorkspaceTool<WriteArgs>;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// File path relative to the workspace root
    #[schemars(length(min = 1))]
    path: String,
    /// The whole new content
    #[schemars(length(max = MAX_CONTENT_CHARS))]
    content: String,
}

/// What `write_file` wrote.
#[derive(Serialize, JsonSchema)]
pub struct Written {
    path: String,
    bytes: usize,
    /// The file did not exist before
    created: bool,
}

impl FileWork for WriteArgs {
    type Output = Written;
    const NAME: &str = "write_file";
    const TITLE: &str = "Write file";
    const DESCRIPTION: &str = "Write a text file in the workspace, replacing it if it \
        exists and creating missing parent directories. Paths are relative to the workspace \
        root.";
    const RISK: Option<(Risk, Effects)> = Some((Risk::Medium, CHANGES));

    fn path(&self) -> &str {
        &self.path
    }

    fn run(self, At { ws, rel, .. }: At<'_>) -> Result<(String, Written), ToolError> {
        let rel = file_path(&rel)?;
        let dir = ws.dir();
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            dir.create_dir_all(parent)
                .map_err(|e| io_error(parent, e))?;
        }
        let created = match dir.symlink_metadata(&rel) {
            Ok(meta) if meta.is_dir() => {
                return Err(ToolError::invalid_arguments(format!(
                    "{:?} is a directory",
                    display_path(&rel)
                )));
            }
            Ok(_) => false,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(io_error(&rel, e)),
        };
        replace(dir, &rel, self.content.as_bytes())?;
        let written = Written {
            path: display_path(&rel),
            bytes: self.content.len(),
            created,
        };
        let text = format!(
            "{} {} ({} bytes)",
            if created { "created" } else { "replaced" },
            written.path,
            written.bytes
        );
        Ok((text, written))
    }
}

pub type EditFile = WorkspaceTool<EditArgs>;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// File path relative to the workspace root
    #[schemars(length(min = 1))]
    path: String,
    /// Exact text to find, whitespace included
    #[schemars(length(min = 1))]
    old_text: String,
    /// Text to put in its place
    new_text: String,
    /// Replace every occurrence
    #[serde(default)]
    replace_all: bool,
}

/// What `edit_file` changed.
#[derive(Serialize, JsonSchema)]
pub struct Edited {
    path: String,
    replacements: usize,
}

impl FileWork for EditArgs {
    type Output = Edited;
    const NAME: &str = "edit_file";
    const TITLE: &str = "Edit file";
    const DESCRIPTION: &str = "Replace exact text in a file of the workspace. `old_text` \
        must occur exactly once (include surrounding lines to make it unique), or set \
        `replace_all` to replace every occurrence. Fails, changing nothing, when the text is \
        missing or not unique.";
    const RISK: Option<(Risk, Effects)> = Some((
        Risk::Medium,
        Effects {
            idempotent: false,
            ..CHANGES
        },
    ));

    fn path(&self) -> &str {
        &self.path
    }

    fn run(self, At { ws, rel, .. }: At<'_>) -> Result<(String, Edited), ToolError> {
        let rel = file_path(&rel)?;
        let dir = ws.dir();
        let shown = display_path(&rel);
        let meta = dir.metadata(&rel).map_err(|e| io_error(&rel, e))?;
        if meta.is_dir() {
            return Err(ToolError::invalid_arguments(format!(
                "{shown:?} is a directory"
            )));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(ToolError::invalid_arguments(format!(
                "{shown:?} is {} bytes, more than edit_file edits ({MAX_FILE_BYTES})",
                meta.len()
            )));
        }
        let text = dir.read_to_string(&rel).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => {
                ToolError::invalid_arguments(format!("{shown:?} is not UTF-8 text"))
            }
            _ => io_error(&rel, e),
        })?;
        let count = text.matches(&self.old_text).count();
        if count == 0 {
            return Err(ToolError::invalid_arguments(format!(
                "old_text was not found in {shown:?}"
            ))
            .with_suggestion(
                "read the file again and copy the text exactly, whitespace included",
            ));
        }
        if count > 1 && !self.replace_all {
            return Err(ToolError::invalid_arguments(format!(
                "old_text occurs {count} times in {shown:?}"
            ))
            .with_suggestion(
                "include more surrounding text to make it unique, or set replace_all",
            ));
        }
        let edited = if self.replace_all {
            text.replace(&self.old_text, &self.new_text)
        } else {
            text.replacen(&self.old_text, &self.new_text, 1)
        };
        replace(dir, &rel, edited.as_bytes())?;
        if let Err(e) = dir.set_permissions(&rel, meta.permissions()) {
            return Err(io_error(&rel, e));
        }
        let text = format!(
            "edited {shown}: {count} replacement{}",
            if count == 1 { "" } else { "s" }
        );
        let edited = Edited {
            path: shown,
            replacements: count,
        };
        Ok((text, edited))
    }
}

pub type CreateDirectory = WorkspaceTool<DirArgs>;

/// The directory `create_directory` made, or found already there.
#[derive(Serialize, JsonSchema)]
pub struct Made {
    path: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DirArgs {
    /// Directory path relative to the workspace root
    #[schemars(length(min = 1))]
    path: String,
}

impl FileWork for DirArgs {
    type Output = Made;
    const NAME: &str = "create_directory";
    const TITLE: &str = "Create directory";
    const DESCRIPTION: &str =
        "Create a directory in the workspace, with any missing parents. Succeeds when it exists.";
    const RISK: Option<(Risk, Effects)> = Some((
        Risk::Medium,
        Effects {
            destructive: false,
            ..CHANGES
        },
    ));

    fn path(&self) -> &str {
        &self.path
    }

    fn run(self, At { ws, rel, .. }: At<'_>) -> Result<(String, Made), ToolError> {
        let rel = file_path(&rel)?;
        ws.dir()
            .create_dir_all(&rel)
            .map_err(|e| io_error(&rel, e))?;
        let made = Made {
            path: display_path(&rel),
        };
        Ok((format!("created {}/", made.path), made))
    }
}

/// A path naming something below the root (not the root itself).
fn file_path(rel: &Path) -> Result<PathBuf, ToolError> {
    if rel == Path::new(".") {
        return Err(ToolError::invalid_arguments(
            "the path names the workspace root itself",
        ));
    }
    Ok(rel.to_path_buf())
}

/// Writes `bytes` to a temporary file beside `rel`, then renames it over `rel`.
fn replace(dir: &Dir, rel: &Path, bytes: &[u8]) -> Result<(), ToolError> {
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // Random, and `create_new`: a collision fails the write, never overwrites.
    let temp = rel.with_file_name(format!(".{name}.toolgate-{:016x}", fastrand::u64(..)));
    let write = || -> std::io::Result<()> {
        let mut file = dir.open_with(&temp, OpenOptions::new().write(true).create_new(true))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        dir.rename(&temp, dir, rel)
    };
    write().map_err(|e| {
        let _ = dir.remove_file(&temp);
        io_error(rel, e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_file::tests::workspaces;
    use serde_json::json;
    use toolgate_core::ErrorKind;
    use toolgate_core::Tool;

    #[tokio::test]
    async fn writes_create_parents_and_replace_whole_files() {
        let (_tmp, wss, root) = workspaces();
        let tool = WriteFile::new(wss);
        let ctx = crate::read_file::tests::ctx();
        let out = tool
            .call(&ctx, json!({"path": "a/b/c.txt", "content": "one"}))
            .await
            .expect("write");
        assert_eq!(
            out.structured,
            Some(json!({"path": "a/b/c.txt", "bytes": 3, "created": true}))
        );
        tool.call(&ctx, json!({"path": "a/b/c.txt", "content": "two"}))
            .await
            .expect("replace");
        assert_eq!(
            std::fs::read_to_string(root.join("a/b/c.txt")).expect("read"),
            "two"
        );
        // No temporary files are left behind.
        assert_eq!(std::fs::read_dir(root.join("a/b")).expect("dir").count(), 1);
        for bad in ["../x", "/etc/x", ".", "a"] {
            let err = tool
                .call(&ctx, json!({"path": bad, "content": "x"}))
                .await
                .expect_err(bad);
            assert_eq!(err.kind, ErrorKind::InvalidArguments, "{bad}: {err}");
        }
        // A symlink leading out is not written through: the caller's mistake, a 400.
        let outside = _tmp.path().join("outside.txt");
        std::os::unix::fs::symlink(&outside, root.join("out")).expect("symlink");
        let outside_dir = _tmp.path().join("elsewhere");
        std::fs::create_dir(&outside_dir).expect("mkdir");
        std::os::unix::fs::symlink(&outside_dir, root.join("linked")).expect("symlink");
        std::os::unix::fs::symlink("../../elsewhere", root.join("a/up")).expect("symlink");
        for path in ["out/x", "linked/x", "linked/deeper/x", "a/up/x"] {
            let err = tool
                .call(&ctx, json!({"path": path, "content": "x"}))
                .await
                .expect_err(path);
            assert_eq!(err.kind, ErrorKind::InvalidArguments, "{path}: {err}");
        }
        assert!(!outside.exists());
        assert_eq!(std::fs::read_dir(&outside_dir).expect("dir").count(), 0);
    }

    #[tokio::test]
    async fn edits_need_one_exact_match_unless_replacing_all() {
        let (_tmp, wss, root) = workspaces();
        std::fs::write(root.join("f.txt"), "a b a\n").expect("write");
        let tool = EditFile::new(wss);
        let ctx = crate::read_file::tests::ctx();
        let edit = |old: &str, new: &str, all: bool| {
            tool.call(
                &ctx,
                json!({"path": "f.txt", "old_text": old, "new_text": new, "replace_all": all}),
            )
        };
        let err = edit("z", "y", false).await.expect_err("missing");
        assert!(err.message.contains("not found"), "{err}");
        let err = edit("a", "y", false).await.expect_err("twice");
        assert!(err.message.contains("2 times"), "{err}");
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).expect("read"),
            "a b a\n"
        );
        edit("b", "B", false).await.expect("unique");
        edit("a", "A", true).await.expect("all");
        assert_eq!(
            std::fs::read_to_string(root.join("f.txt")).expect("read"),
            "A B A\n"
        );
    }
}
