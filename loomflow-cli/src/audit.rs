//! `loomflow audit`: a thread's audit log.

use loomflow::Runtime;
use loomflow::runtime::{AuditKind, AuditQuery};

use crate::Failure;
use crate::output::{Output, table, time};

/// The audit kind `kind` names.
pub(crate) fn audit_kind(kind: &str) -> Result<AuditKind, Failure> {
    AuditKind::parse(kind).ok_or_else(|| {
        let known: Vec<&str> = AuditKind::ALL.iter().map(|k| k.as_str()).collect();
        Failure::usage(format!(
            "unknown audit kind {kind:?}; known: {}",
            known.join(", ")
        ))
    })
}

/// Prints the audit log of `thread` (of every thread with `None`), oldest first, optionally
/// one kind only, and a page of it: at most `limit` entries, those after the id `after`.
pub(crate) async fn audit(
    runtime: &Runtime,
    out: &Output,
    thread: Option<&str>,
    kind: Option<&str>,
    (limit, after): (Option<usize>, Option<u64>),
) -> Result<(), Failure> {
    let mut query = match thread {
        Some(thread) => AuditQuery::thread(thread),
        None => AuditQuery::all(),
    };
    if let Some(kind) = kind {
        query = query.kind(audit_kind(kind)?);
    }
    if let Some(limit) = limit {
        query = query.limit(limit);
    }
    if let Some(after) = after {
        query = query.after_id(after);
    }
    let entries = runtime.audit_query(&query).await?;
    // A thread that never ran (and has no entries) is not found, so that a mistyped thread
    // does not read as a quiet one.
    if let Some(thread) = thread
        && entries.is_empty()
    {
        let run = runtime.store().get_run(thread).await;
        if run.map_err(loomflow::RuntimeError::from)?.is_none()
            && runtime
                .audit_query(&AuditQuery::thread(thread).limit(1))
                .await?
                .is_empty()
        {
            return Err(Failure::not_found(format!("thread {thread} has no run")));
        }
    }
    if out.json {
        out.json(&entries);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.id.to_string(),
                time(e.at_ms),
                e.thread.clone(),
                e.run.to_string(),
                e.kind.to_string(),
                e.subject.clone(),
                e.actor.clone().unwrap_or_else(|| "-".to_owned()),
                e.detail.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "ID", "AT", "THREAD", "RUN", "KIND", "SUBJECT", "BY", "DETAIL",
        ],
        &rows,
    );
    Ok(())
}
