//! Runs listed a page at a time.

use serde_json::json;

use super::unique;
use crate::runtime::store::{RunCursor, RunFilter, Store};

/// Pages of runs, each starting after the cursor of the one before, list every run once
/// and in the listing's order: the most recently updated first, ties by thread, bytewise
/// (not by a locale's collation).
pub(super) async fn runs_are_listed_a_page_at_a_time(store: &dyn Store) {
    let (graph, base) = (unique("paged"), unique("page"));
    let runs = [
        ("b", 5_000),
        ("B", 5_000),
        ("a:é", 5_000),
        ("a", 5_000),
        ("z", 7_000),
        ("y", 3_000),
    ];
    for (name, ms) in runs {
        let thread = format!("{base}/{name}");
        store
            .submit_run(&thread, &graph, json!(0), ms)
            .await
            .unwrap();
    }
    let prefix = base.len() + 1;
    let listed = |filter: RunFilter| async move {
        let page = store.list_runs(&filter).await.unwrap();
        let names: Vec<String> = page.iter().map(|r| r.thread[prefix..].to_owned()).collect();
        (names, page.last().map(RunCursor::of))
    };
    let (all, _) = listed(RunFilter::new().graph(&graph)).await;
    assert_eq!(
        all,
        ["z", "B", "a", "a:é", "b", "y"],
        "newest first, then by thread's bytes"
    );
    let mut paged = Vec::new();
    let mut after: Option<RunCursor> = None;
    for _ in 0..all.len() {
        let mut filter = RunFilter::new().graph(&graph).limit(2);
        if let Some(cursor) = after.take() {
            // Through its text form, as `GET /v1/runs` hands it out and takes it back.
            filter = filter.after(cursor.to_string().parse().unwrap());
        }
        let (page, last) = listed(filter).await;
        let full = page.len() == 2;
        paged.extend(page);
        match last {
            Some(cursor) if full => after = Some(cursor),
            _ => break,
        }
    }
    assert_eq!(paged, all, "pages of two, each after the one before");
}
