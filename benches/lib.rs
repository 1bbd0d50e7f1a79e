//! Criterion benchmarks for loomflow live in `benches/`.

use std::path::{Path, PathBuf};

/// A fresh SQLite path in the system temp directory for the benchmark `name`.
pub fn temp_db(name: &str) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("loomflow-bench-{name}-{}.db", std::process::id()));
    remove_db(&path);
    path
}

/// Removes a database file and its WAL companions.
pub fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}
