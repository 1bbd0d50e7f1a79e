//! Opening the store named by `--db` (or `LOOMFLOW_DB`).

use loomflow::Runtime;

use crate::Failure;

/// The runtime over the store `db` names: `sqlite:PATH`, or a path to a SQLite file.
pub(crate) fn open(db: Option<&str>) -> Result<Runtime, Failure> {
    let db =
        db.ok_or_else(|| Failure::usage("no store: pass --db sqlite:PATH or set LOOMFLOW_DB"))?;
    let path = db.strip_prefix("sqlite:").unwrap_or(db);
    if path.contains("://") {
        return Err(Failure::usage(format!(
            "unsupported store {db}: this build reads SQLite files (sqlite:PATH)"
        )));
    }
    if !std::path::Path::new(path).exists() {
        // Opening would create an empty file: a typo would look like a store with no runs.
        return Err(Failure::not_found(format!("no SQLite file at {path}")));
    }
    Ok(Runtime::sqlite(path)?)
}
