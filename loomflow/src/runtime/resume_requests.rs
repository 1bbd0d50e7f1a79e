//! Resume requests: values for an interrupted run, sent from a process without the graph's
//! code (`Runtime::request_resume`), and taken out unapplied when what they answer is gone
//! or answered otherwise. The executor applies them (`graph::executor::resume_request`).

use serde::Serialize;
use serde_json::Value;

use super::mailbox::{Delivery, Entry, Scope, SignalOptions};
use super::store::{RunState, RunStatus};
use super::{Runtime, RuntimeError};

type Result<T, E = RuntimeError> = std::result::Result<T, E>;

use super::store::runs::RESUME_SIGNAL;

/// A resume request: the value, and the interrupt it answers (the only pending one when
/// `None`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ResumeRequest {
    pub(crate) interrupt: Option<String>,
    pub(crate) value: Value,
    /// The interrupted checkpoint the request was checked against when sent: the question
    /// it answers. A run standing at another (it asked again, or a later run asks) refuses
    /// it. `None` in requests stored before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checkpoint: Option<u64>,
}

impl Runtime {
    /// Asks for `thread`'s interrupted run to be resumed with `value`, from a process that
    /// does not have the graph's code (an operator's CLI, an HTTP handler): the request is
    /// stored, and the next execution of the run (a [`Worker`](crate::Worker), which
    /// carries interrupted runs on when a request arrives, or a `recover` in the program)
    /// resumes it as [`CompiledGraph::resume`](crate::CompiledGraph::resume) would.
    ///
    /// The execution that applies the request consumes it under the run's claim and
    /// journals it in the same write: should that execution stop before the resumed step is
    /// checkpointed (shut down, or its store failing), it lets the run go runnable at once
    /// (killed, its lease runs out), and the next one (a worker taking the run over) resumes
    /// with the same value. The
    /// requests queued when an execution starts are applied together, the newest for each
    /// interrupt; none is left over to answer a later question. A request answers the
    /// question it was sent for (the interrupted checkpoint it was checked against): one
    /// that reaches the run after it asked again, or a later run, is dropped unapplied. A
    /// resume given its value directly
    /// ([`CompiledGraph::resume`](crate::CompiledGraph::resume)) answers the question
    /// instead, and the requests queued for it are dropped unapplied; one refused (a value
    /// its node cannot use) answers nothing, and leaves them for the run's next execution.
    ///
    /// # Errors
    ///
    /// [`RuntimeError::UnknownRun`]; [`RuntimeError::NotInterrupted`] when the run does not
    /// wait for a resume value; [`RuntimeError::AmbiguousResume`] when several interrupts
    /// that take a value are pending (name one with
    /// [`request_resume_with`](Self::request_resume_with));
    /// [`SignalError::PayloadTooLarge`](crate::runtime::SignalError::PayloadTooLarge) when the
    /// value is over [`MailboxConfig::max_payload_bytes`](crate::runtime::MailboxConfig) as
    /// JSON (the request loomflow stores around it is not counted); the interrupt's
    /// [`RuntimeError::WaitsForSignal`] or [`RuntimeError::WaitsForTimer`] when the only one
    /// pending waits for a signal or a timer (a value naming no interrupt goes to the one
    /// that takes it, beside any such waits); a value that does not serialize; a store
    /// failure. A value
    /// the node cannot use (one that does not decode, or one its resumed step fails with) is
    /// refused when the request is applied: the request is spent, and the run stays
    /// interrupted, waiting for another.
    pub async fn request_resume(&self, thread: &str, value: impl Serialize) -> Result<Delivery> {
        self.send_resume(thread, None, value).await
    }

    /// [`request_resume`](Self::request_resume) for one of several pending interrupts, by
    /// id.
    ///
    /// # Errors
    ///
    /// As for [`request_resume`](Self::request_resume), and
    /// [`RuntimeError::UnknownInterrupt`] when `interrupt` is not pending,
    /// [`RuntimeError::WaitsForSignal`] or [`RuntimeError::WaitsForTimer`] when it waits for
    /// a signal or a timer rather than for a value.
    pub async fn request_resume_with(
        &self,
        thread: &str,
        interrupt: &str,
        value: impl Serialize,
    ) -> Result<Delivery> {
        self.send_resume(thread, Some(interrupt.to_owned()), value)
            .await
    }

