//! `execute_command`: a shell command in the caller's workspace, sandboxed.
//!
//! - `/bin/sh -c <command>` in the workspace (or a directory beneath it), in a new
//!   process group, with stdin closed and an environment holding only `PATH`, `HOME` (the
//!   workspace), `TMPDIR` (a private temp dir removed afterwards), `LANG`, `TERM` and the
//!   variables the operator passes through.
//! - Landlock and resource limits from [`crate::sandbox`]; on a kernel without Landlock
//!   the tool refuses to run unless the operator allowed it (`allow_unsandboxed`).
//! - stdout and stderr share one pipe, so their lines interleave as they were written;
//!   the first 30,000 characters are kept, with a marker when more were written.
//! - When the shell exits, whatever it left running in its group is killed; when the call
//!   passes its deadline or is cancelled (the executor drops this future), the whole group
//!   is killed; when the gateway itself dies (even by `kill -9`), the launcher sees its
//!   stdin close and kills the group (see [`crate::sandbox`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::time::Instant;
use toolgate_core::{CallContext, Effects, ErrorKind, Risk, Tool, ToolError, ToolOutput, ToolSpec};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::sandbox::{Launch, ResourceLimits, SandboxMode, landlock_available};
use crate::workspace::{display_path, io_error};
use crate::{Workspaces, parse_args};

/// Characters of merged output returned.
pub const MAX_OUTPUT_CHARS: usize = 30_000;
/// Bytes of output kept in memory; enough for [`MAX_OUTPUT_CHARS`] of any UTF-8.
const MAX_OUTPUT_BYTES: usize = MAX_OUTPUT_CHARS * 4;
/// How long output is still read after the shell exits (and its group was killed).
const DRAIN: Duration = Duration::from_secs(1);
/// The gateway's hidden subcommand that confines itself and runs the command.
pub const LAUNCHER_SUBCOMMAND: &str = "sandbox-exec";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How `execute_command` runs commands; from the operator's config.
#[derive(Clone, Debug)]
pub struct CommandOptions {
    /// Sandbox for tenants not named in `tenant_sandbox`.
    pub sandbox: SandboxMode,
    /// Per-tenant sandbox, by tenant name.
    pub tenant_sandbox: HashMap<String, SandboxMode>,
    /// Run unsandboxed where the kernel lacks Landlock (otherwise the tool refuses).
    pub allow_unsandboxed: bool,
    /// Allow TCP connections and binds from sandboxed commands.
    pub network: bool,
    /// Directories readable inside the sandbox, beside the workspace.
    pub read_paths: Vec<PathBuf>,
    pub limits: ResourceLimits,
    /// Default and longest deadline.
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// Variables copied from the gateway's environment into the command's.
    pub env_passthrough: Vec<String>,
    /// Where private temp dirs are made.
    pub temp_root: PathBuf,
    /// The program started as `<launcher> sandbox-exec <json>`: the gateway's own binary,
    /// which calls [`Launch::exec`].
    pub launcher: PathBuf,
}

impl Default for CommandOptions {
    fn default() -> Self {
        Self {
            sandbox: SandboxMode::default(),
            tenant_sandbox: HashMap::new(),
            allow_unsandboxed: false,
            network: false,
            read_paths: crate::sandbox::default_read_paths(),
            limits: ResourceLimits::default(),
            default_timeout: Duration::from_secs(120),
            max_timeout: Duration::from_secs(600),
            env_passthrough: Vec::new(),
            temp_root: std::env::temp_dir(),
            launcher: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("toolgate")),
        }
    }
}

impl CommandOptions {
    fn sandbox_for(&self, tenant: &str) -> SandboxMode {
        self.tenant_sandbox
            .get(tenant)
            .copied()
            .unwrap_or(self.sandbox)
    }
}

