//! Run rows: what the store keeps about each thread's current run, so that runs can be
//! listed, claimed by a worker and cancelled without user code.
//!
//! A row is written three ways: by [`Store::submit_run`](super::Store::submit_run) (a queued
//! run), by every top-level checkpoint written under a claim (the row follows the
//! checkpoint, see [`RowUpdate::of`]), and by
//! [`Store::finish_run`](super::Store::finish_run) (a run that failed, or was cancelled
//! before it ran).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Checkpoint, Interrupt, RunStatus, Store, StoreError};

/// The framework signal that carries a resume requested without the graph's code; an
/// interrupted run waits for it.
pub(crate) const RESUME_SIGNAL: &str = "loomflow:resume";

/// Where a run stands, as its row says: richer than a checkpoint's [`RunStatus`], because it
/// also says what a suspended run waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunState {
    /// Submitted; no worker has started it yet.
    Queued,
    /// Executing, or its process died while executing (its lease then runs out).
    Running,
    /// Suspended until one of its signals arrives (or its deadline, or a timer beside it, is
    /// due). A tool call suspended for an approval is here: it waits for its decision's
    /// signal.
    Waiting,
    /// Suspended until a time.
    Sleeping,
    /// Suspended on interrupts that need a resume value (`Context::interrupt`'s answer).
    Interrupted,
    /// Reached `END`.
    Completed,
    /// Stopped by an error.
    Failed,
    /// Stopped by [`Runtime::cancel`](crate::Runtime::cancel).
    Cancelled,
}

impl RunState {
    /// Every state, in the order a run goes through them.
    pub const ALL: [Self; 8] = [
        Self::Queued,
        Self::Running,
        Self::Waiting,
        Self::Sleeping,
        Self::Interrupted,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// The state as stored and shown: `queued`, `running`, `waiting`, `sleeping`,
    /// `interrupted`, `completed`, `failed`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Sleeping => "sleeping",
            Self::Interrupted => "interrupted",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    /// Reads a state written by [`as_str`](Self::as_str).
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == word)
    }

    /// Where a run suspended on `interrupts` stands: interrupted when one of them waits for
    /// a resume value (or none is known), sleeping when every one is a timer, waiting
    /// otherwise (signal waits, some with a deadline, or beside timers): a resume request
    /// would carry no such run on.
    pub fn of_interrupts(interrupts: &[Interrupt]) -> Self {
        let for_a_value = |i: &Interrupt| i.signal.is_none() && i.wake_at_ms.is_none();
        if interrupts.is_empty() || interrupts.iter().any(for_a_value) {
            Self::Interrupted
        } else if interrupts.iter().all(|i| i.signal.is_none()) {
            Self::Sleeping
        } else {
            Self::Waiting
        }
    }

    /// Whether the run is over: completed, failed or cancelled.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

impl std::fmt::Display for RunState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A thread's current run, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RunRecord {
    /// The thread.
    pub thread: String,
    /// The run's number within its thread (0 until its first checkpoint).
    pub run: u64,
    /// The graph's name, once known (given on submit, or written with the first
    /// checkpoint).
    pub graph: Option<String>,
    /// The graph's structural fingerprint, once the run has a checkpoint.
    pub fingerprint: Option<String>,
    /// Where it stands.
    pub state: RunState,
    /// For a waiting run, the signals it waits for.
    pub waiting_on: Vec<String>,
    /// When a worker should carry it on even with nothing received: a timer, or a wait's
    /// deadline (milliseconds since the Unix epoch).
    pub wake_at_ms: Option<u64>,
    /// The execution holding its lease, if any.
    pub lease_owner: Option<String>,
    /// Until when that lease lasts unless renewed (ms since the Unix epoch; 0 when none).
    pub lease_until_ms: u64,
    /// Executions that took the run up: its first, each one that carried it on (after a
    /// timer, a signal, a resume) and each that took it over from one that died; see
    /// [`lapses`](Self::lapses) for the takeovers alone.
    pub attempts: u64,
    /// Executions in a row whose lease ran out while they held the run (their process died,
    /// or stopped renewing), counted as the next takes it over; 0 again once an execution
    /// writes a step or a journal entry, or lets the run go. A worker fails a run that
    /// reaches its [`max_lapses`](crate::worker::WorkerBuilder::max_lapses) rather than run
    /// it again. Read as 0 from JSON written before it was recorded.
    #[serde(default)]
    pub lapses: u64,
    /// Someone asked for the run to stop; the execution holding it stops at its next step.
    pub cancel_requested: bool,
    /// Why a failed run failed.
    pub error: Option<String>,
    /// When the row was made (ms since the Unix epoch).
    pub created_at_ms: u64,
    /// When it last changed.
    pub updated_at_ms: u64,
}