    async fn send_resume(
        &self,
        thread: &str,
        interrupt: Option<String>,
        value: impl Serialize,
    ) -> Result<Delivery> {
        let record = self.run_row(thread).await?;
        let not_interrupted = |state| RuntimeError::NotInterrupted {
            thread: thread.to_owned(),
            state,
        };
        match record.state {
            RunState::Interrupted => {}
            // Suspended on waits only: the one named says what it waits for.
            RunState::Waiting | RunState::Sleeping if interrupt.is_some() => {
                self.check_resume_target(thread, interrupt.as_deref())
                    .await?;
                return Err(not_interrupted(record.state));
            }
            state => return Err(not_interrupted(state)),
        }
        let value = serde_json::to_value(value)
            .map_err(|e| RuntimeError::json(format!("resume value for thread {thread}"), e))?;
        // The value counts against the payload limit, not the request around it.
        self.mailbox().check_size(thread, RESUME_SIGNAL, &value)?;
        let checkpoint = self
            .check_resume_target(thread, interrupt.as_deref())
            .await?;
        let request = ResumeRequest {
            interrupt,
            value,
            checkpoint: Some(checkpoint),
        };
        let payload = serde_json::to_value(&request)
            .map_err(|e| RuntimeError::json(format!("resume request for thread {thread}"), e))?;
        self.send_framework(thread, RESUME_SIGNAL, payload, SignalOptions::default())
            .await
    }

    /// Takes the resume requests queued for `thread` out, unapplied, those other processes
    /// stored since this one last looked too, logging `why`. What they answered is gone or
    /// answered otherwise (a run cancelled, a run a fork replaces, a question a resume
    /// answered directly): none is left over to answer the run's next question.
    pub(crate) async fn drop_resume_requests(&self, thread: &str, why: &str) -> Result<()> {
        if !self.may_hold_resume_requests(thread) {
            return Ok(());
        }
        self.refresh_signals().await?;
        let scope = Scope::Framework;
        while let Some(entry) = self.receive_kept(thread, RESUME_SIGNAL, scope).await? {
            tracing::info!(%thread, "a resume request was dropped: {why}");
            if let Some(seq) = entry.seq {
                self.store().discard_signal(thread, seq).await?;
            }
        }
        Ok(())
    }

    /// Takes out, unapplied, the resume requests queued for `thread` that answer the
    /// question asked at checkpoint `answered` (and those that name no checkpoint, from an
    /// earlier loomflow), logging `why`; requests sent for another question stay queued,
    /// in their order.
    pub(crate) async fn drop_resume_requests_for(
        &self,
        thread: &str,
        answered: u64,
        why: &str,
    ) -> Result<()> {
        let answers_it = |checkpoint: Option<u64>| checkpoint.is_none_or(|id| id == answered);
        self.drop_resume_requests_where(thread, answers_it, why)
            .await
    }

    /// Takes out, unapplied, the resume requests queued for `thread` but those sent for the
    /// question asked at checkpoint `asked` (a fork's, written a moment ago: a request the
    /// fork's own question was checked against and taken for is no request for the run it
    /// replaced), logging `why`.
    pub(crate) async fn drop_resume_requests_but_for(
        &self,
        thread: &str,
        asked: u64,
        why: &str,
    ) -> Result<()> {
        if !self.may_hold_resume_requests(thread) {
            return Ok(());
        }
        let other = |checkpoint: Option<u64>| checkpoint != Some(asked);
        self.drop_resume_requests_where(thread, other, why).await
    }

