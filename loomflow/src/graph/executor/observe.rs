//! What a run reports as it goes: its spans (see [`crate::telemetry`]) and the audit
//! entries of its interrupts and resumes.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};
use tracing::Span;

use super::Result;
use crate::context::RunShared;
use crate::graph::State;
use crate::graph::compiled::CompiledInner;
use crate::graph::run::RunOutcome;
use crate::json_text;
use crate::runtime::{AuditEntry, AuditKind, Interrupt, RunStatus};
use crate::telemetry::{self, TARGET};

/// Where a run picked up from, when it carried on from a checkpoint.
#[derive(Debug)]
pub(super) struct Resumed {
    /// The id of the checkpoint it carried on from.
    pub(super) checkpoint: u64,
    /// The step of the checkpoint it carried on from.
    pub(super) step: u64,
    /// That checkpoint's status: `Interrupted` for a resume, `Running` or `Failed` when an
    /// execution stopped half way (a crash, a lost lease, an error) and is taken up again.
    pub(super) status: RunStatus,
    /// The `traceparent` of the execution that wrote the checkpoint, if it kept one.
    pub(super) trace: Option<String>,
    /// The interrupts the run was suspended on.
    pub(super) interrupts: Vec<Interrupt>,
    /// The interrupts a resume with values answers.
    pub(super) answered: Vec<Answered>,
    /// The checkpoint was written by a graph of another structure fingerprint (its edges
    /// declared in another order, or a change a resume allowed).
    pub(super) graph_changed: bool,
}

/// An interrupt a resume answers: its index among the interrupts the run was suspended
/// on, and where its value is among its node's resume values.
#[derive(Debug, Clone, Copy)]
pub(super) struct Answered {
    pub(super) at: usize,
    pub(super) value: usize,
}

/// The `run {graph}` span of one execution.
pub(super) fn run_span(graph: &str, thread: &str, namespace: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "run",
        otel.name = %format!("run {graph}"),
        loomflow.graph = %graph,
        loomflow.thread = %thread,
        loomflow.namespace = %namespace,
        loomflow.run = tracing::field::Empty,
        loomflow.resumed = tracing::field::Empty,
        loomflow.outcome = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// Whether a run's result is a failure its span reports with an error status: a failed
/// run or an error (a cancellation or a hand-back is not one).
pub(super) fn failed<S>(result: &Result<RunOutcome<S>>) -> bool {
    matches!(outcome_name(result), "failed" | "error")
}

/// What a run's result was, for its span's `loomflow.outcome`.
pub(super) fn outcome_name<S>(result: &Result<RunOutcome<S>>) -> &'static str {
    match result {
        Ok(RunOutcome::Completed(_)) => "completed",
        Ok(RunOutcome::Interrupted { .. }) => "interrupted",
        Ok(RunOutcome::Failed { .. }) => "failed",
        Err(crate::graph::RunError::Cancelled { .. }) => "cancelled",
        Err(crate::graph::RunError::Yielded { .. }) => "handed_back",
        Err(_) => "error",
    }
}

/// The `superstep {n}` span.
pub(super) fn superstep_span<S>(g: &CompiledInner<S>, step: u64, active: &[usize]) -> Span {
    tracing::info_span!(
        target: TARGET,
        "superstep",
        otel.name = %format!("superstep {step}"),
        loomflow.step = telemetry::count(step),
        loomflow.nodes = %NodeNames(g, active),
    )
}

/// The `suspend` span around writing a suspension.
pub(super) fn suspend_span(step: u64, interrupts: &[Interrupt]) -> Span {
    tracing::info_span!(
        target: TARGET,
        "suspend",
        loomflow.step = telemetry::count(step),
        loomflow.interrupts = %InterruptIds(interrupts),
    )
}