/// Which runs [`Store::list_runs`](super::Store::list_runs) returns; everything by default,
/// most recently updated first (then by thread, bytewise).
///
/// # Examples
///
/// ```
/// use loomflow::runtime::{RunFilter, RunState};
///
/// let stuck = RunFilter::new()
///     .state(RunState::Waiting)
///     .graph("refund")
///     .updated_before_ms(1_700_000_000_000)
///     .limit(50);
/// assert_eq!(stuck.limit, Some(50));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunFilter {
    /// Only runs in this state.
    pub state: Option<RunState>,
    /// Only runs of this graph.
    pub graph: Option<String>,
    /// Only runs not updated since this time (ms since the Unix epoch): the stale ones.
    pub updated_before_ms: Option<u64>,
    /// At most this many.
    pub limit: Option<usize>,
    /// Only runs listed after this one: the next page (see [`RunCursor`]).
    pub after: Option<RunCursor>,
}

impl RunFilter {
    /// Every run.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only runs in `state`.
    #[must_use]
    pub fn state(mut self, state: RunState) -> Self {
        self.state = Some(state);
        self
    }

    /// Only runs of the graph named `graph`.
    #[must_use]
    pub fn graph(mut self, graph: impl Into<String>) -> Self {
        self.graph = Some(graph.into());
        self
    }

    /// Only runs last updated before `ms` (milliseconds since the Unix epoch).
    #[must_use]
    pub fn updated_before_ms(mut self, ms: u64) -> Self {
        self.updated_before_ms = Some(ms);
        self
    }

    /// At most `limit` runs.
    #[must_use]
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }

    /// Only runs listed after `cursor`'s: the page after the one `cursor` ends.
    #[must_use]
    pub fn after(mut self, cursor: RunCursor) -> Self {
        self.after = Some(cursor);
        self
    }

    /// Whether `record` passes the filter (limit aside).
    pub fn matches(&self, record: &RunRecord) -> bool {
        self.after.as_ref().is_none_or(|c| c.precedes(record))
            && self.state.is_none_or(|s| s == record.state)
            && self
                .graph
                .as_deref()
                .is_none_or(|g| record.graph.as_deref() == Some(g))
            && self
                .updated_before_ms
                .is_none_or(|t| record.updated_at_ms < t)
    }
}

/// Where a page of runs ends, for the next page to start after it: the last run's
/// [`updated_at_ms`](RunRecord::updated_at_ms) and thread, which order the listing.
///
/// Its text form is `<updated_at_ms>:<thread>`; `GET /v1/runs` answers `next` in a form a
/// URL carries as it is (the thread in hex), and takes either as `after`. A run updated between two pages moves to the front of the listing: a page does
/// not show it again, and the pages after it do not show it at all.
///
/// # Examples
///
/// ```
/// use loomflow::runtime::{RunCursor, RunFilter};
///
/// let cursor: RunCursor = "1767225600000:ord:7".parse().unwrap();
/// assert_eq!((cursor.updated_at_ms, cursor.thread.as_str()), (1_767_225_600_000, "ord:7"));
/// assert_eq!(cursor.to_string(), "1767225600000:ord:7");
/// // Or as text a URL or a shell carries as it is, the thread in hex:
/// assert_eq!(cursor.encoded(), "1767225600000.6f72643a37");
/// assert_eq!("1767225600000.6f72643a37".parse::<RunCursor>().unwrap(), cursor);
/// let next_page = RunFilter::new().after(cursor).limit(100);
/// assert!(next_page.after.is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunCursor {
    /// The last listed run's last update (ms since the Unix epoch).
    pub updated_at_ms: u64,
    /// Its thread.
    pub thread: String,
}

impl RunCursor {
    /// The cursor as text of characters a URL or a shell carries as they are,
    /// `<updated_at_ms>.<thread as hex>`, whatever the thread holds (quotes, spaces,
    /// control characters); [`parse`](str::parse) reads it back, as it reads
    /// `<updated_at_ms>:<thread>`.
    pub fn encoded(&self) -> String {
        use std::fmt::Write as _;
        let mut text = format!("{}.", self.updated_at_ms);
        for byte in self.thread.bytes() {
            let _ = write!(text, "{byte:02x}");
        }
        text
    }

    /// The cursor after `record`.
    pub fn of(record: &RunRecord) -> Self {
        Self {
            updated_at_ms: record.updated_at_ms,
            thread: record.thread.clone(),
        }
    }

    /// Whether `record` comes after the cursor in the listing's order.
    fn precedes(&self, record: &RunRecord) -> bool {
        record.updated_at_ms < self.updated_at_ms
            || (record.updated_at_ms == self.updated_at_ms
                && record.thread.as_bytes() > self.thread.as_bytes())
    }
}

