//! Temporary directories for tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// A new, empty directory under the system temporary directory, named
/// `<prefix>-<pid>-<nanos>-<n>` (unique across tests and test processes).
pub fn temp_dir(prefix: &str) -> PathBuf {
    temp_dir_in(&std::env::temp_dir(), prefix)
}

/// A new, empty directory under `base`, named as [`temp_dir`] names it.
pub fn temp_dir_in(base: &Path, prefix: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = base.join(format!("{prefix}-{}-{nanos}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}