    /// Takes out, unapplied, the resume requests queued for `thread` whose checkpoint (the
    /// question they were sent for; `None` from an earlier loomflow, or unreadable) `drops`
    /// picks, logging `why`; the others stay queued, in their order.
    async fn drop_resume_requests_where(
        &self,
        thread: &str,
        drops: impl Fn(Option<u64>) -> bool,
        why: &str,
    ) -> Result<()> {
        self.refresh_signals().await?;
        let scope = Scope::Framework;
        let mut kept = Vec::new();
        let dropped = async {
            while let Some(entry) = self.receive_kept(thread, RESUME_SIGNAL, scope).await? {
                // A request kept, read from the store again (the copy kept is given back
                // below): the store hands out its oldest first, so nothing stored behind it
                // is seen, and is left as it was.
                if entry.seq.is_some() && kept.iter().any(|k: &Entry| k.seq == entry.seq) {
                    break;
                }
                let request = <ResumeRequest as serde::Deserialize>::deserialize(&entry.payload);
                if !drops(request.ok().and_then(|r| r.checkpoint)) {
                    kept.push(entry);
                    continue;
                }
                tracing::info!(%thread, "a resume request was dropped: {why}");
                if let Some(seq) = entry.seq {
                    self.store().discard_signal(thread, seq).await?;
                }
            }
            Ok::<_, crate::runtime::RuntimeError>(())
        }
        .await;
        // Back at the head of the queue, in the order they came.
        for entry in kept.into_iter().rev() {
            self.give_back(thread, RESUME_SIGNAL, entry, scope);
        }
        dropped
    }

    /// Whether resume requests may be queued for `thread`: a durable store may keep some
    /// that other processes sent; the memory store has nothing but the mailbox, which most
    /// threads have none in.
    pub(crate) fn may_hold_resume_requests(&self, thread: &str) -> bool {
        self.store().is_durable() || self.mailbox().queued(thread, RESUME_SIGNAL) > 0
    }

    /// Refuses a resume request that could not apply: one naming an interrupt that is not
    /// pending or that waits for a signal or a timer, or naming none while several that take
    /// a value are pending. A request refused only when applied would spend the requests
    /// queued with it. Returns the interrupted checkpoint it was checked against.
    async fn check_resume_target(&self, thread: &str, interrupt: Option<&str>) -> Result<u64> {
        let (checkpoint, pending) = match self.store().latest_checkpoint(thread, "").await? {
            Some(cp) if cp.status == RunStatus::Interrupted => (cp.id, cp.interrupts()?),
            // The run moved on since its row was read: nothing to check the request against.
            _ => {
                return Err(RuntimeError::NotInterrupted {
                    thread: thread.to_owned(),
                    state: RunState::Running,
                });
            }
        };
        let target = match interrupt {
            Some(id) => pending.iter().find(|i| i.id == id).ok_or_else(|| {
                RuntimeError::UnknownInterrupt {
                    thread: thread.to_owned(),
                    id: id.to_owned(),
                    pending: pending.iter().map(|i| i.id.clone()).collect(),
                }
            })?,
            None => match super::store::unnamed_answer(&pending) {
                Ok(at) => &pending[at],
                Err(pending) => {
                    return Err(RuntimeError::AmbiguousResume {
                        thread: thread.to_owned(),
                        pending,
                    });
                }
            },
        };
        if let Some(signal) = &target.signal {
            return Err(RuntimeError::WaitsForSignal {
                thread: thread.to_owned(),
                id: target.id.clone(),
                signal: signal.clone(),
            });
        }
        match target.wake_at_ms {
            Some(wake_at_ms) => Err(RuntimeError::WaitsForTimer {
                thread: thread.to_owned(),
                id: target.id.clone(),
                wake_at_ms,
            }),
            None => Ok(checkpoint),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn request(value: u32, checkpoint: Option<u64>) -> Value {
        let request = ResumeRequest {
            interrupt: None,
            value: Value::from(value),
            checkpoint,
        };
        serde_json::to_value(request).unwrap()
    }

    /// Spending the requests a resume answered takes those for its question (and those
    /// that name none) and leaves those sent for another, in the order they came.
    #[tokio::test]
    async fn the_requests_for_another_question_stay_queued_in_order() {
        let runtime = Runtime::in_memory();
        let _open = runtime.mailbox().open_session("t");
        for (value, checkpoint) in [(1, Some(7)), (2, Some(9)), (3, None), (4, Some(9))] {
            let payload = request(value, checkpoint);
            let options = SignalOptions::default();
            runtime
                .send_framework("t", RESUME_SIGNAL, payload, options)
                .await
                .unwrap();
        }
        runtime
            .drop_resume_requests_for("t", 7, "answered")
            .await
            .unwrap();
        let mut left = Vec::new();
        while let Some(entry) = runtime
            .receive_now("t", RESUME_SIGNAL, Scope::Framework)
            .await
            .unwrap()
        {
            left.push(entry.payload);
        }
        assert_eq!(left, [request(2, Some(9)), request(4, Some(9))]);
    }
}
