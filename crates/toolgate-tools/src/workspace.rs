//! The directory file tools are confined to.
//!
//! Two walls: a lexical check that gives clear messages (absolute paths, NUL bytes,
//! over-long paths and `..` climbing above the root are refused before any system call),
//! then every open goes through a `cap_std::fs::Dir` for the root, which resolves paths
//! beneath it and refuses symlinks that lead outside — on Linux with
//! `openat2(RESOLVE_BENEATH)`, so there is no window between check and open.

use std::collections::HashMap;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::fs::Dir;
use toolgate_core::auth::is_valid_tenant_name;
use toolgate_core::{AuthContext, ToolError};

/// Longest path argument accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;

/// A workspace root and a capability handle on it.
#[derive(Debug)]
pub struct Workspace {
    root: PathBuf,
    dir: Dir,
}

impl Workspace {
    /// Opens (creating if needed) the workspace at `root`.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        let root = root.canonicalize()?;
        let dir = Dir::open_ambient_dir(&root, cap_std::ambient_authority())?;
        Ok(Self { root, dir })
    }

    /// The root on the host file system.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The capability handle on the root; open everything through it.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Opens `rel` to read it, with its metadata. The open does not block: a FIFO with no
    /// writer (or a device) would otherwise hold a blocking-pool thread for ever. Callers
    /// refuse what is not a regular file ([`Self::open_regular`]) before reading.
    pub fn open_to_read(
        &self,
        rel: &Path,
    ) -> io::Result<(cap_std::fs::File, cap_std::fs::Metadata)> {
        use cap_std::fs::OpenOptionsExt;
        let file = self.dir.open_with(
            rel,
            cap_std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits()),
        )?;
        let meta = file.metadata()?;
        Ok((file, meta))
    }

    /// Opens `rel` to read it if it is a regular file: a directory, FIFO, socket or
    /// device is refused with a clear error (and never blocks, see
    /// [`Self::open_to_read`]).
    pub fn open_regular(
        &self,
        rel: &Path,
    ) -> Result<(cap_std::fs::File, cap_std::fs::Metadata), ToolError> {
        let (file, meta) = self.open_to_read(rel).map_err(|e| io_error(rel, e))?;
        if meta.is_dir() {
            return Err(ToolError::invalid_arguments(format!(
                "{:?} is a directory",
                rel.display()
            ))
            .with_suggestion("use list_files to see a directory"));
        }
        if !meta.is_file() {
            return Err(ToolError::invalid_arguments(format!(
                "{:?} is not a regular file (a FIFO, socket or device), so it is not read",
                rel.display()
            )));
        }
        Ok((file, meta))
    }

    /// Turns a caller's path into a normalized path relative to the root, or explains why
    /// it is refused. `""` and `"."` are the root itself, returned as `"."`.
    pub fn relative(&self, input: &str) -> Result<PathBuf, ToolError> {
        relative_path(input)
    }
}

/// Every tenant's workspace: `<root>/<tenant name>`, opened (and created) on first use
/// and kept open.
#[derive(Debug)]
pub struct Workspaces {
    root: PathBuf,
    open: Mutex<HashMap<String, Arc<Workspace>>>,
}

