//! What a demo run keeps to itself on the machine: its temporary folder (both SQLite
//! databases, removed when dropped) and the seed of the receiver's flaky pattern when none is
//! given. No network, no API.

use std::path::PathBuf;

pub(super) fn random_seed() -> u64 {
    let mut bytes = [0u8; 8];
    match getrandom::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes) % 1_000_000,
        // Only the flaky pattern depends on it: the clock is random enough.
        Err(_) => u64::from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos(),
        ),
    }
}

/// A folder of its own under the system's temporary directory, removed when dropped.
pub(super) struct TempDir {
    pub(super) path: PathBuf,
}

impl TempDir {
    pub(super) fn new() -> Result<TempDir, String> {
        let mut bytes = [0u8; 6];
        getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for a folder name: {e}"))?;
        let path = std::env::temp_dir().join(format!(
            "kxp-demo-{}-{}",
            std::process::id(),
            hex::encode(bytes)
        ));
        std::fs::create_dir(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(TempDir { path })
    }

    pub(super) fn sqlite_url(&self, file: &str) -> String {
        format!("sqlite://{}", self.path.join(file).display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}
