//! [`Context::step`]: a side effect journaled once per node execution, and the journal keys
//! the node's calls are filed under.

use std::future::Future;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Context;
use crate::graph::{BoxError, RunError};
use crate::runtime::{JournalKey, StoreError};

type Result<T, E = RunError> = std::result::Result<T, E>;

impl Context {
    /// Runs a side effect once per node execution and journals its result.
    ///
    /// The result is filed under (run, superstep, node, `name`, occurrence of `name` within
    /// this execution). When the node runs again for the same superstep (after a resume, or
    /// when recovering from a crash) the recorded value is returned and `f` is not called.
    /// A failing `f` records nothing, so a retry calls it again; the retry takes the failed
    /// call's occurrence, so that a loop that retries until a call succeeds records its one
    /// success under the number the node's next run looks up first. Calls of one name are
    /// told apart by their order alone, so a loop over different items that carries on past
    /// a failed call must name each call after its item (`format!("email:{}", user.id)`):
    /// under one name, the item after a failure takes the failed item's number, and a later
    /// run of the node hands that item's result to the failed one.
    ///
    /// The node's answers are part of its input: calls made after its
    /// [`interrupt`](Self::interrupt) calls returned values are filed apart for each set of
    /// answers. The same answer given again replays them; another answer to a question that
    /// a failed resumed step left open makes them afresh.
    ///
    /// `f` may call [`interrupt`](Self::interrupt) itself (ask, then act on the answer): its
    /// questions are numbered among the node's, and a replayed step counts them as asked, so
    /// that the node's later questions take their own answers. Its answers are part of the
    /// step's result: once the step is journaled, another answer to one of them does not
    /// make it again. A try that fails keeps its questions asked (a retry asks the next). A
    /// question asked beside a step (a `join` of the step and an `interrupt` outside it) may
    /// take another number when the step is replayed: ask before the step or after it.
    ///
    /// "Once" holds across processes: the run executes under a claim that at most one
    /// execution holds at a time, `f` is called only while this one holds it, and its result
    /// is journaled under the claim. If the claim was lost meanwhile (this process stalled
    /// past its lease and another took the run over), the result is not recorded and the
    /// step returns that error instead of the value.
    ///
    /// Should the journal write fail because the store did (a dropped connection, a full
    /// disk), the error the node returns with `?` does not fail the run: the run stops where
    /// the step started and is let go, as after a crash, for a worker or a `resume` to carry
    /// on. `f` may then be called again, unless its result reached the journal after all.
    /// (A write that failed in passing is looked up first: found, it did reach the journal,
    /// and the step returns its value.) A node that retries the step itself meets the same:
    /// the failed write gives its number back, so that the retry replays a value that
    /// reached the journal, and calls `f` again only if none did.
    /// So does a store failure `f` returns as the store's or the run's error (a step of its
    /// own whose write failed). The node may wrap the error in one of its own (`anyhow`, an
    /// enum of its own): the context noted the store's failure, and the run is let go all
    /// the same.
    /// A write the store refuses for what it holds
    /// ([`StoreError::Refused`]) fails the node.
    ///
    /// # Errors
    ///
    /// [`RunError::StepFailed`] with `f`'s error (any error type, or a `String`); a store
    /// failure, including [`StoreError::LeaseLost`]
    /// when the run's claim was lost; a recorded value that no longer deserializes into `T`.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[node]
    /// async fn pay(state: &mut Vec<String>, ctx: &Context) -> loomflow::Result<()> {
    ///     let id: String = ctx.step("charge", || async { Ok::<_, String>("ch_42".to_owned()) }).await?;
    ///     state.push(id);
    ///     Ok(())
    /// }
    /// # let _ = pay;
    /// ```
    pub async fn step<T, E, F, Fut>(&self, name: &str, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: Into<BoxError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        self.noted(self.journaled_step(name, f).await)
    }

