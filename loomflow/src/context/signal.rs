//! Signals from inside a node: [`Context::wait_for_signal`] and [`Context::poll_signal`].

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::Context;
use super::signal_accept::{accept, replayed};
use super::waits_beside::Deferred;
use crate::event::EventKind;
use crate::graph::RunError;
use crate::runtime::clock::{ClockWait, time_after, unix_ms};
use crate::runtime::mailbox::{Entry, Scope};
use crate::runtime::{JournalKey, RuntimeError, SignalError, StoreError};

type Result<T, E = RunError> = std::result::Result<T, E>;

/// A wait for a signal on the run's session; configure it, then `.await` it.
///
/// Made by [`Context::wait_for_signal`].
#[must_use = "a wait does nothing until it is awaited"]
pub struct WaitForSignal<'a, T> {
    ctx: &'a Context,
    name: String,
    timeout: Option<Duration>,
    scope: Scope,
    suspend: bool,
    /// Shown in the interrupt when the wait suspends the run.
    details: Option<serde_json::Value>,
    _type: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for WaitForSignal<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitForSignal")
            .field("node", &self.ctx.node())
            .field("name", &self.name)
            .field("timeout", &self.timeout)
            .field("suspend", &self.suspend)
            .finish_non_exhaustive()
    }
}

impl<T> WaitForSignal<'_, T> {
    /// When no payload is queued, suspends the run instead of parking in memory.
    ///
    /// The run stops with [`RunOutcome::Interrupted`](crate::RunOutcome::Interrupted), its
    /// interrupt naming the signal; the process may exit. Once the signal has been sent
    /// (from any process, on a durable runtime), [`CompiledGraph::recover`](crate::CompiledGraph::recover)
    /// runs the node again and this wait returns the payload. Use it for waits of hours or
    /// days.
    pub fn or_suspend(mut self) -> Self {
        self.suspend = true;
        self
    }

    /// Details the run's interrupt shows if an [`or_suspend`](Self::or_suspend) wait suspends
    /// it, as `{"waiting_for_signal": name, "details": details}`: a question for a person, the
    /// call awaiting approval, ….
    pub fn details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Gives up after `timeout` with [`SignalError::Timeout`](crate::runtime::SignalError::Timeout).
    ///
    /// The deadline is journaled, by the runtime's clock: when the node runs again for the
    /// same step (resumed, recovered, carried on by a worker), it waits only what is left,
    /// and a wait that timed out times out again. So does a wait the node makes again after
    /// its time-out could not be recorded (the store failed): it keeps the passed deadline.
    ///
    /// A wait carried on after its deadline (its worker was down or busy when it passed)
    /// ends as it would have at the deadline: it takes a signal sent by then, and times out
    /// if the only ones queued were sent later, which stay queued for the next receiver.
    /// Signals are stamped by the clock of the runtime that sends them
    /// ([`RuntimeBuilder::clock`](crate::runtime::RuntimeBuilder::clock)).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

