//! The rows a store keeps, as the runtime and the executor hand them over: checkpoints (with
//! the interrupts their bodies list, and how far their run got), journal keys, and signals.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::unserialized::Unserialized;
use super::{AuditEntry, StoreError};

/// How far a run got, as recorded in its newest checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunStatus {
    /// Supersteps remain to run (or the process running it crashed).
    Running,
    /// Suspended on one or more interrupts; waiting for `resume`.
    Interrupted,
    /// Reached `END`.
    Completed,
    /// Stopped by an error; the checkpoint holds the last good state.
    Failed,
    /// Stopped by [`Runtime::cancel`](crate::Runtime::cancel); the checkpoint holds the state
    /// it stopped at.
    Cancelled,
}

impl RunStatus {
    /// Every status.
    pub const ALL: [Self; 5] = [
        Self::Running,
        Self::Interrupted,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Reads a status written by [`as_str`](Self::as_str).
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == word)
    }

    /// A stored status, or [`StoreError::Corrupt`] naming `thread` (for the backends).
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn parse_stored(word: &str, thread: &str) -> Result<Self, StoreError> {
        Self::parse(word).ok_or_else(|| StoreError::Corrupt {
            thread: thread.to_owned(),
            message: format!("unknown run status {word:?}"),
        })
    }

    /// The status as stored: `running`, `interrupted`, `completed`, `failed`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Interrupted => "interrupted",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// A node that asked to suspend, and what it asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Interrupt {
    /// Identifies the interrupt within its thread: `node#index`, prefixed by the namespace
    /// inside subgraphs. A wait for a signal is `node#signal:name`, and
    /// `node#signal:name#k` for the node's wait for that name after `k` others.
    pub id: String,
    /// The node.
    pub node: String,
    /// Which of the node's `interrupt` calls this is, from 0.
    pub index: usize,
    /// What the node sent out (a question for a person, a pending tool call, …).
    pub payload: Value,
    /// Set when the node suspended to wait for this signal rather than for a resume value:
    /// sending the signal and calling `recover` carries the run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// Set when the node suspended on a timer (`ctx.sleep(..).or_suspend()`): the time it
    /// wakes, in milliseconds since the Unix epoch; `recover` after it carries the run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at_ms: Option<u64>,
}

impl Interrupt {
    /// Whether a resume value answers it: it is not a wait for a signal or a timer, which
    /// `recover` carries on once the signal came or the time is up.
    pub fn takes_value(&self) -> bool {
        self.signal.is_none() && self.wake_at_ms.is_none()
    }
}

/// Which of the pending `interrupts` a resume value that names none answers: the only one
/// that takes a value, else the only one pending (whose wait then refuses the value).
/// Otherwise `Err` with the ids to choose from: those that take a value, or all of them.
pub(crate) fn unnamed_answer(interrupts: &[Interrupt]) -> Result<usize, Vec<String>> {
    let mut takers = (0..interrupts.len()).filter(|&at| interrupts[at].takes_value());
    match (takers.next(), takers.next()) {
        (Some(at), None) => return Ok(at),
        (None, _) if interrupts.len() == 1 => return Ok(0),
        _ => {}
    }
    let ids = |takers: bool| {
        interrupts
            .iter()
            .filter(|i| !takers || i.takes_value())
            .map(|i| i.id.clone())
            .collect::<Vec<_>>()
    };
    let takers = ids(true);
    Err(if takers.is_empty() {
        ids(false)
    } else {
        takers
    })
}

