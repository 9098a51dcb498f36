//! `search_files`: lines matching a regular expression (or a literal) across the
//! workspace, honouring `.gitignore`, `.ignore` and hidden-file conventions as ripgrep does
//! (the walk is ripgrep's own `ignore` crate).

use std::io::{BufRead, BufReader};
use std::path::Path;

use ignore::WalkBuilder;
use ignore::overrides::OverrideBuilder;
use regex::RegexBuilder;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolgate_core::{ErrorKind, ToolError};

use crate::Workspace;
use crate::file_tool::{At, FileWork, WorkspaceTool};
use crate::workspace::{display_path, io_error};

/// Files larger than this are skipped.
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Matched lines are cut to this many characters in the output.
const MAX_LINE_CHARS: usize = 400;

pub type SearchFiles = WorkspaceTool<Args>;

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    #[schemars(length(min = 1, max = 1000))]
    pattern: String,
    /// Match the pattern as plain text
    #[serde(default)]
    literal: bool,
    /// Directory or file to search, relative to the workspace root
    #[serde(default)]
    #[schemars(extend("default" = "."))]
    path: String,
    /// Only files matching this glob, e.g. "*.rs"
    #[serde(default)]
    #[schemars(length(max = 200))]
    glob: Option<String>,
    #[serde(default)]
    case_insensitive: bool,
    #[serde(default)]
    include_hidden: bool,
    #[serde(default = "default_max")]
    #[schemars(range(min = 1, max = 1000))]
    max_results: usize,
}

fn default_max() -> usize {
    100
}

/// What `search_files` found.
#[derive(Serialize, JsonSchema)]
pub struct Found {
    matches: Vec<Match>,
    files_searched: u64,
    /// max_results was reached
    truncated: bool,
}

#[derive(Serialize, JsonSchema)]
struct Match {
    path: String,
    line: usize,
    text: String,
}

impl FileWork for Args {
    type Output = Found;
    const NAME: &str = "search_files";
    const TITLE: &str = "Search files";
    const DESCRIPTION: &str = "Search text files in the workspace for lines matching a \
        regular expression (Rust regex syntax) or, with literal=true, a plain string. Respects \
        .gitignore and skips hidden and binary files. Returns `path:line: text` per match.";

    fn path(&self) -> &str {
        &self.path
    }

    fn run(self, at: At<'_>) -> Result<(String, Found), ToolError> {
        let (args, ws, base, cancel) = (self, at.ws, at.rel, at.cancel);
        let pattern = if args.literal {
            regex::escape(&args.pattern)
        } else {
            args.pattern.clone()
        };
        let regex = RegexBuilder::new(&pattern)
            .case_insensitive(args.case_insensitive)
            .size_limit(1 << 20)
            .build()
            .map_err(|e| {
                ToolError::invalid_arguments(format!("invalid pattern: {e}"))
                    .with_suggestion("escape special characters, or set literal=true")
            })?;
        // Checks the base through the capability handle first: it must exist and stay
        // inside, and must not itself be a symlink (the walk below uses host paths).
        let meta = ws
            .dir()
            .symlink_metadata(&base)
            .map_err(|e| io_error(&base, e))?;
        if meta.is_symlink() {
            return Err(ToolError::invalid_arguments(format!(
                "{:?} is a symbolic link; search its target instead",
                display_path(&base)
            )));
        }
        ws.dir().metadata(&base).map_err(|e| io_error(&base, e))?;
        let mut walk = WalkBuilder::new(ws.root().join(&base));
        walk.hidden(!args.include_hidden)
            .require_git(false)
            .follow_links(false)
            .filter_entry(|e| e.file_name() != ".git");
        if let Some(glob) = &args.glob {
            let mut overrides = OverrideBuilder::new(ws.root());
            overrides
                .add(glob)
                .map_err(|e| ToolError::invalid_arguments(format!("invalid glob: {e}")))?;
            walk.overrides(
                overrides
                    .build()
                    .map_err(|e| ToolError::invalid_arguments(format!("invalid glob: {e}")))?,
            );
        }
        let mut matches = Vec::new();
        let mut files_searched = 0u64;
        let mut truncated = false;
        'files: for entry in walk.build() {
            if cancel.is_cancelled() {
                return Err(ToolError::new(
                    ErrorKind::Cancelled,
                    "the call was cancelled",
                ));
            }
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let Ok(rel) = entry.path().strip_prefix(ws.root()) else {
                continue;
            };
            let Some(lines) = open_text(ws, rel) else {
                continue;
            };
            files_searched += 1;
            for (idx, line) in lines.enumerate() {
                let Ok(line) = line else { break };
                let text = String::from_utf8_lossy(&line);
                if regex.is_match(&text) {
                    if matches.len() == args.max_results {
                        truncated = true;
                        break 'files;
                    }
                    let shown: String = text
                        .trim_end_matches(['\r', '\n'])
                        .chars()
                        .take(MAX_LINE_CHARS)
                        .collect();
                    matches.push(Match {
                        path: display_path(rel),
                        line: idx + 1,
                        text: shown,
                    });
                }
            }
        }
        let mut text = String::new();
        for m in &matches {
            text.push_str(&format!("{}:{}: {}\n", m.path, m.line, m.text));
        }
        if matches.is_empty() {
            text.push_str("no matches\n");
        } else if truncated {
            text.push_str(&format!(
                "[stopped at {} matches; narrow the search or raise max_results]\n",
                args.max_results
            ));
        }
        let found = Found {
            matches,
            files_searched,
            truncated,
        };
        Ok((text, found))
    }
}

