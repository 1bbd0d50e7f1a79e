//! The audit log: append-only rows saying what happened to a run, who decided, and when.
//!
//! Entries ride in the same transaction as the write they describe, so that the log and the
//! run never disagree and auditing costs no commit of its own:
//! - a signal's `signal_sent` and `signal_received` entries are written by the store with
//!   the signal ([`Store::push_signal`](super::Store::push_signal), the `take_signal`
//!   methods);
//! - a tool call's entries (`tool_call`, and its `decision` when one was made) travel with
//!   the journal entry that records the call's result
//!   ([`Store::put_journal_claimed`](super::Store::put_journal_claimed));
//! - `interrupt` and `resume` entries, and anything else a step records, travel with the
//!   step's checkpoint ([`Checkpoint::audit`](super::Checkpoint::audit)).
//!
//! Nothing updates an entry; [`Store::prune_audit`](super::Store::prune_audit) deletes the
//! old ones for retention.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use serde_json::json;

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use super::StoreError;
use super::StoredSignal;

/// What an [`AuditEntry`] records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditKind {
    /// A tool ran (or was refused): its arguments, outcome and duration (the time its body
    /// ran, not the wait for its approval).
    ToolCall,
    /// A permission decision or an approval: who decided what, why, and any edited
    /// arguments.
    Decision,
    /// A signal was sent to the session: stored, or (its detail's `"dropped": true`)
    /// dropped as it arrived.
    SignalSent,
    /// A run consumed a signal.
    SignalReceived,
    /// A run suspended on an interrupt (a question, an approval, a wait, a timer), once
    /// for each time it stopped there, however deeply nested the subgraph that asked.
    Interrupt,
    /// A suspended run was carried on past an interrupt.
    Resume,
}

impl AuditKind {
    /// Every kind.
    pub const ALL: [Self; 6] = [
        Self::ToolCall,
        Self::Decision,
        Self::SignalSent,
        Self::SignalReceived,
        Self::Interrupt,
        Self::Resume,
    ];

    /// The kind as stored: `tool_call`, `decision`, `signal_sent`, …
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolCall => "tool_call",
            Self::Decision => "decision",
            Self::SignalSent => "signal_sent",
            Self::SignalReceived => "signal_received",
            Self::Interrupt => "interrupt",
            Self::Resume => "resume",
        }
    }

    /// Reads a stored kind.
    pub fn parse(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == word)
    }
}

impl std::fmt::Display for AuditKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of the audit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct AuditEntry {
    /// Assigned by the store; increases with every entry appended. 0 until then.
    pub id: u64,
    /// The thread (session) it concerns.
    pub thread: String,
    /// The run within the thread, when known (0 for a signal sent between runs).
    pub run: u64,
    /// When it happened, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// What it records.
    pub kind: AuditKind,
    /// What it is about: the tool, the signal's name, the interrupt's id.
    pub subject: String,
    /// Who acted, when known: the approver of a decision (`policy` for the permission
    /// policy, `hook` for a `before_tool` hook), the user a tool ran for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The particulars, as JSON: arguments, outcome and duration of a tool call; the
    /// decision, reason and edited arguments of an approval; a signal's payload; what an
    /// interrupt waits for (a signal's name, a wake time; `{}` for a value: its payload is
    /// in the suspended checkpoint, [`Runtime::run`](crate::Runtime::run) shows it); the
    /// values a resume gave.
    pub detail: Value,
    /// The detail in the form it was made in, `detail` being `null` meanwhile: what a run's
    /// `resume` entries carry to the memory store, which keeps it as it is. Any other store
    /// gets the detail as a value ([`Self::build_detail`]).
    #[serde(skip)]
    pub(crate) later: Option<LaterDetail>,
}

/// An audit entry's detail, kept as it was made until a store needs it as a value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum LaterDetail {
    /// Written as JSON text.
    Text(Box<str>),
    /// A `resume` entry's: the value given to an interrupt of a node. Boxed, for the memory
    /// store to keep as it comes.
    Given(Box<Given>),
}

