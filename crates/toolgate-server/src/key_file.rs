//! 32-byte keys from the configuration or from a file in the data directory, made with a
//! random key (mode 0600) on first start: the tenant-upstream credentials key and the
//! audit signing key. Instances sharing a database must share these keys: set them in
//! the configuration (a Kubernetes Secret) rather than rely on each instance's file.

use std::path::Path;

use anyhow::Context;
use ring::rand::{SecureRandom, SystemRandom};

use toolgate_core::settings::Secret;

use toolgate_core::settings::hex_key;

/// `configured` (the setting named `setting`) when set, else the key in `path`, created
/// if absent.
pub fn load(configured: Option<&Secret>, path: &Path, setting: &str) -> anyhow::Result<[u8; 32]> {
    if let Some(key) = configured {
        return hex_key(key.expose()).with_context(|| format!("{setting} must be 64 hex digits"));
    }
    match std::fs::read_to_string(path) {
        Ok(text) => {
            hex_key(&text).with_context(|| format!("{} must hold 64 hex digits", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn create(path: &Path) -> anyhow::Result<[u8; 32]> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut key = [0u8; 32];
    SystemRandom::new()
        .fill(&mut key)
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path);
    match file {
        Ok(mut file) => {
            writeln!(file, "{}", hex::encode(key))
                .with_context(|| format!("writing {}", path.display()))?;
            Ok(key)
        }
        // Another process made it first: use theirs.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let text = std::fs::read_to_string(path)?;
            hex_key(&text).with_context(|| format!("{} must hold 64 hex digits", path.display()))
        }
        Err(e) => Err(e).with_context(|| format!("creating {}", path.display())),
    }
}