/// The file's lines, when it is a readable text file of acceptable size. Opened through
/// the capability handle, so a file swapped for an escaping symlink mid-walk is refused.
fn open_text(ws: &Workspace, rel: &Path) -> Option<std::io::Split<BufReader<cap_std::fs::File>>> {
    let (file, meta) = ws.open_to_read(rel).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut reader = BufReader::new(file);
    if reader.fill_buf().ok()?.contains(&0) {
        return None;
    }
    Some(reader.split(b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Workspaces;
    use crate::read_file::tests::ctx;
    use serde_json::json;
    use std::sync::Arc;
    use toolgate_core::Tool;
    use toolgate_core::ToolOutput;

    fn workspace() -> (tempfile::TempDir, Arc<Workspaces>) {
        let (tmp, wss, root) = crate::read_file::tests::workspaces();
        std::fs::create_dir_all(root.join("src")).expect("mkdir");
        std::fs::create_dir_all(root.join("target")).expect("mkdir");
        std::fs::write(root.join(".gitignore"), "target/\n").expect("write");
        std::fs::write(
            root.join("src/main.rs"),
            "fn main() {\n    println!(\"needle\");\n}\n",
        )
        .expect("write");
        std::fs::write(root.join("src/lib.rs"), "// Needle (a+b)\n").expect("write");
        std::fs::write(root.join("target/gen.rs"), "needle\n").expect("write");
        std::fs::write(root.join("notes.txt"), "needle in notes\n").expect("write");
        std::fs::write(tmp.path().join("outside.txt"), "needle outside\n").expect("write");
        std::os::unix::fs::symlink("../outside.txt", root.join("escape.txt")).expect("symlink");
        // A FIFO nobody writes to is skipped, never opened to block.
        nix::unistd::mkfifo(&root.join("needle.fifo"), nix::sys::stat::Mode::S_IRWXU)
            .expect("mkfifo");
        (tmp, wss)
    }

    fn paths(out: &ToolOutput) -> Vec<String> {
        let s = out.structured.as_ref().expect("structured");
        s["matches"]
            .as_array()
            .expect("array")
            .iter()
            .map(|m| format!("{}:{}", m["path"].as_str().unwrap_or(""), m["line"]))
            .collect()
    }

    #[tokio::test]
    async fn finds_matches_respecting_gitignore_and_never_following_links_out() {
        let (_tmp, ws) = workspace();
        let tool = SearchFiles::new(ws);
        let out = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            tool.call(&ctx(), json!({"pattern": "needle"})),
        )
        .await
        .expect("the search hung")
        .expect("search");
        let mut found = paths(&out);
        found.sort();
        assert_eq!(found, ["notes.txt:1", "src/main.rs:2"]);
    }

    #[tokio::test]
    async fn literal_case_insensitive_glob_and_limits() {
        let (_tmp, ws) = workspace();
        let tool = SearchFiles::new(ws);
        let out = tool
            .call(
                &ctx(),
                json!({"pattern": "needle (a+b)", "literal": true, "case_insensitive": true}),
            )
            .await
            .expect("search");
        assert_eq!(paths(&out), ["src/lib.rs:1"]);
        let out = tool
            .call(&ctx(), json!({"pattern": "needle", "glob": "*.txt"}))
            .await
            .expect("search");
        assert_eq!(paths(&out), ["notes.txt:1"]);
        let out = tool
            .call(&ctx(), json!({"pattern": "e", "max_results": 1}))
            .await
            .expect("search");
        assert_eq!(out.structured.expect("structured")["truncated"], true);
    }

    #[tokio::test]
    async fn bad_patterns_and_escaping_bases_are_invalid_arguments() {
        let (_tmp, ws) = workspace();
        let tool = SearchFiles::new(ws);
        for args in [
            json!({"pattern": "("}),
            json!({"pattern": "x", "path": ".."}),
            json!({"pattern": "x", "path": "escape.txt"}),
            json!({"pattern": "x", "path": "/etc"}),
        ] {
            let err = tool.call(&ctx(), args.clone()).await.expect_err("refused");
            assert_eq!(err.kind, ErrorKind::InvalidArguments, "{args}: {err}");
        }
    }
}