impl<'a, T: DeserializeOwned + Send + 'a> IntoFuture for WaitForSignal<'a, T> {
    type Output = Result<T>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let span = tracing::info_span!(
            target: crate::telemetry::TARGET,
            "wait_signal",
            otel.name = %format!("wait_signal {}", self.name),
            loomflow.thread = %self.ctx.thread(),
            loomflow.signal = %self.name,
            loomflow.outcome = tracing::field::Empty,
        );
        let outcome_span = span.clone();
        // Counted on every poll: the waits beside it tell from it whether it is polled with
        // them (see `waits_beside`).
        let polls = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&polls);
        let wait = Box::pin(async move {
            let ctx = self.ctx;
            let name = self.name;
            let scope = self.scope;
            let timeout = self.timeout;
            let mut suspend = self.suspend;
            let mut details = self.details;
            let runtime = ctx.runtime();
            let session = ctx.thread();
            // The wait's journal keys, taken in the same order however the wait ends, so that
            // each wait of a node running again for the same step finds its own entries (they
            // are numbered by occurrence of their name within the node).
            let key = ctx.receipt_key(&format!("signal:{name}"));
            // Where a wait that timed out says so: a node running again for the same step
            // (resumed, recovered) times out again, whatever came after the deadline.
            let timeout_name = format!("signal-timeout:{name}");
            let timeout_key = timeout.map(|_| ctx.journal_key(&timeout_name));
            // A timed wait keeps its deadline in the journal, by the runtime's clock: the run,
            // carried on later (by a worker at the deadline, or recovered after its execution
            // stopped half way), times out at the same moment. Its number is read before the
            // step takes it (a wait beside it may take the next while the step waits).
            let deadline_name = format!("deadline:{name}");
            let deadline_taken = timeout.map(|_| ctx.next_occurrence(&deadline_name));
            // On the node's list from its first poll, before any await: a wait raced beside it
            // (a `select!`) neither takes a payload nor suspends the run before this one has
            // looked at its journal, and is listed with it should the run suspend.
            let _under_way = ctx.wait_under_way(&name, key.occurrence, details.clone(), counted);
            let mut deferred = Deferred::default();
            let waited: Result<T> = async {
                // Once, so that the waits polled after it in the same `select!` are on the
                // list before it looks at anything.
                tokio::task::yield_now().await;
                let deadline_ms = match timeout {
                    Some(timeout) => Some(
                        ctx.step(&deadline_name, || async {
                            Ok::<_, RunError>(unix_ms(time_after(runtime.now(), timeout)))
                        })
                        .await?,
                    ),
                    None => None,
                };
                // A node running again for the same step gets what it received before.
                if let Some((key, recorded)) = ctx.recorded_receipt(&key).await? {
                    return replayed(ctx, &name, &key, recorded);
                }
                ctx.wait_ready(&name, key.occurrence, deadline_ms);
                // Under a worker, a wait parks only briefly and then suspends the run.
                let grace = ctx.claim().park_grace();
                let durable = suspend || grace.is_some();
                let mut yielded = false;
                let timed_out = || SignalError::Timeout {
                    session: session.to_owned(),
                    name: name.clone(),
                    timeout: timeout.unwrap_or_default(),
                };
                if let Some(key) = &timeout_key
                    && runtime.store().get_journal(key).await?.is_some()
                {
                    return Err(timed_out().into());
                }
                let time_out = || async {
                    if let Some(timeout_key) = timeout_key.clone() {
                        let marked = serde_json::Value::Bool(true);
                        let written = (ctx.claim())
                            .put_journal_audited(timeout_key, marked, Vec::new())
                            .await;
                        written?;
                    }
                    Err::<T, RunError>(timed_out().into())
                };
                // Sent after the deadline, once it has passed here: a wait carried on late (its
                // worker was down or busy) ends as it would have at the deadline, and the signal
                // stays queued for whoever waits next. Signals are stamped by the sending
                // runtime's clock, the deadline by this one's: one clock in production, and the
                // same `ManualClock` in a test. Before the deadline passes here, whatever comes
                // is in time, whatever the sender's clock said.
                let late = |received: &Entry| {
                    deadline_ms.is_some_and(|deadline| {
                        received.sent_at_ms > deadline && unix_ms(runtime.now()) >= deadline
                    })
                };
                let mut announced = false;
                let store_keeps = runtime.store().is_durable();
                // Whether the deadline passed and this is the look at the store that follows.
                let mut last_look = false;
                // The deadline, by the runtime's clock (which a test's `ManualClock` moves ahead)
                // or by the real time it had left, whichever comes first.
                let clock = runtime.clock();
                let until = deadline_ms.map(|deadline| ClockWait::new(clock, deadline));
                // Each pass takes the next payload; one that another process consumed first
                // (it was in this mailbox too) is dropped, and the wait goes on.
                loop {
                    // What is left of the deadline.
                    let left = until.as_ref().map(|until| until.left(clock));
                    let left_ms =
                        left.map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX));
                    let park = match (suspend, grace) {
                        (true, _) => None,
                        (false, Some(grace)) => Some(left.map_or(grace, |left| grace.min(left))),
                        (false, None) => until.as_ref().map(|until| until.nap(clock)),
                    };
                    let must_suspend = durable && park.is_none_or(|p| p.is_zero());
                    // One beside it (a `select!`) is taking a payload it found (or looking
                    // for one), or has not looked at its journal yet: this one takes none
                    // meanwhile, which it would consume and lose when dropped.
                    if ctx.beside_busy(&name, key.occurrence, &mut deferred) {
                        if left_ms == Some(0) {
                            return time_out().await;
                        }
                        let nap = tokio::time::sleep(Duration::from_millis(1));
                        ctx.claim().unless_cancelled(nap).await?;
                        continue;
                    }
                    // A durable store may keep a signal for this run that the pending bounds
                    // dropped from this process's memory: every pass looks there too before it
                    // waits, oldest first (FIFO per session and name), not only one about to
                    // suspend.
                    if must_suspend || store_keeps {
                        // Looking, and taking what it finds: the waits beside it wait for it
                        // to end (checked and marked with no await between).
                        ctx.set_receiving(&name, key.occurrence, true);
                        let queued = match runtime.receive_now(session, &name, scope).await? {
                            Some(received) => {
                                (runtime.older_stored_first(session, &name, received, scope))
                                    .await?
                            }
                            None => runtime.receive_stored(session, &name).await?,
                        };
                        if queued.is_none() {
                            ctx.set_receiving(&name, key.occurrence, false);
                            ctx.wait_looked(&name, key.occurrence);
                        }
                        match queued {
                            Some(received) if late(&received) => {
                                runtime.give_back(session, &name, received, scope);
                                return time_out().await;
                            }
                            Some(received) => {
                                if let Some(value) =
                                    accept(ctx, &name, received, &key, scope).await?
                                {
                                    return Ok(value);
                                }
                                ctx.set_receiving(&name, key.occurrence, false);
                                continue;
                            }
                            None if last_look => return time_out().await,
                            None if !must_suspend => {}
                            None if left_ms == Some(0) => return time_out().await,
                            // The waits raced beside it (a `select!`) get their turn to be
                            // put on the list first, then it looks once more.
                            None if !yielded => {
                                yielded = true;
                                tokio::task::yield_now().await;
                                continue;
                            }
                            // One beside it is looking, or found its payload: it returns once
                            // the store has consumed it, and this wait is not to drop it half
                            // way, nor to suspend the run while it may find one.
                            None if ctx.beside_unsettled(&name, key.occurrence, &mut deferred) => {
                                let nap = tokio::time::sleep(Duration::from_millis(1));
                                ctx.claim().unless_cancelled(nap).await?;
                                continue;
                            }
                            None => {
                                return Err(ctx.suspend_for_signal_with(
                                    &name,
                                    key.occurrence,
                                    details.take(),
                                    deadline_ms,
                                ));
                            }
                        }
                    }
                    // Registered first, so that whoever sees the event finds the waiter in line.
                    let wait = runtime.start_wait(session, &name, park, scope).await?;
                    ctx.wait_looked(&name, key.occurrence);
                    if !announced {
                        announced = true;
                        ctx.run.emit(
                            ctx.step,
                            Some(&ctx.node),
                            EventKind::Wait {
                                signal: name.clone(),
                                timeout_ms: timeout
                                    .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                            },
                        );
                    }
                    let finished = ctx.claim().unless_cancelled(runtime.finish_wait(wait));
                    let received = match finished.await? {
                        Ok(received) => received,
                        // The grace is over: look once more, then suspend (or time out).
                        Err(RuntimeError::Signal(SignalError::Timeout { .. })) if durable => {
                            suspend = true;
                            continue;
                        }
                        // A nap of a clock's tick, the deadline not there yet.
                        Err(RuntimeError::Signal(SignalError::Timeout { .. }))
                            if until
                                .as_ref()
                                .is_some_and(|until| !until.left(clock).is_zero()) =>
                        {
                            continue;
                        }
                        // A signal another process sent in time may be in the store, not yet
                        // seen here (this process looks every poll interval): one more look.
                        Err(RuntimeError::Signal(SignalError::Timeout { .. }))
                            if store_keeps && !last_look =>
                        {
                            last_look = true;
                            continue;
                        }
                        Err(RuntimeError::Signal(SignalError::Timeout { .. })) => {
                            return time_out().await;
                        }
                        Err(error) => return Err(error.into()),
                    };
                    if ctx.beside_busy(&name, key.occurrence, &mut deferred) {
                        runtime.give_back(session, &name, received, scope);
                        let nap = tokio::time::sleep(Duration::from_millis(1));
                        ctx.claim().unless_cancelled(nap).await?;
                        continue;
                    }
                    if late(&received) {
                        runtime.give_back(session, &name, received, scope);
                        return time_out().await;
                    }
                    ctx.set_receiving(&name, key.occurrence, true);
                    if let Some(value) = accept(ctx, &name, received, &key, scope).await? {
                        return Ok(value);
                    }
                    ctx.set_receiving(&name, key.occurrence, false);
                }
            }
            .await;
            // A wait that failed, and that the node makes again (it caught the error), takes
            // the same numbers, as the node does when it runs again: the same deadline, which
            // may have passed. Not for a wait that timed out (its mark is written), nor once
            // the run is another execution's, nor when the run suspends.
            if let Err(error) = &waited
                && !matches!(
                    error,
                    RunError::Store(StoreError::LeaseLost { .. })
                        | RunError::Suspended { .. }
                        | RunError::Signal(SignalError::Timeout { .. })
                )
            {
                let mut taken = vec![(format!("signal:{name}"), key.occurrence)];
                taken.extend(timeout_key.as_ref().map(|k| (timeout_name, k.occurrence)));
                taken.extend(deadline_taken.map(|n| (deadline_name, n)));
                ctx.give_back_together(&taken);
            }
            waited
        });
        let ctx = self.ctx;
        let mut wait = wait;
        let wait = std::future::poll_fn(move |cx| {
            polls.fetch_add(1, Ordering::Relaxed);
            wait.as_mut().poll(cx)
        });
        Box::pin(tracing::Instrument::instrument(
            async move {
                let result = ctx.noted(wait.await);
                outcome_span.record(
                    "loomflow.outcome",
                    match &result {
                        Ok(_) => "received",
                        Err(RunError::Suspended { .. }) => "suspended",
                        // Outcomes a run meets in its course, as its own span reads them.
                        Err(RunError::Signal(SignalError::Timeout { .. })) => "timed_out",
                        Err(RunError::Cancelled { .. }) => "cancelled",
                        Err(_) => "error",
                    },
                );
                result
            },
            span,
        ))
    }
}