/// A `resume` entry's detail for an interrupt answered with a value: `{"node", "value"}`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Given {
    pub(crate) node: Box<str>,
    pub(crate) value: Value,
}

impl Given {
    /// The detail as a value.
    pub(crate) fn to_value(&self) -> Value {
        let mut detail = serde_json::Map::new();
        detail.insert("node".to_owned(), Value::from(&*self.node));
        detail.insert("value".to_owned(), self.value.clone());
        Value::Object(detail)
    }
}

impl LaterDetail {
    /// The detail as a value.
    fn into_value(self) -> Value {
        match self {
            // Written from a value no deeper than `json_text::TEXT_DEPTH`.
            Self::Text(text) => {
                crate::json_depth::from_str(&text).unwrap_or_else(|_| Value::String(text.into()))
            }
            Self::Given(given) => given.to_value(),
        }
    }
}

impl AuditEntry {
    /// An entry of `kind` about `subject` on `thread`, happening now.
    pub fn new(
        thread: impl Into<String>,
        kind: AuditKind,
        subject: impl Into<String>,
        detail: Value,
    ) -> Self {
        Self::unstamped(thread, kind, subject, detail).at_ms(crate::runtime::clock::now_ms())
    }

    /// An entry whose detail is this JSON text (see [`Self::build_detail`]), at no time yet (see
    /// [`Self::unstamped`]).
    pub(crate) fn with_text(
        thread: impl Into<String>,
        kind: AuditKind,
        subject: impl Into<String>,
        text: Box<str>,
    ) -> Self {
        let mut entry = Self::unstamped(thread, kind, subject, Value::Null);
        entry.later = Some(LaterDetail::Text(text));
        entry
    }

    /// A `resume` entry about `subject`, an interrupt of `node` answered with `value`, at
    /// no time yet (see [`Self::unstamped`]).
    pub(crate) fn given(
        thread: impl Into<String>,
        subject: impl Into<String>,
        node: impl Into<Box<str>>,
        value: Value,
    ) -> Self {
        let mut entry = Self::unstamped(thread, AuditKind::Resume, subject, Value::Null);
        let given = Given {
            node: node.into(),
            value,
        };
        entry.later = Some(LaterDetail::Given(Box::new(given)));
        entry
    }

    /// An entry at no time yet (`at_ms` 0), for a run's: it happens when the write that
    /// carries it is made, unless the run says when (the clock is read once, for both).
    pub(crate) fn unstamped(
        thread: impl Into<String>,
        kind: AuditKind,
        subject: impl Into<String>,
        detail: Value,
    ) -> Self {
        Self {
            id: 0,
            thread: thread.into(),
            run: 0,
            at_ms: 0,
            kind,
            subject: subject.into(),
            actor: None,
            detail,
            later: None,
        }
    }

    /// Builds the detail as a value, if it was kept as it was made (see `later`).
    pub(crate) fn build_detail(&mut self) {
        if let Some(later) = self.later.take() {
            self.detail = later.into_value();
        }
    }

    /// With the run it belongs to.
    #[must_use]
    pub fn run(mut self, run: u64) -> Self {
        self.run = run;
        self
    }

    /// With who acted.
    #[must_use]
    pub fn actor(mut self, actor: Option<impl Into<String>>) -> Self {
        self.actor = actor.map(Into::into);
        self
    }

    /// At this time (milliseconds since the Unix epoch) instead of now.
    #[must_use]
    pub fn at_ms(mut self, at_ms: u64) -> Self {
        self.at_ms = at_ms;
        self
    }
}

/// Which audit entries to read ([`Store::audit`](super::Store::audit)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuditQuery {
    /// The thread; `None` for every thread.
    pub thread: Option<String>,
    /// Only entries with an id above this (for paging and tailing).
    pub after_id: u64,
    /// Only entries of this kind.
    pub kind: Option<AuditKind>,
    /// At most this many (oldest first); `None` for all.
    pub limit: Option<usize>,
}