impl Workspaces {
    /// The workspaces under `root` (created if needed).
    pub fn new(root: impl Into<PathBuf>) -> io::Result<Self> {
        let root = root.into();
        std::fs::create_dir_all(&root)?;
        Ok(Self {
            root: root.canonicalize()?,
            open: Mutex::new(HashMap::new()),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The workspace of the caller's tenant.
    pub fn for_caller(&self, auth: &AuthContext) -> Result<Arc<Workspace>, ToolError> {
        let name = &auth.tenant_name;
        if !is_valid_tenant_name(name) {
            return Err(ToolError::internal(format!(
                "BUG: tenant name {name:?} is not a safe directory name"
            )));
        }
        let mut open = self
            .open
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(ws) = open.get(name) {
            return Ok(ws.clone());
        }
        let ws = Arc::new(Workspace::open(self.root.join(name)).map_err(|e| {
            ToolError::internal(format!("cannot open the workspace of tenant {name}: {e}"))
        })?);
        open.insert(name.clone(), ws.clone());
        Ok(ws)
    }
}

/// See [`Workspace::relative`].
pub fn relative_path(input: &str) -> Result<PathBuf, ToolError> {
    if input.contains('\0') {
        return Err(ToolError::invalid_arguments("path contains a NUL byte"));
    }
    if input.len() > MAX_PATH_BYTES {
        return Err(ToolError::invalid_arguments(format!(
            "path is longer than {MAX_PATH_BYTES} bytes"
        )));
    }
    let path = Path::new(input);
    if path.is_absolute() {
        return Err(ToolError::invalid_arguments(format!(
            "absolute path {input:?} refused: paths are relative to the workspace root"
        ))
        .with_suggestion("give the path relative to the workspace root, e.g. \"src/main.rs\""));
    }
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return Err(escape(input));
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(escape(input)),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    Ok(out)
}

fn escape(input: &str) -> ToolError {
    ToolError::invalid_arguments(format!("path {input:?} leads outside the workspace"))
}

/// Maps an I/O error on `path` to what the caller can act on.
pub fn io_error(path: &Path, err: io::Error) -> ToolError {
    let shown = path.display();
    match err.kind() {
        io::ErrorKind::NotFound => {
            ToolError::not_found(format!("{shown:?} does not exist in the workspace"))
        }
        io::ErrorKind::PermissionDenied | io::ErrorKind::CrossesDevices => {
            ToolError::invalid_arguments(format!(
                "{shown:?} leads outside the workspace or is not accessible"
            ))
        }
        // A link where a directory is needed (`out/x` with `out` a symlink to a file, or
        // to nothing): the path names something that is in the way.
        io::ErrorKind::AlreadyExists => ToolError::invalid_arguments(format!(
            "{shown:?} exists and is not a directory (a file or a symbolic link)"
        )),
        _ if err.raw_os_error() == Some(nix::libc::ELOOP) => {
            ToolError::invalid_arguments(format!("{shown:?} goes through too many symbolic links"))
        }
        io::ErrorKind::NotADirectory => {
            ToolError::invalid_arguments(format!("{shown:?} is not a directory"))
        }
        io::ErrorKind::IsADirectory => {
            ToolError::invalid_arguments(format!("{shown:?} is a directory"))
        }
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidFilename => {
            ToolError::invalid_arguments(format!("{shown:?} is not a valid path"))
        }
        _ => ToolError::internal(format!("I/O error on {shown:?}: {err}")),
    }
}

/// The entry's type: a file, a directory, a symbolic link or something else.
#[derive(Clone, Copy, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum EntryKind {
    File,
    Dir,
    Symlink,
    Other,
}

impl EntryKind {
    /// From a file type's `is_symlink`, `is_dir` and `is_file` (std's and cap-std's types
    /// share no trait).
    pub(crate) fn new(symlink: bool, dir: bool, file: bool) -> Self {
        match (symlink, dir, file) {
            (true, _, _) => EntryKind::Symlink,
            (_, true, _) => EntryKind::Dir,
            (_, _, true) => EntryKind::File,
            _ => EntryKind::Other,
        }
    }

    /// What follows the entry's name in a listing's text: `/` for a directory, `@` for a
    /// symbolic link.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            EntryKind::Dir => "/",
            EntryKind::Symlink => "@",
            EntryKind::File | EntryKind::Other => "",
        }
    }
}

/// The path as shown to callers (`/` separators, `.` for the root).
pub fn display_path(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolgate_core::ErrorKind;

    #[test]
    fn lexical_escapes_are_refused() {
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "nul\0byte",
            &"a/".repeat(3000),
        ] {
            let err = relative_path(bad).expect_err(bad);
            assert_eq!(err.kind, ErrorKind::InvalidArguments, "{bad}");
        }
    }

    #[test]
    fn paths_inside_are_normalized() {
        assert_eq!(
            relative_path("a/./b/../c").expect("inside"),
            PathBuf::from("a/c")
        );
        assert_eq!(relative_path("").expect("root"), PathBuf::from("."));
        assert_eq!(relative_path("./a/..").expect("root"), PathBuf::from("."));
    }

    #[test]
    fn symlinks_leaving_the_root_are_refused_by_the_handle() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside.txt");
        std::fs::write(&outside, "secret").expect("write");
        let ws = Workspace::open(tmp.path().join("ws")).expect("open");
        std::os::unix::fs::symlink(&outside, ws.root().join("link")).expect("symlink");
        std::os::unix::fs::symlink("../outside.txt", ws.root().join("rel-link")).expect("symlink");
        for name in ["link", "rel-link"] {
            let err = ws.dir().open(name).expect_err("escape");
            let mapped = io_error(Path::new(name), err);
            assert_eq!(mapped.kind, ErrorKind::InvalidArguments, "{name}: {mapped}");
        }
    }
}