    /// [`step`](Self::step), without noting a store failure.
    async fn journaled_step<T, E, F, Fut>(&self, name: &str, f: F) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: Into<BoxError>,
        F: FnOnce() -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let key = self.journal_key(name);
        let store = self.run.runtime.store();
        let recorded = match store.as_memory() {
            Some(memory) => memory.get_journal_now(&key)?,
            None => store.get_journal(&key).await?,
        };
        let asked_before = self.control().interrupts_called;
        if let Some(recorded) = recorded {
            // Questions its work asked, answered when it ran: only a node with answers left
            // to take can have any.
            if self.resume.len() > asked_before {
                self.count_replayed_questions(&key).await?;
            }
            return serde_json::from_value(recorded).map_err(|e| {
                RunError::json(format!("journaled step {name} of node {}", self.node), e)
            });
        }
        // Not acting on the world for a run that is no longer ours.
        self.run.claim.ensure_held().await?;
        // The questions its work asks: counted as it is polled, so that a step run beside
        // another in the node (`join`) counts its own only, and one around a step of its own
        // counts the inner one's too.
        // Changes, not counts: a step inside whose write failed takes its questions back.
        let called = || self.control().interrupts_called as i64;
        let before_work = called();
        let mut work = std::pin::pin!(f());
        // And those the closure asked before it made its future.
        let mut changed = called() - before_work;
        let done = std::future::poll_fn(|cx| {
            let before = called();
            let polled = work.as_mut().poll(cx);
            changed += called() - before;
            polled
        })
        .await;
        let asked = usize::try_from(changed).unwrap_or(0);
        let value = match done {
            Ok(value) => value,
            // The step's work suspended the node (an approval inside a tool call): that is
            // the node's suspension, not a failed step.
            Err(_) if !self.control().suspension.is_empty() => {
                return Err(RunError::Suspended {
                    node: String::from(&*self.node),
                });
            }
            Err(source) => {
                // Nothing was journaled under this call's number: the next call of the name
                // (a retry) takes it, as the same call will when the node runs again and
                // finds this one's failure unrecorded. The questions it asked stay asked: a
                // retry asks the next, and is filed under their answers (another key).
                self.give_back(name, &key);
                // The store failing in passing under the step's work (a step journaled
                // inside it): the run is let go, as when this step's own write fails.
                return Err(match in_passing(source.into()) {
                    Ok(failure) => RunError::Store(failure),
                    Err(source) => RunError::StepFailed {
                        node: String::from(&*self.node),
                        name: name.to_owned(),
                        source,
                    },
                });
            }
        };
        let json = match serde_json::to_value(&value) {
            Ok(json) => json,
            Err(e) => {
                self.give_back(name, &key);
                let what = format!("result of step {name} of node {}", self.node);
                return Err(RunError::json(what, e));
            }
        };
        if asked > 0 {
            // Before the value: a step found journaled always finds its count.
            let count = serde_json::Value::from(asked);
            let counted =
                self.run
                    .claim
                    .put_journal_audited(questions_key(&key), count, Vec::new());
            if let Err(failed) = counted.await {
                self.unask(asked);
                self.give_back(name, &key);
                return Err(failed.into());
            }
        }
        let audit = self.run.take_audit_but_resumes();
        let occurrence = key.occurrence;
        // Kept to look the write up should it fail in passing: a durable store's connection
        // may break after the commit (the memory store's writes do not fail so).
        let kept = store.as_memory().is_none().then(|| key.clone());
        let Err(failed) = self.run.claim.put_journal_audited(key, json, audit).await else {
            return Ok(value);
        };
        if matches!(failed, StoreError::LeaseLost { .. }) {
            // Another execution holds the run: what is journaled under the number is its.
            return Err(failed.into());
        }
        let reached = match kept {
            Some(key) if failed.is_passing() => store.get_journal(&key).await,
            _ => Ok(None),
        };
        if let Ok(Some(found)) = reached {
            // The write reached the journal after all: the step is done, if the run is still
            // this execution's (else another that took it over may have written its own) and
            // what is there is this value (a `Serialize` that writes differently each time:
            // the number goes back, for a retry to replay what is there).
            match self.run.claim.ensure_held().await {
                Err(lost @ StoreError::LeaseLost { .. }) => return Err(lost.into()),
                Ok(()) if serde_json::to_value(&value).is_ok_and(|json| json == found) => {
                    return Ok(value);
                }
                _ => {}
            }
        }
        // Nothing journaled (or no telling): the number goes back, as for a failed `f`, so
        // that a retry in the node looks it up again, and replays the value should the write
        // have reached the store after all rather than doing the work again. Its questions
        // go back with it, so that the retry is filed under the same answers.
        self.unask(asked);
        self.give_back_number(name, occurrence);
        Err(failed.into())
    }

    /// Counts the questions a replayed step's work asked when it ran (see
    /// [`questions_key`]) as asked now, so that the node's next question takes its own
    /// answer.
    async fn count_replayed_questions(&self, key: &JournalKey) -> Result<()> {
        let store = self.run.runtime.store();
        let counted = questions_key(key);
        let recorded = match store.as_memory() {
            Some(memory) => memory.get_journal_now(&counted)?,
            None => store.get_journal(&counted).await?,
        };
        let asked = recorded.as_ref().and_then(serde_json::Value::as_u64);
        if let Some(asked) = asked.and_then(|n| usize::try_from(n).ok()) {
            let mut control = self.control();
            control.interrupts_called = control.interrupts_called.saturating_add(asked);
        }
        Ok(())
    }

    /// Takes back the `asked` questions a step's work asked, for a step whose write failed:
    /// the retry asks them again under the same numbers, and so looks its value up under the
    /// same answers (it may have reached the journal after all).
    fn unask(&self, asked: usize) {
        let mut control = self.control();
        control.interrupts_called = control.interrupts_called.saturating_sub(asked);
    }

    /// Gives `key`'s occurrence number back to the calls named `name` (counted under the
    /// name as called, whatever it is filed as), when no later call of it took one since.
    pub(super) fn give_back(&self, name: &str, key: &JournalKey) {
        self.give_back_number(name, key.occurrence);
    }

    /// [`give_back`](Self::give_back) of the occurrence number `occurrence`.
    fn give_back_number(&self, name: &str, occurrence: u32) {
        let mut control = self.control();
        if let Some(counter) = control.occurrences.get_mut(name)
            && *counter == occurrence + 1
        {
            *counter = occurrence;
        }
    }

    /// Gives back numbers taken together (a wait's receipt, time-out and deadline), all or
    /// none: each name's counter must stand at its number taken, plus one, or at the number
    /// (given back already); a later call of any of them since keeps them all.
    pub(super) fn give_back_together(&self, taken: &[(String, u32)]) {
        let mut control = self.control();
        let untouched = taken.iter().all(|(name, occurrence)| {
            (control.occurrences.get(name))
                .is_some_and(|&n| n == *occurrence || n == occurrence + 1)
        });
        if untouched {
            for (name, occurrence) in taken {
                if let Some(counter) = control.occurrences.get_mut(name) {
                    *counter = *occurrence;
                }
            }
        }
    }

    /// The occurrence number the next call named `name` in this node execution takes.
    pub(super) fn next_occurrence(&self, name: &str) -> u32 {
        self.control().occurrences.get(name).copied().unwrap_or(0)
    }

    /// The journal key for the next call named `name` in this node execution.
    ///
    /// A call made after the node's `interrupt` calls returned values is filed under its
    /// name and a fingerprint of those values (`charge@<16 hex digits>`): the answers are
    /// the node's input, and another answer to the same question (given after a resumed
    /// step failed and left it open) is another input, whose calls are made afresh rather
    /// than handed the results of the calls made for the first.
    pub(crate) fn journal_key(&self, name: &str) -> JournalKey {
        self.next_key(name, true)
    }

    /// The journal key for the next receipt of a signal, filed as `name` (`signal:<name>`)
    /// whatever the node's `interrupt` calls returned: a signal taken is gone from the
    /// store, and the node, run again for the same step with another answer, is handed it
    /// again rather than waiting for one that will not come a second time.
    pub(crate) fn receipt_key(&self, name: &str) -> JournalKey {
        self.next_key(name, false)
    }

    /// The receipt journaled under `key` ([`receipt_key`](Self::receipt_key)), with the key
    /// it was found under: receipts taken after the node's answers were filed with them
    /// before receipts left them out, and are looked for there too, for a run that stopped
    /// before the change.
    pub(crate) async fn recorded_receipt(
        &self,
        key: &JournalKey,
    ) -> Result<Option<(JournalKey, serde_json::Value)>, StoreError> {
        let store = self.runtime().store();
        if let Some(recorded) = store.get_journal(key).await? {
            return Ok(Some((key.clone(), recorded)));
        }
        let answered = self.control().interrupts_called.min(self.resume.len());
        if answered == 0 {
            return Ok(None);
        }
        let earlier = JournalKey {
            name: self.filed_as(&key.name, answered),
            ..key.clone()
        };
        let recorded = store.get_journal(&earlier).await?;
        Ok(recorded.map(|recorded| (earlier, recorded)))
    }

    /// The key for the next call named `name`, filed with the answers' fingerprint when
    /// `by_answers`.
    fn next_key(&self, name: &str, by_answers: bool) -> JournalKey {
        let (occurrence, answered) = {
            let mut control = self.control();
            let counter = control.occurrences.entry(name.to_owned()).or_insert(0);
            let current = *counter;
            *counter += 1;
            let answered = control.interrupts_called.min(self.resume.len());
            (current, if by_answers { answered } else { 0 })
        };
        let filed_as = self.filed_as(name, answered);
        JournalKey::new(
            &*self.run.thread,
            self.run.run,
            self.run.namespace.as_str(),
            self.step,
            &*self.node,
            filed_as,
            occurrence,
        )
    }

    /// `name` as a call made after the node's first `answered` answers is filed: with their
    /// fingerprint (`charge@<16 hex digits>`), or as it is before any.
    fn filed_as(&self, name: &str, answered: usize) -> String {
        match answered {
            0 => name.to_owned(),
            n => format!("{name}@{}", answers_fingerprint(&self.resume[..n])),
        }
    }
}

