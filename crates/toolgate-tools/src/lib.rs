//! # toolgate-tools
//!
//! Built-in tools. Each implements [`toolgate_core::Tool`] and is called only by the
//! executor, which has already validated its arguments against the tool's schema.
//! Depends on `toolgate-core` only (no HTTP framework, no database).
//!
//! # Layout
//!
//! - [`workspace`]: each tenant's workspace (`<root>/<tenant name>`), which every file
//!   tool is confined to. Files are opened
//!   through a `cap_std` directory handle, so absolute paths, `..` escapes and symlinks
//!   that leave the root are refused by the kernel (`openat2(RESOLVE_BENEATH)`), not by
//!   string checks alone.
//! - [`list_files`], [`read_file`], [`search_files`]: read-only workspace tools.
//! - [`execute_command`]: shell commands in the workspace, confined by [`sandbox`]
//!   (Landlock, resource limits, a scrubbed environment, process-group kill).
//! - [`diagnostics`]: `echo` and `sleep`, for checking a deployment end to end (and
//!   for benchmarks); off with `tools.diagnostics = false`.
//!
//! The entry point is [`builtin_tools`].

use std::sync::Arc;

use toolgate_core::Tool;

pub mod diagnostics;
pub mod execute_command;
pub mod list_files;
pub mod read_file;
pub mod sandbox;
pub mod search_files;
pub mod workspace;

pub use execute_command::CommandOptions;
pub use sandbox::{ResourceLimits, SandboxMode};
pub use workspace::{Workspace, Workspaces};

/// Which built-ins to offer.
#[derive(Clone, Debug)]
pub struct BuiltinOptions {
    /// Register `echo` and `sleep`.
    pub diagnostics: bool,
    /// Register `execute_command`, run this way; `None` leaves it out.
    pub commands: Option<CommandOptions>,
}

/// The built-in tools; file tools work in the caller's tenant's workspace.
pub fn builtin_tools(workspaces: Arc<Workspaces>, options: &BuiltinOptions) -> Vec<Arc<dyn Tool>> {
    let mut tools: Vec<Arc<dyn Tool>> = vec![
        Arc::new(list_files::ListFiles::new(workspaces.clone())),
        Arc::new(read_file::ReadFile::new(workspaces.clone())),
        Arc::new(search_files::SearchFiles::new(workspaces.clone())),
    ];
    if let Some(commands) = &options.commands {
        tools.push(Arc::new(execute_command::ExecuteCommand::new(
            workspaces,
            commands.clone(),
        )));
    }
    if options.diagnostics {
        tools.push(Arc::new(diagnostics::Echo::new()));
        tools.push(Arc::new(diagnostics::Sleep::new()));
    }
    tools
}

/// Parses validated arguments into a tool's typed argument struct. The schema has already
/// been checked, so a failure here means the schema and the struct disagree.
pub(crate) fn parse_args<T: serde::de::DeserializeOwned>(
    args: serde_json::Value,
) -> Result<T, toolgate_core::ToolError> {
    serde_json::from_value(args)
        .map_err(|e| toolgate_core::ToolError::invalid_arguments(e.to_string()))
}

/// Runs blocking file work off the async runtime.
pub(crate) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, toolgate_core::ToolError> + Send + 'static,
) -> Result<T, toolgate_core::ToolError> {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(toolgate_core::ToolError::internal(e)))
}
