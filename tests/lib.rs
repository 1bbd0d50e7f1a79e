//! Shared helpers for loomflow's integration tests (the tests themselves live beside this
//! file, one target each).
//!
//! The README's code blocks are doctests of this crate, so `cargo test --workspace` compiles
//! (and runs) every snippet a newcomer would paste.

#![doc(test(attr(deny(warnings))))]

use std::path::{Path, PathBuf};
use std::process::Command;

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// Writes `text` to `<dir>/<name>.mmd` for `.ci/run` to parse, where `dir` is
/// `LOOMFLOW_MERMAID_DIR` or a directory under the target dir; and, when the mermaid.js
/// parser is installed (`.ci/mermaid/install.sh`), parses it here and returns its verdict.
///
/// # Errors
///
/// The parser's output, when it rejected the diagram; an I/O error as text.
pub fn check_mermaid(name: &str, text: &str) -> Result<(), String> {
    let dir = std::env::var_os("LOOMFLOW_MERMAID_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/mermaid"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let path = dir.join(format!("{name}.mmd"));
    std::fs::write(&path, text).map_err(|e| e.to_string())?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no workspace root")?;
    if !root.join(".ci/mermaid/node_modules/mermaid").exists() {
        eprintln!("skipped: mermaid.js parse of {name} (run .ci/mermaid/install.sh to enable)");
        return Ok(());
    }
    let output = Command::new("node")
        .arg(root.join(".ci/mermaid/check.mjs"))
        .arg(&path)
        .output()
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// A command that re-runs the current test binary as a child process, running only the
/// `#[ignore]`d test `entry` (the crash and restart tests' child processes).
///
/// # Panics
///
/// When the current executable cannot be found.
#[allow(clippy::expect_used)] // test support: no executable, no test
pub fn child_test_process(entry: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("the test binary"));
    command.args([
        "--ignored",
        "--exact",
        entry,
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// A SQLite file path in the temp directory, removed (with its WAL files) when dropped.
#[derive(Debug)]
pub struct TempDb(pub std::path::PathBuf);

impl TempDb {
    /// A fresh path for `name`, unique to this process and call.
    pub fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "loomflow-{name}-{}-{}.db",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let db = Self(path);
        db.remove();
        db
    }

    /// The path.
    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    fn remove(&self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut name = self.0.clone().into_os_string();
            name.push(suffix);
            let _ = std::fs::remove_file(name);
        }
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        self.remove();
    }
}

/// A fresh directory in the temp directory, removed with everything in it when dropped.
#[derive(Debug)]
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A new, empty directory for `name`, unique to this process and call.
    ///
    /// # Panics
    ///
    /// When the directory cannot be created.
    #[allow(clippy::expect_used)] // test support: no temp dir, no test
    pub fn new(name: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "loomflow-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("a temp dir");
        Self(path)
    }

    /// The path of `file` in the directory.
    pub fn join(&self, file: &str) -> std::path::PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