pub struct ExecuteCommand {
    spec: ToolSpec,
    workspaces: Arc<Workspaces>,
    options: CommandOptions,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// Shell command line
    #[schemars(length(min = 1, max = 100000))]
    command: String,
    /// Directory to run in, relative to the workspace root (default: the root)
    #[serde(default)]
    cwd: Option<String>,
}

/// How the command ended.
#[derive(Serialize, JsonSchema)]
struct Finished {
    /// null when killed by a signal
    exit_code: Option<i32>,
    signal: Option<i32>,
    /// Bytes written to stdout and stderr
    output_bytes: u64,
    truncated: bool,
    sandbox: SandboxMode,
}

impl ExecuteCommand {
    pub fn new(workspaces: Arc<Workspaces>, options: CommandOptions) -> Self {
        let spec = ToolSpec::new(
            "execute_command",
            "Run a shell command (/bin/sh -c) in the workspace and return its merged stdout and \
             stderr (first 30,000 characters) and exit code. Runs sandboxed: writes reach only the \
             workspace and $TMPDIR, there is no network unless the operator allows it, and the \
             whole process group is killed at the deadline.",
            crate::input_schema::<Args>(),
        )
        .with_title("Execute command")
        .with_category("shell")
        .with_risk(
            Risk::High,
            Effects {
                writes: true,
                destructive: true,
                idempotent: false,
                open_world: options.network,
            },
        )
        .with_timeouts(options.default_timeout, options.max_timeout)
        .with_max_output_chars(MAX_OUTPUT_CHARS + 200)
        .with_output_schema(crate::output_schema::<Finished>());
        Self {
            spec,
            workspaces,
            options,
        }
    }
}

#[async_trait]
impl Tool for ExecuteCommand {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, ctx: &CallContext, args: Value) -> Result<ToolOutput, ToolError> {
        let args: Args = parse_args(args)?;
        let mode = self.options.sandbox_for(&ctx.auth.tenant_name);
        let ran = run_sandboxed(
            &self.options,
            &self.workspaces,
            ctx,
            args.cwd.as_deref().unwrap_or("."),
            args.command,
            mode,
        )
        .await?;
        let (mut text, cut) = first_chars(&ran.output, MAX_OUTPUT_CHARS);
        let truncated = cut || (ran.output.len() as u64) < ran.written;
        if truncated {
            text.push_str(&format!(
                "\n[output truncated: showing the first {MAX_OUTPUT_CHARS} characters of {} bytes]",
                ran.written
            ));
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        match (ran.code, ran.signal) {
            (Some(code), _) => text.push_str(&format!("[exit code {code}]")),
            (None, Some(signal)) => text.push_str(&format!("[killed by signal {signal}]")),
            (None, None) => text.push_str("[exited]"),
        }
        let finished = Finished {
            exit_code: ran.code,
            signal: ran.signal,
            output_bytes: ran.written,
            truncated,
            sandbox: ran.mode,
        };
        Ok(ToolOutput::text(text).with_structured(crate::structured(&finished)))
    }
}

/// What a sandboxed command did.
pub(crate) struct Ran {
    /// The first bytes of its merged stdout and stderr.
    pub output: Vec<u8>,
    /// Bytes it wrote in all.
    pub written: u64,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The sandbox it ran in.
    pub mode: SandboxMode,
}