/// Records where the execution picked up on its `run` span, links the span to the trace of
/// the execution before, and opens (and closes) a `resume` span. A run carried on from a
/// suspension also records `resume` audit entries, written with its next checkpoint, for
/// the interrupts of its own nodes: a subgraph's child run records those of its nodes, as
/// only it knows whether it moved on before it suspended again.
///
/// Returns the ids of the interrupts the run was suspended on that this execution does not
/// answer: should the resumed step suspend on one of them again, the run is still where it
/// was, and [`record_interrupts`] records no second `interrupt` entry for it.
pub(super) fn picked_up<S: State>(
    shared: &RunShared,
    g: &CompiledInner<S>,
    run: u64,
    resumed: Option<Resumed>,
    resume_values: &BTreeMap<String, Vec<Value>>,
) -> Vec<String> {
    let span = Span::current();
    span.record("loomflow.run", telemetry::count(run));
    let Some(resumed) = resumed else {
        span.record("loomflow.resumed", false);
        return Vec::new();
    };
    span.record("loomflow.resumed", true);
    if let Some(trace) = &resumed.trace {
        telemetry::link_to(&span, trace);
    }
    drop(
        tracing::info_span!(
            target: TARGET,
            "resume",
            // The superstep it carries on with, as the `suspend` span numbered it (the
            // checkpoint is the step before's).
            loomflow.step = telemetry::count(resumed.step + 1),
            loomflow.status = resumed.status.as_str(),
            loomflow.interrupts = %InterruptIds(&resumed.interrupts),
        )
        .entered(),
    );
    if resumed.status != RunStatus::Interrupted {
        return Vec::new();
    }
    let answered = resumed.answered;
    let mut unanswered = Vec::new();
    for (at, interrupt) in resumed.interrupts.into_iter().enumerate() {
        if g.is_subgraph(&interrupt.node) {
            continue;
        }
        let value = answered.iter().find(|a| a.at == at).and_then(|a| {
            let values = resume_values.get(&interrupt.node)?;
            values.get(a.value)
        });
        if value.is_none() {
            unanswered.push(interrupt.id.clone());
        }
        // Named by the claim it is written under.
        let thread = String::new();
        // The resume happened when this execution picked the run up.
        let at_ms = shared.claim.claimed_at_ms();
        if let Some(value) = value.filter(|value| !value.is_object() && !value.is_array()) {
            // A scalar is kept as it is, with its node: a store that keeps its log in memory
            // builds the detail only when the log is read. A map or a list is written as
            // text, below, which takes a fraction of its tree of values.
            let entry = AuditEntry::given(thread, interrupt.id, interrupt.node, value.clone());
            shared.record_audit(entry.at_ms(at_ms));
            continue;
        }
        // The interrupts a resume answered, and every wait and timer: a wait may receive
        // what came for it whether the execution answers other interrupts or recovers. One
        // that suspends again is no resume: `record_interrupts` forgets its entry.
        let node = &interrupt.node;
        let how = match (value, &interrupt.signal, interrupt.wake_at_ms) {
            (Some(value), _, _) => ResumeDetail::given(node, value),
            (None, Some(signal), _) => ResumeDetail::signal(node, signal),
            (None, None, Some(wake_at_ms)) => ResumeDetail::timer(node, wake_at_ms),
            _ => continue,
        };
        let entry = match how.text() {
            Some(text) => AuditEntry::with_text(thread, AuditKind::Resume, interrupt.id, text),
            None => {
                let detail = how.value_of();
                AuditEntry::unstamped(thread, AuditKind::Resume, interrupt.id, detail)
            }
        };
        shared.record_audit(entry.at_ms(at_ms));
    }
    unanswered
}

/// A `resume` entry's detail: the node, and the value it was given, or the signal or the
/// time it waited for.
#[derive(Serialize)]
struct ResumeDetail<'a> {
    node: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wake_at_ms: Option<u64>,
}

impl<'a> ResumeDetail<'a> {
    /// Of an interrupt of `node` answered with `value`.
    fn given(node: &'a str, value: &'a Value) -> Self {
        Self {
            value: Some(value),
            ..Self::of(node)
        }
    }

    /// Of `node`'s wait for `signal`.
    fn signal(node: &'a str, signal: &'a str) -> Self {
        Self {
            signal: Some(signal),
            ..Self::of(node)
        }
    }

    /// Of `node`'s timer, due at `wake_at_ms`.
    fn timer(node: &'a str, wake_at_ms: u64) -> Self {
        Self {
            wake_at_ms: Some(wake_at_ms),
            ..Self::of(node)
        }
    }

    fn of(node: &'a str) -> Self {
        Self {
            node,
            signal: None,
            value: None,
            wake_at_ms: None,
        }
    }

    /// As JSON text, written at once rather than through a map of values; `None` for a
    /// value nested past [`json_text::TEXT_DEPTH`], which is kept as a value.
    fn text(&self) -> Option<Box<str>> {
        // Its depth only: a resume's value is written here, not under the store's lock.
        let mut room = usize::MAX;
        let readable = |value| json_text::fits(value, json_text::TEXT_DEPTH, &mut room);
        if !self.value.is_none_or(readable) {
            return None;
        }
        json_text::boxed(self).ok()
    }