/// One row per superstep of a run: where the run stands, and the executor's snapshot.
///
/// Storage keeps rows: it files a checkpoint by its columns (thread, run, namespace, step,
/// status) and never looks inside [`body`](Checkpoint::body).
///
/// # The body
///
/// The body is the graph executor's private snapshot, as JSON. Its format belongs to the
/// executor and may change, except for three top-level keys, which are a contract that
/// readers outside the executor (the runtime, tools, people listing checkpoints) rely on:
///
/// - `state`: the run's state after the step (for an interrupted run, the state the
///   suspended step began with);
/// - `next`: an array of the names of the nodes that run next (absent when none; for an
///   interrupted run, the step to run again);
/// - `interrupts`: an array of [`Interrupt`]s the run waits on (absent when none).
///
/// [`state`](Checkpoint::state), [`next`](Checkpoint::next) and
/// [`interrupts`](Checkpoint::interrupts) read them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// Assigned by the store on write; 0 until then.
    pub id: u64,
    /// The thread (session) the run belongs to.
    pub thread: String,
    /// The run's number within its thread, from 1.
    pub run: u64,
    /// Empty for the top-level graph; `parent:step/child:step` inside subgraphs.
    pub namespace: String,
    /// The superstep just finished (0 for the run's input).
    pub step: u64,
    /// Where the run stands.
    pub status: RunStatus,
    /// The executor's snapshot, opaque to storage; see [the body](Checkpoint#the-body).
    pub body: Value,
    /// An error message, for a failed run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Audit entries to append in the same transaction as the checkpoint (what the step it
    /// records did: interrupts, resumes, …). Not part of the row: reading a checkpoint back
    /// gives an empty list; [`Store::audit`](super::Store::audit) reads the entries.
    #[serde(skip)]
    pub audit: Vec<AuditEntry>,
    /// The body not built as a value yet (`body` is `null` meanwhile): the executor's
    /// snapshot, for a store that keeps checkpoints in memory, or its JSON text, for a store
    /// that writes text. Stores build the body before handing the checkpoint out.
    #[serde(skip)]
    pub(crate) unserialized: Option<Unserialized>,
    /// Records only that a run starts (its input): no node has run since the run's last
    /// write, so losing it to a power cut loses no work, and a store that syncs each commit
    /// need not sync this one on its own (the next synced commit takes it to the disk).
    #[serde(skip)]
    pub(crate) start_only: bool,
    /// What its interrupts say about the run, for a suspension written by an executor that
    /// had them typed; a store reads them from the body otherwise.
    #[serde(skip)]
    pub(crate) waits: Option<Box<super::runs::Waits>>,
}

impl Checkpoint {
    /// Whether it is a top-level checkpoint that ends its run for good: completed, or
    /// cancelled (nothing carries a cancelled run on; a failed one can be recovered). Its
    /// write deletes the thread's journal, which nothing reads again (the thread's next run,
    /// and a fork, journal under a number of their own), but for what the steps of its
    /// interrupted checkpoints journaled before they suspended: a fork of one replays it.
    pub(crate) fn ends_run(&self) -> bool {
        self.namespace.is_empty()
            && matches!(self.status, RunStatus::Completed | RunStatus::Cancelled)
    }

    /// A checkpoint row with this body and no error.
    pub fn new(
        thread: impl Into<String>,
        run: u64,
        namespace: impl Into<String>,
        step: u64,
        status: RunStatus,
        body: Value,
    ) -> Self {
        Self::row(
            thread.into(),
            run,
            namespace.into(),
            step,
            status,
            body,
            None,
        )
    }

    /// A row of these columns: built in place, with the body as written or kept as values.
    fn row(
        thread: String,
        run: u64,
        namespace: String,
        step: u64,
        status: RunStatus,
        body: Value,
        unserialized: Option<Unserialized>,
    ) -> Self {
        Self {
            id: 0,
            thread,
            run,
            namespace,
            step,
            status,
            body,
            error: None,
            audit: Vec::new(),
            unserialized,
            start_only: false,
            waits: None,
        }
    }

    /// A checkpoint row whose body is built when it is read (see [`Unserialized`]).
    pub(crate) fn unserialized(
        thread: impl Into<String>,
        run: u64,
        namespace: impl Into<String>,
        step: u64,
        status: RunStatus,
        source: std::sync::Arc<dyn super::unserialized::SnapshotSource>,
    ) -> Self {
        let (thread, namespace) = (thread.into(), namespace.into());
        let kept = Some(Unserialized(source));
        Self::row(thread, run, namespace, step, status, Value::Null, kept)
    }