impl AuditQuery {
    /// Every entry of one thread.
    pub fn thread(thread: impl Into<String>) -> Self {
        Self {
            thread: Some(thread.into()),
            ..Self::default()
        }
    }

    /// Every entry of every thread.
    pub fn all() -> Self {
        Self::default()
    }

    /// Only entries with an id above `id`: to page through the log, or to tail it.
    ///
    /// Ids never go back. On PostgreSQL an id is taken when an entry is written and becomes
    /// visible when its transaction commits, so two writers may commit out of id order: a
    /// tail that must see every entry re-reads the last few seconds' ids (entries are
    /// written in short single-statement transactions) rather than trust its cursor alone.
    #[must_use]
    pub fn after_id(mut self, id: u64) -> Self {
        self.after_id = id;
        self
    }

    /// Only entries of `kind`.
    #[must_use]
    pub fn kind(mut self, kind: AuditKind) -> Self {
        self.kind = Some(kind);
        self
    }

    /// At most `n` entries.
    #[must_use]
    pub fn limit(mut self, n: usize) -> Self {
        self.limit = Some(n);
        self
    }

    /// Whether `entry` is one it selects (ignoring the limit).
    pub fn matches(&self, entry: &AuditEntry) -> bool {
        self.selects(entry.id, &entry.thread, entry.kind)
    }

    /// [`matches`](Self::matches), for an entry of this id, thread and kind.
    pub(crate) fn selects(&self, id: u64, thread: &str, kind: AuditKind) -> bool {
        id > self.after_id
            && self.thread.as_deref().is_none_or(|t| t == thread)
            && self.kind.is_none_or(|k| k == kind)
    }
}

/// The `signal_sent` entry of a signal just stored.
pub(crate) fn signal_sent(signal: &StoredSignal) -> AuditEntry {
    let mut detail = json!({ "seq": signal.seq, "payload": signal.payload });
    if let Some(key) = &signal.idempotency_key {
        detail["idempotency_key"] = Value::from(key.as_str());
    }
    AuditEntry::new(&signal.session, AuditKind::SignalSent, &signal.name, detail)
        .at_ms(signal.sent_at_ms)
        .actor(sent_by(&signal.name, &signal.payload))
}

/// Who sent a signal, for its `signal_sent` entry's actor: the `by` of one of loomflow's own
/// (`loomflow:…`: an approval decision names who decided), so that a decision is on record
/// with its decider from the moment it is sent, before its run takes it.
pub(crate) fn sent_by(name: &str, payload: &Value) -> Option<String> {
    let by = payload.get("by")?.as_str()?;
    name.starts_with(crate::runtime::mailbox::RESERVED_PREFIX)
        .then(|| by.to_owned())
}

/// The `signal_received` entry of a signal a run (`run`, 0 outside one) consumed.
pub(crate) fn signal_received(session: &str, name: &str, seq: u64, run: u64) -> AuditEntry {
    AuditEntry::new(
        session,
        AuditKind::SignalReceived,
        name,
        json!({ "seq": seq }),
    )
    .run(run)
}