impl std::fmt::Display for RunCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.updated_at_ms, self.thread)
    }
}

/// A text that is not a [`RunCursor`]'s `<updated_at_ms>:<thread>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run cursor {text:?} is not <updated_at_ms>:<thread> nor <updated_at_ms>.<thread as hex>")]
pub struct BadRunCursor {
    /// The text given.
    pub text: String,
}

impl std::str::FromStr for RunCursor {
    type Err = BadRunCursor;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = || BadRunCursor {
            text: text.to_owned(),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if let Some((ms, thread)) = text.split_once(':') {
            let updated_at_ms = ms.parse().ok().filter(|_| digits(ms)).ok_or_else(bad)?;
            return Ok(Self {
                updated_at_ms,
                thread: thread.to_owned(),
            });
        }
        // `encoded`: `<updated_at_ms>.<thread as hex>`.
        let (ms, hex) = text.split_once('.').ok_or_else(bad)?;
        let updated_at_ms = ms.parse().ok().filter(|_| digits(ms)).ok_or_else(bad)?;
        if hex.len() % 2 != 0 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let bytes = (hex.as_bytes().chunks(2))
            .map(|pair| {
                std::str::from_utf8(pair)
                    .ok()
                    .and_then(|p| u8::from_str_radix(p, 16).ok())
            })
            .collect::<Option<Vec<u8>>>();
        let thread = (bytes.and_then(|b| String::from_utf8(b).ok())).ok_or_else(bad)?;
        Ok(Self {
            updated_at_ms,
            thread,
        })
    }
}

/// A run a worker claimed, with the input it was submitted with when it has not started.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ClaimedRun {
    /// The run's row as it was claimed (the lease is the caller's).
    pub record: RunRecord,
    /// For a queued run, its input.
    pub input: Option<Value>,
}

/// What [`Store::submit_run`](super::Store::submit_run) did.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Submitted {
    /// The run is queued.
    Queued,
    /// The thread's current run has not finished; nothing was written.
    Active(Box<RunRecord>),
}

/// What a top-level checkpoint says about its run's row. Derived here once, so that every
/// backend files runs alike.
#[derive(Debug, Clone, PartialEq)]
pub struct RowUpdate {
    /// The run's state.
    pub state: RunState,
    /// The signals it waits for.
    pub waiting_on: Vec<String>,
    /// When a worker should wake it.
    pub wake_at_ms: Option<u64>,
    /// The graph's name, when the checkpoint's body says it (`graph_name`).
    pub graph: Option<String>,
    /// The graph's fingerprint (`graph` in the body).
    pub fingerprint: Option<String>,
    /// A failed run's error.
    pub error: Option<String>,
}

/// What a suspended run's interrupts say about its row: its state, when it wakes, and the
/// signals it waits for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Waits {
    pub(crate) state: RunState,
    pub(crate) wake_at_ms: Option<u64>,
    /// The signals its interrupts wait for, sorted, without [`RESUME_SIGNAL`]: most
    /// suspensions wait for none, and keep no list.
    pub(crate) signals: Vec<String>,
}

impl Waits {
    /// A suspended run is waiting when every interrupt is a signal wait (its deadlines, if
    /// any, wake it), sleeping when every interrupt is a timer, and interrupted otherwise
    /// (still woken at the earliest timer or deadline among its interrupts, if any).
    pub(crate) fn of(interrupts: &[Interrupt]) -> Self {
        let mut signals: Vec<String> = interrupts.iter().filter_map(|i| i.signal.clone()).collect();
        if signals.len() > 1 {
            signals.sort();
            signals.dedup();
        }
        Self {
            state: RunState::of_interrupts(interrupts),
            wake_at_ms: interrupts.iter().filter_map(|i| i.wake_at_ms).min(),
            signals,
        }
    }

    /// Whether a resume request (which comes as [`RESUME_SIGNAL`]) carries the run on: it is
    /// interrupted for a value.
    pub(crate) fn resumable(&self) -> bool {
        self.state == RunState::Interrupted
    }

    /// The signals the run waits for, as a row lists them: with [`RESUME_SIGNAL`] when a
    /// resume request carries it on.
    pub(crate) fn waiting_on(self) -> Vec<String> {
        let resumable = self.resumable();
        waiting_on(self.signals, resumable)
    }
}

/// `signals` (sorted), with [`RESUME_SIGNAL`] in its place when `resumable`.
pub(crate) fn waiting_on(mut signals: Vec<String>, resumable: bool) -> Vec<String> {
    if resumable {
        // A resume requested without the graph's code comes as this signal.
        let at = signals.partition_point(|s| s.as_str() < RESUME_SIGNAL);
        if signals.get(at).is_none_or(|s| s != RESUME_SIGNAL) {
            signals.insert(at, RESUME_SIGNAL.to_owned());
        }
    }
    signals
}

