//! What the examples' tests share: finding an example's binary.

use std::path::PathBuf;

/// The binary of example `name`, as `cargo test` built it beside this test binary.
pub(crate) fn example_binary(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // target/<profile>/deps/<this test> -> target/<profile>/examples/<name>
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .ok_or("no profile directory above the test binary")?;
    let path = profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "{} is not built: run `cargo test -p loomflow-examples`, which builds the examples",
            path.display()
        ))
    }
}