/// An audit entry, ready for its row.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) struct AuditRow {
    pub(crate) thread: String,
    pub(crate) run: i64,
    pub(crate) at_ms: i64,
    pub(crate) kind: &'static str,
    pub(crate) subject: String,
    pub(crate) actor: Option<String>,
    /// `None` for an empty detail (`{}`), which is stored as `NULL` to keep rows small.
    pub(crate) detail: Option<String>,
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
impl AuditRow {
    pub(crate) fn of(entry: &AuditEntry) -> Result<Self, StoreError> {
        // A detail the store does not keep (nested too deep), or a number past its columns',
        // would be refused again: not a failure in passing, tried again and again.
        let refused = |message: String| StoreError::Refused {
            thread: entry.thread.clone(),
            message,
        };
        let int = |value: u64, what: &str| {
            i64::try_from(value).map_err(|_| refused(format!("audit {what} {value} is too large")))
        };
        Ok(Self {
            run: int(entry.run, "run")?,
            at_ms: int(entry.at_ms, "time")?,
            kind: entry.kind.as_str(),
            subject: entry.subject.clone(),
            actor: entry.actor.clone(),
            detail: match &entry.detail {
                Value::Null if entry.later.is_some() => match &entry.later {
                    Some(LaterDetail::Given(given)) => Some(
                        crate::json_depth::to_string(&given.to_value())
                            .map_err(|e| refused(e.to_string()))?,
                    ),
                    Some(LaterDetail::Text(text)) => Some(text.to_string()),
                    None => None,
                },
                Value::Null => None,
                Value::Object(fields) if fields.is_empty() => None,
                detail => {
                    Some(crate::json_depth::to_string(detail).map_err(|e| refused(e.to_string()))?)
                }
            },
            thread: entry.thread.clone(),
        })
    }

    pub(crate) fn all(entries: &[AuditEntry]) -> Result<Vec<Self>, StoreError> {
        entries.iter().map(Self::of).collect()
    }

    /// A `signal_received` row, for a signal consumed in a write.
    #[cfg(feature = "sqlite")]
    pub(crate) fn signal_received(
        session: &str,
        name: String,
        seq: i64,
        run: i64,
        now_ms: i64,
    ) -> Self {
        Self {
            thread: session.to_owned(),
            run,
            at_ms: now_ms,
            kind: AuditKind::SignalReceived.as_str(),
            subject: name,
            actor: None,
            detail: Some(format!("{{\"seq\":{seq}}}")),
        }
    }

    /// A `signal_sent` row: the signal's payload, as stored, under its new sequence number.
    #[cfg(feature = "sqlite")]
    pub(crate) fn signal_sent(
        session: &str,
        name: &str,
        seq: i64,
        payload: &str,
        idempotency_key: Option<&str>,
        sent_at_ms: i64,
    ) -> Self {
        let after_seq = Self::signal_sent_after_seq(payload, idempotency_key);
        Self {
            thread: session.to_owned(),
            run: 0,
            at_ms: sent_at_ms,
            kind: AuditKind::SignalSent.as_str(),
            subject: name.to_owned(),
            actor: None,
            detail: Some(format!("{{\"seq\":{seq}{after_seq}")),
        }
    }

    /// The detail of a `signal_sent` row after its sequence number, for a store that
    /// numbers the signal in the statement that writes the row: `{"seq":` comes before.
    pub(crate) fn signal_sent_after_seq(payload: &str, idempotency_key: Option<&str>) -> String {
        let key = idempotency_key.map_or_else(String::new, |key| {
            format!(",\"idempotency_key\":{}", serde_json::Value::from(key))
        });
        format!(",\"payload\":{payload}{key}}}")
    }
}

#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    /// A row written from an entry whose detail was kept as it was made holds the same
    /// text as one written from the detail built as a value.
    #[test]
    fn a_row_holds_the_detail_an_entry_was_made_with() {
        let given = AuditEntry::given("t", "ask#0", "ask", json!("v1"));
        let text = AuditEntry::with_text("t", AuditKind::Resume, "ask#0", r#"{"a":1}"#.into());
        for (entry, detail) in [
            (given, r#"{"node":"ask","value":"v1"}"#),
            (text, r#"{"a":1}"#),
        ] {
            assert_eq!(
                AuditRow::of(&entry).unwrap().detail.as_deref(),
                Some(detail)
            );
            let mut built = entry.clone();
            built.build_detail();
            assert_eq!(
                AuditRow::of(&built).unwrap().detail.as_deref(),
                Some(detail)
            );
        }
    }
}
