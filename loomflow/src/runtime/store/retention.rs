//! Retention: which checkpoints of a thread a store keeps when it keeps only the newest
//! (the memory store always, SQLite and PostgreSQL when their options ask).

use super::RunStatus;

/// What retention reads of a kept checkpoint.
pub(crate) trait RetainedRow {
    /// Its id; ids grow in the order rows were written.
    fn id(&self) -> u64;
    /// The run it belongs to.
    fn run(&self) -> u64;
    /// Its subgraph's namespace (empty at the top level).
    fn namespace(&self) -> &str;
    /// Where its run stood.
    fn status(&self) -> RunStatus;
    /// Whether it keeps the graph's name and description (a run's first top-level row does,
    /// and its first after a change of its graph).
    fn described(&self) -> bool;
}

/// A row of a durable store as retention reads it: its columns, and whether its body names
/// the graph.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) struct StoredRow {
    id: u64,
    run: u64,
    namespace: String,
    status: RunStatus,
    described: bool,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl StoredRow {
    /// The row's columns as the store keeps them, and whether its body names the graph
    /// (`graph_name`: a run's first row, and the first after a change of its graph); `None`
    /// when one does not read as it should (a negative id, an unknown status).
    pub(crate) fn read(
        (id, run): (i64, i64),
        namespace: String,
        status: &str,
        described: bool,
    ) -> Option<Self> {
        Some(Self {
            id: u64::try_from(id).ok()?,
            run: u64::try_from(run).ok()?,
            namespace,
            status: RunStatus::parse(status)?,
            described,
        })
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl RetainedRow for StoredRow {
    fn id(&self) -> u64 {
        self.id
    }

    fn run(&self) -> u64 {
        self.run
    }

    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn status(&self) -> RunStatus {
        self.status
    }

    fn described(&self) -> bool {
        self.described
    }
}

/// The ids of one thread's rows (all of them, oldest first) that go when it is cut down to
/// `limit` (see [`kept_rows`]).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn stored_rows_dropped(rows: &[StoredRow], limit: usize) -> Vec<i64> {
    (rows.iter().zip(kept_rows(rows, limit)))
        .filter(|(_, keep)| !keep)
        // Read from an `i64` (see `StoredRow::read`): the conversion back cannot fail.
        .filter_map(|(row, _)| i64::try_from(row.id).ok())
        .collect()
}

/// Whether writing `checkpoint` may cut its thread down: a top-level row that is not
/// `running` (a run that completes, is cancelled or fails, or suspends: a run that suspends
/// every turn is cut too, as the memory store cuts it).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn cuts(checkpoint: &super::Checkpoint) -> bool {
    checkpoint.namespace.is_empty() && checkpoint.status != RunStatus::Running
}

/// Whether a thread of `count` rows is due a cut down to `limit`: once it holds half as
/// many again, so that a run's end reads the thread's rows only now and then.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn due(count: i64, limit: usize) -> bool {
    usize::try_from(count).unwrap_or(usize::MAX) > limit + limit / 2
}

/// Which of one thread's checkpoints (oldest first) stay when it is cut down to `limit`, keeping the newest `limit`
/// top-level interrupted ones whatever their age (a fork goes back to a suspension; a run
/// that suspends every turn still does not grow without bound) with the suspended subgraph
/// rows a fork from each takes along, what the thread's newest run may still read (see
/// [`needed`]), and the first checkpoint of every run with a top-level one kept: it
/// describes the run's graph, which a fork from any of them names (see `Runtime::fork`).
pub(crate) fn kept_rows<R: RetainedRow>(kept: &[R], limit: usize) -> Vec<bool> {
    let needed = needed(kept);
    let mut suspensions_left = limit;
    let mut suspension: Vec<bool> = (kept.iter().rev())
        .map(|cp| {
            let kept = cp.namespace().is_empty()
                && cp.status() == RunStatus::Interrupted
                && suspensions_left > 0;
            suspensions_left -= usize::from(kept);
            kept
        })
        .collect();
    suspension.reverse();
    // A fork from a suspension takes along the newest row of each of its run's subgraphs
    // written before it: kept too when it is suspended (where the subgraph asked).
    let parents: Vec<usize> = (0..kept.len()).filter(|&at| suspension[at]).collect();
    for at in parents {
        let mut namespaces: Vec<&str> = Vec::new();
        for child in (0..at).rev() {
            let (cp, run) = (&kept[child], kept[at].run());
            if cp.namespace().is_empty() || cp.run() != run || namespaces.contains(&cp.namespace())
            {
                continue;
            }
            namespaces.push(cp.namespace());
            suspension[child] |= cp.status() == RunStatus::Interrupted;
        }
    }
    // Oldest first, until enough are gone.
    let mut excess = kept.len().saturating_sub(limit);
    let mut keep: Vec<bool> = (kept.iter().zip(suspension))
        .map(|(cp, suspension)| {
            let needed = suspension || needed.contains(&cp.id());
            if excess > 0 && !needed {
                excess -= 1;
                false
            } else {
                true
            }
        })
        .collect();
    // Runs are filed one after another: a run's first row comes before its others.
    let mut described_of = None;
    for (at, cp) in kept.iter().enumerate().rev() {
        if !cp.namespace().is_empty() {
            continue;
        }
        if keep[at] {
            described_of = Some(cp.run());
        }
        if described_of == Some(cp.run()) && cp.described() {
            keep[at] = true;
        }
    }
    keep
}

/// Where one namespace of the newest run stands: its newest row, and its newest row that
/// finished a step (running or completed: not suspended, not failed, so a step of its own
/// may still be under way after it).
struct Newest<'a> {
    namespace: &'a str,
    newest: u64,
    settled: Option<u64>,
}

/// The rows of the thread's newest run kept whatever their age, besides interrupted ones
/// and its first (see [`kept_rows`]): its newest top-level row, and the newest row of each
/// subgraph whose parent's step is not over (written after the newest step its parent
/// finished): a resume or recover runs that step again and carries the subgraph on from
/// there. A subgraph of a step that is over (one of a loop's earlier turns) is never read
/// again, so the namespaces a run keeps do not grow with its steps.
fn needed<R: RetainedRow>(kept: &[R]) -> Vec<u64> {
    let Some(run) = kept.last().map(R::run) else {
        return Vec::new();
    };
    // From the end, one entry per namespace: a run has a handful in flight at a time.
    let mut namespaces: Vec<Newest<'_>> = Vec::new();
    for cp in kept.iter().rev().filter(|cp| cp.run() == run) {
        let settles = matches!(cp.status(), RunStatus::Running | RunStatus::Completed);
        match namespaces
            .iter_mut()
            .find(|n| n.namespace == cp.namespace())
        {
            Some(entry) => {
                if settles && entry.settled.is_none() {
                    entry.settled = Some(cp.id());
                }
            }
            None => namespaces.push(Newest {
                namespace: cp.namespace(),
                newest: cp.id(),
                settled: settles.then_some(cp.id()),
            }),
        }
    }
    let settled_of = |namespace: &str| {
        // The nearest ancestor with rows kept: its finished steps end its children's.
        let mut ancestor = namespace;
        loop {
            ancestor = ancestor.rsplit_once('/').map_or("", |(parent, _)| parent);
            if let Some(entry) = namespaces.iter().find(|n| n.namespace == ancestor) {
                return entry.settled;
            }
            if ancestor.is_empty() {
                return None;
            }
        }
    };
    namespaces
        .iter()
        .filter(|n| n.namespace.is_empty() || settled_of(n.namespace).is_none_or(|s| n.newest > s))
        .map(|n| n.newest)
        .collect()
}