/// Runs `/bin/sh -c <command>` in the caller's workspace directory `cwd`, confined by
/// `mode` (see the module documentation), until it exits or this future is dropped.
pub(crate) async fn run_sandboxed(
    options: &CommandOptions,
    workspaces: &Workspaces,
    ctx: &CallContext,
    cwd: &str,
    command: String,
    mut mode: SandboxMode,
) -> Result<Ran, ToolError> {
    let ws = workspaces.for_caller(&ctx.auth)?;
    let rel = ws.relative(cwd)?;
    let meta = ws.dir().metadata(&rel).map_err(|e| io_error(&rel, e))?;
    if !meta.is_dir() {
        return Err(ToolError::invalid_arguments(format!(
            "cwd {:?} is not a directory",
            display_path(&rel)
        )));
    }
    if mode != SandboxMode::Unrestricted && !landlock_available() {
        if !options.allow_unsandboxed {
            return Err(ToolError::new(
                ErrorKind::Denied,
                "commands are off on this host: its kernel does not enforce Landlock, \
                 and the operator has not allowed unsandboxed commands",
            ));
        }
        mode = SandboxMode::Unrestricted;
    }
    let temp = tempfile::Builder::new()
        .prefix("toolgate-cmd-")
        .tempdir_in(&options.temp_root)
        .map_err(|e| ToolError::internal(format!("cannot make the command's temp dir: {e}")))?;
    let launch = Launch {
        mode,
        read_paths: options.read_paths.clone(),
        workspace: ws.root().to_owned(),
        temp: temp.path().to_owned(),
        network: options.network,
        limits: options.limits,
        cwd: ws.root().join(&rel),
        command,
    };
    let launch = serde_json::to_string(&launch).map_err(ToolError::internal)?;
    let (tx, mut rx) = tokio::net::unix::pipe::pipe().map_err(ToolError::internal)?;
    let out = tx.into_blocking_fd().map_err(ToolError::internal)?;
    let err = out.try_clone().map_err(ToolError::internal)?;
    let mut cmd = tokio::process::Command::new(&options.launcher);
    cmd.arg(LAUNCHER_SUBCOMMAND)
        .arg(launch)
        .current_dir(ws.root())
        .env_clear()
        .env("PATH", PATH)
        .env("HOME", ws.root())
        .env("TMPDIR", temp.path())
        .env("LANG", "C.UTF-8")
        .env("TERM", "dumb")
        // Held open while the call runs: the launcher kills the command when it closes.
        .stdin(Stdio::piped())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .kill_on_drop(true);
    for name in &options.env_passthrough {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    let mut child = cmd.spawn().map_err(|e| {
        ToolError::internal(format!(
            "cannot start the sandbox launcher {}: {e}",
            options.launcher.display()
        ))
    })?;
    // Our copies of the pipe's write end must go, or reading never ends.
    drop(cmd);
    let _lifeline = child.stdin.take();
    let group = KillGroup(child.id().and_then(|pid| i32::try_from(pid).ok()));

    let mut kept = Vec::with_capacity(8192);
    let mut written: u64 = 0;
    let mut chunk = vec![0u8; 16 * 1024];
    let mut status = None;
    let mut drain_until: Option<Instant> = None;
    loop {
        tokio::select! {
            read = rx.read(&mut chunk) => match read {
                Ok(0) => break,
                Ok(n) => {
                    written += n as u64;
                    let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..n.min(room)]);
                }
                Err(e) => return Err(ToolError::internal(format!("reading the command's output: {e}"))),
            },
            exited = child.wait(), if status.is_none() => {
                status = Some(exited.map_err(ToolError::internal)?);
                group.kill();
                drain_until = Some(Instant::now() + DRAIN);
            }
            () = sleep_until(drain_until), if drain_until.is_some() => break,
        }
    }
    let status = match status {
        Some(status) => status,
        None => child.wait().await.map_err(ToolError::internal)?,
    };
    group.kill();
    drop(temp);
    use std::os::unix::process::ExitStatusExt;
    Ok(Ran {
        output: kept,
        written,
        code: status.code(),
        signal: status.signal(),
        mode,
    })
}

/// Kills a process group when told to and when dropped (deadline, cancellation).
struct KillGroup(Option<i32>);

impl KillGroup {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            // A group that is gone already yields ESRCH, which is fine.
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The first `limit` characters of lossily decoded `bytes`, and whether any were cut.
fn first_chars(bytes: &[u8], limit: usize) -> (String, bool) {
    let text = String::from_utf8_lossy(bytes);
    match text.char_indices().nth(limit) {
        Some((end, _)) => (text[..end].to_owned(), true),
        None => (text.into_owned(), false),
    }
}
