//! `read_file`: a range of lines from a text file in the workspace.

use std::io::{BufRead, BufReader};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::ToolError;

use crate::file_tool::{At, FileWork, WorkspaceTool};
use crate::workspace::{display_path, io_error};

/// Lines returned when the caller gives no limit.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Largest file read, in bytes; beyond it, search_files finds what is needed.
pub const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Bytes inspected for NUL to tell binary files from text.
const SNIFF_BYTES: usize = 8192;

pub type ReadFile = WorkspaceTool<Args>;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// File path relative to the workspace root
    #[schemars(length(min = 1))]
    path: String,
    /// First line to return (1-based)
    #[serde(default = "one")]
    #[schemars(range(min = 1))]
    offset: u64,
    /// Most lines to return
    #[serde(default = "default_limit")]
    #[schemars(range(min = 1, max = 100000))]
    limit: u64,
}

fn one() -> u64 {
    1
}

fn default_limit() -> u64 {
    DEFAULT_LIMIT
}

/// The lines `read_file` returned, and where they stand in the file.
#[derive(Serialize, JsonSchema)]
pub struct Read {
    path: String,
    start_line: u64,
    /// Last line returned; start_line - 1 when none
    end_line: u64,
    total_lines: u64,
    has_more: bool,
}

impl FileWork for Args {
    type Output = Read;
    const NAME: &str = "read_file";
    const TITLE: &str = "Read file";
    const DESCRIPTION: &str = "Read a text file from the workspace. Returns lines \
        `offset` .. `offset + limit - 1` (1-based; by default the first 2000 lines). Paths \
        are relative to the workspace root.";

    fn path(&self) -> &str {
        &self.path
    }

    fn run(self, At { ws, rel, cancel }: At<'_>) -> Result<(String, Read), ToolError> {
        let (file, meta) = ws.open_regular(&rel)?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(ToolError::invalid_arguments(format!(
                "{:?} is {} bytes, more than read_file reads ({MAX_FILE_BYTES})",
                display_path(&rel),
                meta.len()
            ))
            .with_suggestion("use search_files to find the lines you need"));
        }
        let mut reader = BufReader::new(file);
        if reader
            .fill_buf()
            .map_err(|e| io_error(&rel, e))?
            .iter()
            .take(SNIFF_BYTES)
            .any(|b| *b == 0)
        {
            return Err(ToolError::invalid_arguments(format!(
                "{:?} is a binary file",
                display_path(&rel)
            )));
        }
        let last = self.offset.saturating_add(self.limit) - 1;
        let mut text = String::new();
        let mut total = 0u64;
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| io_error(&rel, e))?;
            if n == 0 {
                break;
            }
            total += 1;
            if (self.offset..=last).contains(&total) {
                text.push_str(&String::from_utf8_lossy(&line));
            }
            if total.is_multiple_of(4096) && cancel.is_cancelled() {
                return Err(ToolError::new(
                    toolgate_core::ErrorKind::Cancelled,
                    "the call was cancelled",
                ));
            }
        }
        let end = last.min(total).max(self.offset - 1);
        let read = Read {
            path: display_path(&rel),
            start_line: self.offset,
            end_line: end,
            total_lines: total,
            has_more: end < total,
        };
        Ok((text, read))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Workspaces;
    use serde_json::json;
    use std::sync::Arc;
    use toolgate_core::ToolOutput;
    use toolgate_core::{
        Adapter, AuthContext, Content, ErrorKind, Principal, PrincipalId, PrincipalKind, TenantId,
    };
    use toolgate_core::{CallContext, Tool};

    pub(crate) fn ctx() -> CallContext {
        CallContext::new(
            Arc::new(AuthContext {
                tenant: TenantId::new(),
                tenant_name: "acme".into(),
                principal: Principal {
                    id: PrincipalId::new(),
                    kind: PrincipalKind::User,
                    name: "t".into(),
                },
                roles: vec![],
                scopes: vec![],
                key: None,
            }),
            Adapter::Rest,
        )
    }

    /// A temporary directory holding [`ctx`]'s workspace: the directory (deleted when
    /// dropped), the workspaces, and the caller's workspace root.
    pub(crate) fn workspaces() -> (tempfile::TempDir, Arc<Workspaces>, std::path::PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let wss = Arc::new(Workspaces::new(tmp.path()).expect("ws"));
        let root = wss
            .for_caller(&ctx().auth)
            .expect("ws")
            .root()
            .to_path_buf();
        (tmp, wss, root)
    }

    fn text(out: &ToolOutput) -> &str {
        let Content::Text { text } = &out.content[0] else {
            panic!("text expected")
        };
        text
    }

    #[tokio::test]
    async fn reads_a_line_range() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let wss = Arc::new(Workspaces::new(tmp.path()).expect("ws"));
        let ws = wss.for_caller(&ctx().auth).expect("ws");
        std::fs::write(ws.root().join("f.txt"), "one\ntwo\nthree\nfour\n").expect("write");
        let tool = ReadFile::new(wss);
        let out = tool
            .call(&ctx(), json!({"path": "f.txt", "offset": 2, "limit": 2}))
            .await
            .expect("read");
        assert_eq!(text(&out), "two\nthree\n");
        let s = out.structured.expect("structured");
        assert_eq!(
            (
                s["start_line"].as_u64(),
                s["end_line"].as_u64(),
                s["total_lines"].as_u64()
            ),
            (Some(2), Some(3), Some(4))
        );
        assert_eq!(s["has_more"], true);
        let out = tool
            .call(&ctx(), json!({"path": "./f.txt"}))
            .await
            .expect("read");
        assert_eq!(text(&out), "one\ntwo\nthree\nfour\n");
    }

    #[tokio::test]
    async fn refuses_escapes_binaries_and_directories() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let wss = Arc::new(Workspaces::new(tmp.path()).expect("ws"));
        let ws = wss.for_caller(&ctx().auth).expect("ws");
        std::fs::write(tmp.path().join("secret"), "s").expect("write");
        std::fs::write(ws.root().join("bin"), b"\x00\x01").expect("write");
        std::fs::create_dir(ws.root().join("d")).expect("mkdir");
        std::os::unix::fs::symlink("../secret", ws.root().join("link")).expect("symlink");
        // A FIFO nobody writes to: opening it to read used to block a thread for ever.
        nix::unistd::mkfifo(&ws.root().join("pipe"), nix::sys::stat::Mode::S_IRWXU)
            .expect("mkfifo");
        let tool = ReadFile::new(wss);
        for path in [
            "../secret",
            "/etc/passwd",
            "link",
            "bin",
            "d",
            "d/../../secret",
            "pipe",
        ] {
            let err = tokio::time::timeout(
                std::time::Duration::from_secs(30),
                tool.call(&ctx(), json!({"path": path})),
            )
            .await
            .unwrap_or_else(|_| panic!("reading {path} hung"))
            .expect_err(path);
            assert_eq!(err.kind, ErrorKind::InvalidArguments, "{path}: {err}");
        }
        let err = tool
            .call(&ctx(), json!({"path": "missing"}))
            .await
            .expect_err("missing");
        assert_eq!(err.kind, ErrorKind::NotFound);
    }
}