/// Where a step whose work asked questions ([`Context::interrupt`]) records how many, beside
/// its value under `key`: `interrupts:<name>`, as a signal's receipt is `signal:<name>`.
fn questions_key(key: &JournalKey) -> JournalKey {
    JournalKey {
        name: format!("interrupts:{}", key.name),
        ..key.clone()
    }
}

/// A fingerprint of the values a node's `interrupt` calls returned, stable across
/// processes and builds: the same answers give the same one.
fn answers_fingerprint(answers: &[serde_json::Value]) -> String {
    let lines: Vec<String> = answers.iter().map(ToString::to_string).collect();
    crate::graph::fingerprint_of(&lines)
}

/// The store's failure `error` is, when the store failed in passing or the run's claim was
/// lost: not the step's fault. `error` is a step's: the store's or the run's (a step of its
/// own, journaled inside it). The crate's facade error is not looked into here (the context
/// does not know it): a failure that reaches a step as one is the step's.
fn in_passing(error: BoxError) -> std::result::Result<StoreError, BoxError> {
    let passing = |failure: &StoreError| {
        failure.is_passing() || matches!(failure, StoreError::LeaseLost { .. })
    };
    let error = match error.downcast::<StoreError>() {
        Ok(failure) if passing(&failure) => return Ok(*failure),
        Ok(failure) => return Err(failure),
        Err(other) => other,
    };
    match error.downcast::<RunError>() {
        Ok(run) => match *run {
            RunError::Store(failure) if passing(&failure) => Ok(failure),
            other => Err(Box::new(other)),
        },
        Err(other) => Err(other),
    }
}
