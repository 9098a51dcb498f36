//! The walls around `execute_command`: Landlock and resource limits.
//!
//! The gateway does not confine a child between `fork` and `exec` (that needs `unsafe`
//! and async-signal-safe code); it starts its own binary as a launcher
//! (`toolgate sandbox-exec <json>`), which confines itself with safe calls and then
//! starts the shell. Landlock domains and rlimits are inherited by every descendant.
//!
//! The launcher stays, as the shell's parent, to tie the command's life to the
//! gateway's: the gateway holds the write end of the launcher's stdin open while the call
//! runs, and the launcher kills its whole process group (the shell and everything it
//! started) the moment that pipe closes — when the gateway exits, however it dies
//! (`kill -9` included; a `PR_SET_PDEATHSIG` would not do here: it fires when the
//! *thread* that spawned the child ends, and the runtime's blocking threads come and go).
//!
//! What the sandbox allows, by [`SandboxMode`]:
//! - reads and execution beneath the configured system directories (`/usr`, `/etc`, …),
//!   the tenant's workspace and the call's private temp dir — not the gateway's data
//!   directory, other tenants' workspaces or `/proc`;
//! - writes beneath the private temp dir, and beneath the workspace in `workspace-write`;
//! - no TCP `bind`/`connect` unless the operator enables the network (Landlock ABI 4+);
//! - no signals to, or abstract Unix sockets of, processes outside the sandbox (ABI 6+).

use std::io;
use std::path::PathBuf;
use std::sync::OnceLock;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RestrictionStatus, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The newest Landlock ABI we ask for; older kernels get what they support.
const ABI_WANTED: ABI = ABI::V6;

/// How far a tenant's commands may reach.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Reads as below; writes only to the call's private temp dir.
    ReadOnly,
    /// Writes to the workspace and the private temp dir too.
    #[default]
    WorkspaceWrite,
    /// No Landlock (resource limits and the scrubbed environment still apply). For
    /// operators' own tenants only: it is set in the operator's config, never over the API.
    Unrestricted,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::ReadOnly => "read-only",
            SandboxMode::WorkspaceWrite => "workspace-write",
            SandboxMode::Unrestricted => "unrestricted",
        }
    }
}

/// Resource limits for a command and everything it starts (`setrlimit`, inherited).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct ResourceLimits {
    /// Address space per process, in bytes.
    pub memory_bytes: u64,
    /// CPU time per process, in seconds.
    pub cpu_secs: u64,
    /// Processes of the gateway's user (Linux counts per user, not per sandbox; not
    /// enforced when the gateway runs as root).
    pub processes: u64,
    /// Largest file a process may write, in bytes.
    pub file_bytes: u64,
}

impl Default for ResourceLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 4 << 30,
            cpu_secs: 300,
            processes: 512,
            file_bytes: 1 << 30,
        }
    }
}

/// Directories readable (and executable) inside the sandbox, beside the workspace.
pub fn default_read_paths() -> Vec<PathBuf> {
    [
        "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt",
    ]
    .into_iter()
    .map(PathBuf::from)
    .collect()
}

/// Device files every shell expects to open for reading and writing.
const DEVICES: [&str; 4] = ["/dev/null", "/dev/zero", "/dev/urandom", "/dev/random"];

/// Whether this kernel enforces Landlock (checked once).
pub fn landlock_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(ABI::V1))
            .and_then(Ruleset::create)
            .is_ok()
    })
}

/// One sandboxed command, as handed to the launcher (`toolgate sandbox-exec <json>`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Launch {
    pub mode: SandboxMode,
    pub read_paths: Vec<PathBuf>,
    pub workspace: PathBuf,
    pub temp: PathBuf,
    pub network: bool,
    pub limits: ResourceLimits,
    pub cwd: PathBuf,
    pub command: String,
}

impl Launch {
    /// Confines this process as described, runs `/bin/sh -c <command>` under it, and
    /// ends as the shell ended: with its exit code, or killed by the signal that killed
    /// it. Should stdin close first (the gateway is gone), kills the process group — the
    /// shell, what it started, and this launcher. Returns only when the shell could not
    /// start. The environment is inherited: the gateway scrubbed it when it started the
    /// launcher.
    pub fn run(self) -> io::Error {
        if let Err(err) = self.limits.apply() {
            return err;
        }
        if let Err(err) = self.restrict() {
            return err;
        }
        let mut shell = match std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(&self.command)
            .current_dir(&self.cwd)
            .stdin(std::process::Stdio::null())
            .spawn()
        {
            Ok(shell) => shell,
            Err(err) => return err,
        };
        std::thread::spawn(|| {
            use std::io::Read;
            let mut sink = [0u8; 64];
            while matches!(io::stdin().read(&mut sink), Ok(n) if n > 0) {}
            // The gateway is gone: nothing of this command may outlive it.
            let _ =
                nix::sys::signal::killpg(nix::unistd::getpgrp(), nix::sys::signal::Signal::SIGKILL);
        });
        let status = match shell.wait() {
            Ok(status) => status,
            Err(err) => return err,
        };
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status
            .signal()
            .and_then(|s| nix::sys::signal::Signal::try_from(s).ok())
        {
            // No handler is set in this process, so the default action ends it the way
            // the shell ended; should it not (a stopped-only signal), exit as a shell would.
            let _ = nix::sys::signal::raise(signal);
            std::process::exit(128 + signal as i32);
        }
        std::process::exit(status.code().unwrap_or(1));
    }

    /// Applies Landlock to this process (and so to everything it executes).
    fn restrict(&self) -> io::Result<()> {
        if self.mode == SandboxMode::Unrestricted {
            return Ok(());
        }
        let abi = ABI_WANTED;
        let read = AccessFs::from_read(abi);
        let all = AccessFs::from_all(abi);
        let workspace_access = match self.mode {
            SandboxMode::WorkspaceWrite => all,
            SandboxMode::ReadOnly | SandboxMode::Unrestricted => read,
        };
        let existing = self.read_paths.iter().filter(|p| p.exists());
        let build = || -> Result<RestrictionStatus, landlock::RulesetError> {
            let mut ruleset = Ruleset::default().handle_access(all)?;
            if !self.network {
                ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
            }
            ruleset
                .scope(Scope::from_all(abi))?
                .create()?
                .add_rules(path_beneath_rules(existing, read))?
                .add_rules(path_beneath_rules(DEVICES, read | AccessFs::WriteFile))?
                .add_rules(path_beneath_rules([&self.workspace], workspace_access))?
                .add_rules(path_beneath_rules([&self.temp], all))?
                .restrict_self()
        };
        match build() {
            Ok(status) if status.ruleset != RulesetStatus::NotEnforced => Ok(()),
            Ok(_) => Err(io::Error::other("this kernel does not enforce Landlock")),
            Err(err) => Err(io::Error::other(format!("Landlock: {err}"))),
        }
    }
}

impl ResourceLimits {
    /// Sets these limits on this process; they are inherited by its children.
    fn apply(&self) -> io::Result<()> {
        use nix::sys::resource::{Resource, setrlimit};
        for (resource, value) in [
            (Resource::RLIMIT_AS, self.memory_bytes),
            (Resource::RLIMIT_CPU, self.cpu_secs),
            (Resource::RLIMIT_NPROC, self.processes),
            (Resource::RLIMIT_FSIZE, self.file_bytes),
            (Resource::RLIMIT_CORE, 0),
        ] {
            setrlimit(resource, value, value).map_err(io::Error::from)?;
        }
        Ok(())
    }
}
