//! Opening the store named by `--db` (or `LOOMFLOW_DB`).

use loomflow::Runtime;

use crate::Failure;

/// The runtime over the store `db` names: `postgres://…` (or `postgresql://…`), `sqlite:PATH`,
/// or a path to a SQLite file.
pub(crate) async fn open(db: Option<&str>) -> Result<Runtime, Failure> {
    let db = db.ok_or_else(|| {
        Failure::usage("no store: pass --db sqlite:PATH (or postgres://…) or set LOOMFLOW_DB")
    })?;
    if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        return Ok(Runtime::postgres(db).await?);
    }
    let path = db.strip_prefix("sqlite:").unwrap_or(db);
    if path.contains("://") {
        return Err(Failure::usage(format!(
            "unsupported store {db}: use sqlite:PATH or postgres://…"
        )));
    }
    if !std::path::Path::new(path).exists() {
        // Opening would create an empty file: a typo would look like a store with no runs.
        return Err(Failure::not_found(format!("no SQLite file at {path}")));
    }
    Ok(Runtime::sqlite(path)?)
}