    /// As a value.
    fn value_of(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// The `interrupt` audit entries of a run's suspension, for the interrupts of its own
/// nodes (a subgraph's child run records its own): the subject is the interrupt's id (which
/// names its node), the detail what it waits for (a signal, a time).
/// The payload is not repeated: the suspended checkpoint keeps it, and is always kept.
/// A suspended run's rows are what the 1 KiB-per-run disk budget is spent on.
///
/// `still_waiting` are the interrupts the execution picked up on and did not answer, when
/// the suspending step is the one it resumed (see [`picked_up`]): suspending on one of them
/// again is no new suspension, so it gets no entry, and the `resume` entry a recover queued
/// for it is forgotten, as the run was not carried past it.
pub(super) fn record_interrupts<S: State>(
    shared: &RunShared,
    g: &CompiledInner<S>,
    interrupts: &[Interrupt],
    still_waiting: &[String],
) {
    let own = interrupts.iter().filter(|i| !g.is_subgraph(&i.node));
    let again = |interrupt: &&Interrupt| still_waiting.contains(&interrupt.id);
    if !still_waiting.is_empty() {
        shared.forget_resumes_of(own.clone().filter(again).map(|i| i.id.as_str()));
    }
    for interrupt in own.filter(|i| !again(i)) {
        let mut detail = json!({});
        if let Some(signal) = &interrupt.signal {
            detail["signal"] = Value::from(signal.as_str());
        }
        if let Some(wake_at_ms) = interrupt.wake_at_ms {
            detail["wake_at_ms"] = Value::from(wake_at_ms);
        }
        // Named by the claim it is written under, and dated by the write that suspends.
        shared.record_audit(AuditEntry::unstamped(
            String::new(),
            AuditKind::Interrupt,
            &interrupt.id,
            detail,
        ));
    }
}

/// Warns of each join that some of its sources reached and the run ended without firing:
/// its target never ran, which a graph whose join sources sit on branches that exclude each
/// other does without failing. Joins are rare and their marks few; most graphs have none.
pub(super) fn unfired_joins<S>(g: &CompiledInner<S>, thread: &str, joins: &[Vec<bool>]) {
    for (j, marks) in joins.iter().enumerate() {
        if !marks.contains(&true) {
            continue;
        }
        let topology = g.topology();
        let sources = topology.join_sources(j);
        let missing: Vec<&str> = sources
            .iter()
            .zip(marks)
            .filter(|(_, ran)| !**ran)
            .map(|(&i, _)| &*g.nodes[i].name)
            .collect();
        tracing::warn!(
            target: TARGET,
            graph = %g.name,
            thread,
            join_target = g.vertex_name(topology.join_target(j)),
            missing = %missing.join(","),
            "the run ended with a join that never fired: its target did not run"
        );
    }
}

/// Node names, comma-separated, for a span field.
struct NodeNames<'a, S>(&'a CompiledInner<S>, &'a [usize]);

impl<S> std::fmt::Display for NodeNames<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, &i) in self.1.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            f.write_str(&self.0.nodes[i].name)?;
        }
        Ok(())
    }
}

/// Interrupt ids, comma-separated, for a span field.
struct InterruptIds<'a>(&'a [Interrupt]);

impl std::fmt::Display for InterruptIds<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (n, interrupt) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            f.write_str(&interrupt.id)?;
        }
        Ok(())
    }
}

/// Tells a top-level run's stream how a run it did not step through stands (a recover of a
/// finished or suspended run, a route out of `START` that failed): the closing events its
/// steps would have sent, as run-level events (step 0). Returns `outcome`.
pub(super) fn told<S>(
    events: &Option<crate::event::EventSink>,
    namespace: &crate::graph::namespace::Namespace,
    outcome: RunOutcome<S>,
) -> RunOutcome<S> {
    use crate::event::{Event, EventKind};
    let Some(events) = events.as_ref().filter(|_| namespace.is_root()) else {
        return outcome;
    };
    match &outcome {
        RunOutcome::Completed(_) => events.send(Event::new(0, None, EventKind::Done)),
        RunOutcome::Failed { error, .. } => {
            let message = super::ErrorChain(error).to_string();
            events.send(Event::new(0, None, EventKind::Error { message }));
        }
        RunOutcome::Interrupted { interrupts, .. } => {
            for interrupt in interrupts {
                let kind = EventKind::Interrupt {
                    id: interrupt.id.clone(),
                    payload: interrupt.payload.clone(),
                };
                events.send(Event::new(0, Some(interrupt.node.clone()), kind));
            }
        }
    }
    outcome
}

/// Tells a top-level run's stream that the run, suspended, was cancelled right after (the
/// cancel reached it while its suspension was being written).
pub(super) fn tell_cancelled(events: &crate::event::EventSink) {
    use crate::event::{Event, EventKind};
    let message = "the run was cancelled".to_owned();
    events.send(Event::new(0, None, EventKind::Error { message }));
}