impl RowUpdate {
    /// The row of the run whose newest checkpoint is `checkpoint`; a suspended run's is
    /// what its interrupts say (see `Waits::of`).
    pub fn of(checkpoint: &Checkpoint) -> Self {
        Self {
            graph: checkpoint.graph_name().map(str::to_owned),
            fingerprint: checkpoint.fingerprint().map(str::to_owned),
            error: checkpoint.error.clone(),
            ..Self::state_of(checkpoint)
        }
    }

    /// The row's state, waits and wake time only: the graph's name, its fingerprint and
    /// the error are left `None`, for a store that takes them from `checkpoint` itself.
    pub(crate) fn state_of(checkpoint: &Checkpoint) -> Self {
        Self::state_with(checkpoint, checkpoint.waits.as_deref().cloned())
    }

    /// [`state_of`](Self::state_of), given the waits the executor worked out for
    /// `checkpoint` (taken from it by a store that keeps no copy), if any.
    pub(crate) fn state_with(checkpoint: &Checkpoint, waits: Option<Waits>) -> Self {
        let mut update = Self {
            state: RunState::Running,
            waiting_on: Vec::new(),
            wake_at_ms: None,
            graph: None,
            fingerprint: None,
            error: None,
        };
        update.state = match checkpoint.status {
            RunStatus::Running => RunState::Running,
            RunStatus::Completed => RunState::Completed,
            RunStatus::Failed => RunState::Failed,
            RunStatus::Cancelled => RunState::Cancelled,
            RunStatus::Interrupted => {
                // An unreadable list of interrupts is left for a person: `interrupted`.
                let waits = waits
                    .unwrap_or_else(|| Waits::of(&checkpoint.interrupts().unwrap_or_default()));
                update.wake_at_ms = waits.wake_at_ms;
                let state = waits.state;
                update.waiting_on = waits.waiting_on();
                state
            }
        };
        update
    }

    /// When the row becomes runnable by a worker without a signal: at once for a running
    /// run (once nobody holds its lease), at its wake time for a suspended one, never for a
    /// finished one.
    pub fn runnable_at_ms(&self) -> Option<u64> {
        match self.state {
            RunState::Queued | RunState::Running => Some(0),
            RunState::Waiting | RunState::Sleeping | RunState::Interrupted => self.wake_at_ms,
            RunState::Completed | RunState::Failed | RunState::Cancelled => None,
        }
    }
}

/// Those of `threads` whose current run asks to stop, read row by row: what
/// [`Store::cancels_requested`] does for a store that does not select them in one query.
pub(super) async fn cancels_one_by_one<S: Store + ?Sized>(
    store: &S,
    threads: &[Arc<str>],
) -> Result<Vec<Arc<str>>, StoreError> {
    let mut asked = Vec::new();
    for thread in threads {
        if (store.get_run(thread).await?).is_some_and(|run| run.cancel_requested) {
            asked.push(Arc::clone(thread));
        }
    }
    Ok(asked)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A record written as JSON before lapses were counted (an older server's API, say)
    /// reads back with none.
    #[test]
    fn a_record_without_lapses_reads_with_none() {
        let record = serde_json::json!({
            "thread": "t", "run": 1, "graph": "g", "fingerprint": null, "state": "running",
            "waiting_on": [], "wake_at_ms": null, "lease_owner": null, "lease_until_ms": 0,
            "attempts": 2, "cancel_requested": false, "error": null,
            "created_at_ms": 1, "updated_at_ms": 2
        });
        let record: RunRecord = serde_json::from_value(record).unwrap();
        assert_eq!((record.attempts, record.lapses), (2, 0));
    }

    /// The encoded cursor reads back as it was written, whatever the thread holds; a text
    /// that is neither form is refused, naming it.
    #[test]
    fn an_encoded_cursor_reads_back_and_a_bad_one_is_refused() {
        for thread in ["", "t", "user+7&x=#é", "ord:7", "it's\u{1b}\n"] {
            let cursor = RunCursor {
                updated_at_ms: 17,
                thread: thread.to_owned(),
            };
            let text = cursor.encoded();
            assert!(
                text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.'),
                "{text}"
            );
            assert_eq!(text.parse::<RunCursor>().unwrap(), cursor, "{text}");
        }
        let plain: RunCursor = "17:ord:7".parse().unwrap();
        assert_eq!((plain.updated_at_ms, plain.thread.as_str()), (17, "ord:7"));
        for bad in [
            "17.7",
            "17.+f",
            "17.zz",
            ".74",
            "x.74",
            "17.ff",
            "yesterday",
        ] {
            let error = bad.parse::<RunCursor>().unwrap_err();
            assert_eq!(error.text, bad);
        }
    }
}