impl Context {
    /// Waits for the signal `name` on the run's session (its thread), typed.
    ///
    /// Someone outside the run answers with
    /// [`runtime.signal(thread, name, payload)`](crate::Runtime::signal). The payload is
    /// journaled: if the node runs again for the same step (after a resume or a crash) it
    /// gets the same payload back without waiting. A signal sent before the wait is queued
    /// and returned at once.
    ///
    /// Waits raced in a `select!` (a "shipped" and a "cancel" signal) take one payload: while
    /// one of them looks for or takes a payload, the others take none, and the others'
    /// signals stay pending for whoever waits next. Should none have come, the run suspends
    /// on all of them (one interrupt each), and either signal carries it on; the node then
    /// runs again and races them afresh. A node run again for the same step takes the branch
    /// it took before. Which of two pending signals is taken is the `select!`'s choice
    /// (`biased;` makes it the branches' order).
    ///
    /// A wait dropped before it returns (a `tokio::time::timeout` around it) puts the
    /// payload it was receiving back at the head of its queue, for the node's next wait.
    /// Only once the store has consumed the payload for it is the payload that wait's: it is
    /// journaled under the dropped wait, and comes back to it should the node run again for
    /// the same step.
    ///
    /// # Errors
    ///
    /// A timeout ([`SignalError::Timeout`]); a payload that is not a `T` (it stays at the
    /// head of its queue, and the wait journals nothing: a node that catches the error and
    /// takes the payload with another receive gets the same when it runs again; one that
    /// waits again as a `T` meets the same payload again, so take it out first, as a
    /// `serde_json::Value` with [`poll_signal`](Self::poll_signal), to skip it); a reserved
    /// or empty name; a store failure.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[derive(Clone, Default, Serialize, Deserialize)]
    /// struct Refund { approved: Option<bool> }
    ///
    /// #[derive(Deserialize)]
    /// struct Review { approved: bool }
    ///
    /// #[node]
    /// async fn ask_manager(state: &mut Refund, ctx: &Context) -> loomflow::Result<()> {
    ///     let review: Review = ctx
    ///         .wait_for_signal("manager_review")
    ///         .timeout(Duration::from_secs(3 * 86_400))
    ///         .await?;
    ///     state.approved = Some(review.approved);
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
    /// let graph = Graph::new("refund")
    ///     .node(ask_manager)
    ///     .edge(START, "ask_manager")
    ///     .edge("ask_manager", END)
    ///     .compile()?;
    /// let runtime = Runtime::in_memory();
    /// let run = graph.start(&runtime, "refund-42", Refund::default());
    /// // elsewhere, a web handler:
    /// runtime.signal("refund-42", "manager_review", json!({ "approved": true })).await?;
    /// assert_eq!(run.await?.completed()?.approved, Some(true));
    /// # Ok(()) }
    /// ```
    pub fn wait_for_signal<T: DeserializeOwned>(
        &self,
        name: impl Into<String>,
    ) -> WaitForSignal<'_, T> {
        WaitForSignal {
            ctx: self,
            name: name.into(),
            timeout: None,
            scope: Scope::User,
            suspend: false,
            details: None,
            _type: PhantomData,
        }
    }

    /// A wait that may use names reserved for loomflow (`loomflow:…`).
    pub(crate) fn wait_for_framework_signal<T: DeserializeOwned>(
        &self,
        name: impl Into<String>,
    ) -> WaitForSignal<'_, T> {
        WaitForSignal {
            ctx: self,
            name: name.into(),
            timeout: None,
            scope: Scope::Framework,
            suspend: false,
            details: None,
            _type: PhantomData,
        }
    }

    /// Takes the oldest payload of signal `name` on the run's session if one is queued;
    /// does not wait. Journaled like [`wait_for_signal`](Self::wait_for_signal): the node,
    /// run again for the same step (a resume, a recovery), gets what this poll got, a
    /// payload or nothing.
    ///
    /// # Errors
    ///
    /// As for [`wait_for_signal`](Self::wait_for_signal), without the timeout.
    pub async fn poll_signal<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>> {
        let key = self.receipt_key(&format!("signal:{name}"));
        // Where a poll that found nothing says so: a node running again for the same step
        // finds nothing again, whatever came since.
        let none_key = self.journal_key(&format!("signal-none:{name}"));
        let polled = self.polled_signal(name, &key, &none_key).await;
        // A poll that failed, and that the node makes again (it caught the error), takes
        // the same numbers, as the node run again does; not once the run is another
        // execution's.
        if let Err(error) = &polled
            && !matches!(error, RunError::Store(StoreError::LeaseLost { .. }))
        {
            self.give_back_together(&[
                (format!("signal:{name}"), key.occurrence),
                (format!("signal-none:{name}"), none_key.occurrence),
            ]);
        }
        self.noted(polled)
    }

    /// [`poll_signal`](Self::poll_signal) under its numbers, without giving them back or
    /// noting a store failure.
    async fn polled_signal<T: DeserializeOwned>(
        &self,
        name: &str,
        key: &JournalKey,
        none_key: &JournalKey,
    ) -> Result<Option<T>> {
        let runtime = self.runtime();
        let session = self.thread();
        if let Some((key, recorded)) = self.recorded_receipt(key).await? {
            return replayed(self, name, &key, recorded).map(Some);
        }
        if runtime.store().get_journal(none_key).await?.is_some() {
            return Ok(None);
        }
        // As a wait takes it: what is queued, or an older signal the store kept for the run
        // after the mailbox dropped it from memory.
        loop {
            let queued = match runtime.receive_now(session, name, Scope::User).await? {
                Some(received) => {
                    (runtime.older_stored_first(session, name, received, Scope::User)).await?
                }
                None => runtime.receive_stored(session, name).await?,
            };
            let Some(received) = queued else { break };
            if let Some(value) = accept(self, name, received, key, Scope::User).await? {
                return Ok(Some(value));
            }
        }
        (self.claim())
            .put_journal_audited(none_key.clone(), serde_json::Value::Bool(true), Vec::new())
            .await?;
        Ok(None)
    }
}