    /// This checkpoint with its body built, as a store hands it out.
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] when the state does not serialize.
    pub(crate) fn serialized(mut self) -> Result<Self, StoreError> {
        if let Some(Unserialized(source)) = self.unserialized.take() {
            self.body = source.body().map_err(|e| StoreError::Corrupt {
                thread: self.thread.clone(),
                message: format!("state of checkpoint {}: {e}", self.id),
            })?;
        }
        Ok(self)
    }

    /// The body as JSON text, as a store writes it: the text the executor handed over, or
    /// the body serialized.
    ///
    /// # Errors
    ///
    /// [`StoreError::Refused`] when the state does not serialize.
    #[cfg(any(feature = "sqlite", feature = "postgres", test))]
    pub(crate) fn body_json(&self) -> Result<String, StoreError> {
        let text = match &self.unserialized {
            Some(Unserialized(source)) => source.body_json(),
            None => crate::json_depth::to_string(&self.body),
        };
        text.map_err(|e| StoreError::Refused {
            thread: self.thread.clone(),
            message: e.to_string(),
        })
    }

    /// The graph's fingerprint (`graph` in the body), built or not.
    pub(crate) fn fingerprint(&self) -> Option<&str> {
        match &self.unserialized {
            Some(Unserialized(source)) => Some(source.fingerprint()),
            None => self.body.get("graph").and_then(Value::as_str),
        }
    }

    /// The graph's name (`graph_name` in the body), built or not.
    pub(crate) fn graph_name(&self) -> Option<&str> {
        match &self.unserialized {
            Some(Unserialized(source)) => source.graph_name().map(|name| &**name),
            None => self.body.get("graph_name").and_then(Value::as_str),
        }
    }

    /// The run's state after the step: the body's `state` (`null` when it has none).
    pub fn state(&self) -> &Value {
        self.body.get("state").unwrap_or(&Value::Null)
    }

    /// The names of the nodes that run next: the body's `next` (empty when it has none).
    pub fn next(&self) -> Vec<&str> {
        self.body
            .get("next")
            .and_then(Value::as_array)
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }

    /// The interrupts the run waits on: the body's `interrupts` (empty when it has none).
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] when the body's `interrupts` is not an array of interrupts.
    pub fn interrupts(&self) -> Result<Vec<Interrupt>, StoreError> {
        let built;
        let body = match &self.unserialized {
            Some(Unserialized(source)) => {
                built = source.body().map_err(|e| StoreError::Corrupt {
                    thread: self.thread.clone(),
                    message: format!("body of checkpoint {}: {e}", self.id),
                })?;
                &built
            }
            None => &self.body,
        };
        match body.get("interrupts") {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(interrupts) => {
                Vec::<Interrupt>::deserialize(interrupts).map_err(|e| StoreError::Corrupt {
                    thread: self.thread.clone(),
                    message: format!("interrupts of checkpoint {}: {e}", self.id),
                })
            }
        }
    }
}

/// Where a journaled step's result is filed: one side effect of one node execution.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[non_exhaustive]
pub struct JournalKey {
    /// The thread.
    pub thread: String,
    /// The run within the thread.
    pub run: u64,
    /// The graph namespace.
    pub namespace: String,
    /// The superstep the node ran in.
    pub step: u64,
    /// The node.
    pub node: String,
    /// The step's name, as given to `ctx.step`.
    pub name: String,
    /// Which call with this name within the node execution, from 0.
    pub occurrence: u32,
}

impl JournalKey {
    /// Builds a key.
    pub fn new(
        thread: impl Into<String>,
        run: u64,
        namespace: impl Into<String>,
        step: u64,
        node: impl Into<String>,
        name: impl Into<String>,
        occurrence: u32,
    ) -> Self {
        Self {
            thread: thread.into(),
            run,
            namespace: namespace.into(),
            step,
            node: node.into(),
            name: name.into(),
            occurrence,
        }
    }
}

/// How long a store remembers a signal's idempotency key after the signal was consumed,
/// discarded or pruned: a send retried within this time is still a duplicate.
pub(crate) const CONSUMED_KEY_KEPT_MS: u64 = 3_600_000;

/// A signal kept by a durable store until it is consumed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoredSignal {
    /// Assigned by the store; increases with every signal stored.
    pub seq: u64,
    /// The session it was sent to.
    pub session: String,
    /// Its name.
    pub name: String,
    /// Its payload.
    pub payload: Value,
    /// The sender's idempotency key, if any.
    pub idempotency_key: Option<String>,
    /// When it was stored, in milliseconds since the Unix epoch.
    pub sent_at_ms: u64,
}

/// What [`Store::push_signal`](super::Store::push_signal) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignalPush {
    /// Stored under this sequence number.
    Stored(u64),
    /// A signal with the same (session, name, idempotency key) was already stored; nothing
    /// was written.
    Duplicate,
}

/// What [`Store::delete_thread`](super::Store::delete_thread) deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeletedThread {
    /// Its checkpoints, of every namespace.
    pub checkpoints: u64,
    /// Its journal entries.
    pub journal_entries: u64,
    /// The signals that were pending for its session.
    pub signals: u64,
}

impl DeletedThread {
    /// A count of each.
    pub fn new(checkpoints: u64, journal_entries: u64, signals: u64) -> Self {
        Self {
            checkpoints,
            journal_entries,
            signals,
        }
    }

    /// Whether nothing was there to delete (but, perhaps, a run's row).
    pub fn is_empty(&self) -> bool {
        self.checkpoints == 0 && self.journal_entries == 0 && self.signals == 0
    }
}
