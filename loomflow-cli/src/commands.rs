//! One function per command.

use loomflow::Runtime;
use loomflow::graph::mermaid::from_description;
use loomflow::runtime::{RunCursor, RunFilter, RunState, SignalOptions};
use loomflow::tool::ApprovalDecision;
use serde_json::{Value, json};

use crate::Failure;
use crate::output::{Output, cell, out, outln, table, time, waits};

/// `text` as JSON, as deep as loomflow keeps it (serde_json alone stops at 128 levels).
pub(crate) fn parse_json(what: &str, text: &str) -> Result<Value, Failure> {
    loomflow::json::from_str(text).map_err(|e| {
        // `yes` for `"yes"`: the shell took the quotes a JSON string needs (a value; `--edit`
        // takes an object).
        let word = what != "--edit"
            && !text.trim().is_empty()
            && !text.trim_start().starts_with(['{', '[', '"']);
        let hint = match word {
            true => "; a string is written in quotes, inside the shell's: '\"yes\"'",
            false => "",
        };
        Failure::usage(format!("{what} is not JSON: {e}{hint}"))
    })
}

/// The run state `word` names.
pub(crate) fn run_state(word: &str) -> Result<RunState, Failure> {
    RunState::parse(word).ok_or_else(|| {
        let known: Vec<&str> = RunState::ALL.iter().map(|s| s.as_str()).collect();
        Failure::usage(format!(
            "unknown status {word:?}; one of: {}",
            known.join(", ")
        ))
    })
}

/// A signal's name and idempotency key, as given: neither may be empty. The key is taken
/// as the HTTP ingress takes its `Idempotency-Key` header, trimmed and in printable ASCII, so
/// that one key sent both ways is one key.
pub(crate) fn check_signal(name: &str, key: Option<&str>) -> Result<(), Failure> {
    if name.is_empty() {
        return Err(Failure::usage("the signal name must not be empty"));
    }
    match key.map(str::trim) {
        Some("") => Err(Failure::usage("--key must not be empty")),
        Some(key) if !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ') => Err(
            Failure::usage("--key must be printable ASCII, as an Idempotency-Key header is"),
        ),
        _ => Ok(()),
    }
}

pub(crate) async fn runs(
    runtime: &Runtime,
    out: &Output,
    (status, graph): (Option<String>, Option<String>),
    (limit, after): (Option<usize>, Option<String>),
) -> Result<(), Failure> {
    let mut filter = RunFilter::new();
    if let Some(word) = status {
        filter = filter.state(run_state(&word)?);
    }
    if let Some(graph) = graph {
        filter = filter.graph(graph);
    }
    if let Some(after) = after {
        filter = filter.after(run_cursor(&after)?);
    }
    // One more than the page, to tell whether another follows.
    if let Some(limit) = limit {
        filter = filter.limit(limit.saturating_add(1));
    }
    let mut records = runtime.runs(&filter).await?;
    let more = limit.is_some_and(|limit| records.len() > limit);
    if let (true, Some(limit)) = (more, limit) {
        records.truncate(limit);
    }
    if out.json {
        out.json(&records);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.thread.clone(),
                r.graph.clone().unwrap_or_else(|| "-".to_owned()),
                r.state.to_string(),
                waits(r),
                r.attempts.to_string(),
                time(r.updated_at_ms),
            ]
        })
        .collect();
    table(
        &[
            "THREAD",
            "GRAPH",
            "STATE",
            "WAITS FOR",
            "ATTEMPTS",
            "UPDATED",
        ],
        &rows,
    );
    // On stderr, apart from the rows; encoded, so that it pastes back whatever the thread.
    if let (true, Some(last)) = (more, records.last()) {
        eprintln!("more: --after {}", RunCursor::of(last).encoded());
    }
    Ok(())
}

/// `--after`'s cursor: `<updated_at_ms>:<thread>`, or as a page's end gives it
/// (`<updated_at_ms>.<thread as hex>`, as the HTTP listing's `next`).
pub(crate) fn run_cursor(text: &str) -> Result<RunCursor, Failure> {
    text.parse()
        .map_err(|e: loomflow::runtime::BadRunCursor| Failure::usage(e.to_string()))
}

/// The ids of `interrupts` whose signal has come: as many of those waiting for one name as
/// signals of that name are pending for the thread, in the order they are listed.
async fn answered_waits<'a>(
    runtime: &Runtime,
    thread: &str,
    interrupts: &'a [loomflow::Interrupt],
) -> Result<Vec<&'a str>, Failure> {
    let store = runtime.store();
    let mut waiting: Vec<(&str, Vec<&str>)> = Vec::new();
    for interrupt in interrupts {
        if let Some(signal) = &interrupt.signal {
            match waiting.iter_mut().find(|(name, _)| name == signal) {
                Some((_, ids)) => ids.push(&interrupt.id),
                None => waiting.push((signal, vec![&interrupt.id])),
            }
        }
    }
    let mut pending = None;
    let mut answered = Vec::new();
    for (name, ids) in waiting {
        let sent = if ids.len() == 1 {
            let oldest = store.oldest_signal(thread, name).await;
            usize::from(oldest.map_err(loomflow::RuntimeError::from)?.is_some())
        } else {
            // Several waits for one name: each signal answers one of them.
            if pending.is_none() {
                let all = store.pending_signals().await;
                pending = Some(all.map_err(loomflow::RuntimeError::from)?);
            }
            let all = pending.as_deref().unwrap_or_default();
            (all.iter())
                .filter(|s| s.session == thread && s.name == name)
                .count()
        };
        answered.extend(ids.into_iter().take(sent));
    }
    Ok(answered)
}

pub(crate) async fn show(runtime: &Runtime, out: &Output, thread: &str) -> Result<(), Failure> {
    let info = runtime.run(thread).await?;
    let approvals = runtime.pending_approvals(thread).await?;
    let history = runtime.list_checkpoints(thread).await?;
    // The waits whose signal has come (a decision sent, say): the run carries on when a
    // worker or `recover` takes it up, and until then reads as waiting.
    let answered = answered_waits(runtime, thread, &info.interrupts).await?;
    if out.json {
        let history: Vec<Value> = history
            .iter()
            .map(|cp| {
                json!({
                    "id": cp.id, "run": cp.run, "namespace": cp.namespace, "step": cp.step,
                    "status": cp.status, "next": cp.next(), "error": cp.error,
                })
            })
            .collect();
        out.json(&json!({
            "run": info.record,
            "interrupts": info.interrupts,
            "answered_interrupts": answered,
            "approvals": approvals,
            "state": info.state,
            "history": history,
        }));
        return Ok(());
    }
    let r = &info.record;
    let lease = match &r.lease_owner {
        Some(owner) => format!("{} until {}", cell(owner), time(r.lease_until_ms)),
        None => "free".to_owned(),
    };
    // Names keep to their line (`cell`): a line break in one would print facts of its own.
    let mut facts = vec![
        ("thread", cell(&r.thread).into_owned()),
        (
            "graph",
            format!(
                "{} ({})",
                cell(r.graph.as_deref().unwrap_or("-")),
                r.fingerprint.as_deref().unwrap_or("no fingerprint")
            ),
        ),
        ("run", r.run.to_string()),
        ("state", r.state.to_string()),
        ("waits for", cell(&waits(r)).into_owned()),
        ("lease", lease),
        ("attempts", r.attempts.to_string()),
        ("created", time(r.created_at_ms)),
        ("updated", time(r.updated_at_ms)),
    ];
    // Executions in a row that died holding the run: a worker fails it at its limit.
    if r.lapses > 0 {
        facts.push(("lapses", r.lapses.to_string()));
    }
    if r.cancel_requested {
        facts.push(("cancel", "requested".to_owned()));
    }
    if let Some(error) = &r.error {
        facts.push(("error", cell(error).into_owned()));
    }
    for (name, value) in facts {
        outln!("{name:<10} {value}");
    }
    if !info.interrupts.is_empty() {
        outln!("\ninterrupts:");
        for i in &info.interrupts {
            let waits = match (&i.signal, i.wake_at_ms) {
                (Some(signal), Some(at)) => format!("signal {}, until {}", cell(signal), time(at)),
                (Some(signal), None) => format!("signal {}", cell(signal)),
                (None, Some(at)) => format!("sleeping until {}", time(at)),
                (None, None) => "a resume value".to_owned(),
            };
            let answered = match answered.contains(&i.id.as_str()) {
                true => "; it has come: a worker or `recover` carries the run on",
                false => "",
            };
            outln!(
                "  {}  (node {}; waits for {waits}{answered})",
                cell(&i.id),
                cell(&i.node)
            );
            outln!("    {}", i.payload);
        }
    }
    if !approvals.is_empty() {
        outln!("\napprovals:");
        for a in &approvals {
            // The time as a number too: `approve --asked-at` takes it, to decide this
            // request and not one the call makes later under the same id.
            outln!(
                "  {}  tool {}  asked {} ({} ms){}",
                cell(&a.call_id),
                cell(&a.tool),
                time(a.requested_at_ms),
                a.requested_at_ms,
                a.user
                    .as_deref()
                    .map(|u| format!("  for {}", cell(u)))
                    .unwrap_or_default()
            );
            let arguments = serde_json::to_string_pretty(&a.arguments)
                .unwrap_or_else(|_| a.arguments.to_string());
            for line in arguments.lines() {
                outln!("    {line}");
            }
        }
    }
    outln!("\nstate:");
    let state = serde_json::to_string_pretty(&info.state).unwrap_or_default();
    for line in state.lines() {
        outln!("  {line}");
    }
    outln!("\nhistory:");
    let rows: Vec<Vec<String>> = history
        .iter()
        .map(|cp| {
            vec![
                cp.id.to_string(),
                cp.run.to_string(),
                if cp.namespace.is_empty() {
                    "-".to_owned()
                } else {
                    cp.namespace.clone()
                },
                cp.step.to_string(),
                cp.status.as_str().to_owned(),
                cp.next().join(", "),
            ]
        })
        .collect();
    table(&["ID", "RUN", "NAMESPACE", "STEP", "STATUS", "NEXT"], &rows);
    Ok(())
}

pub(crate) async fn signal(
    runtime: &Runtime,
    out: &Output,
    thread: &str,
    name: &str,
    payload: &str,
    key: Option<String>,
) -> Result<(), Failure> {
    check_signal(name, key.as_deref())?;
    let payload = parse_json("the payload", payload)?;
    // A signal for a thread that never ran would wait unseen, and one for a run that has
    // ended would wait for the next run on the thread: both are refused.
    let run = runtime.store().get_run(thread).await;
    if run.map_err(loomflow::RuntimeError::from)?.is_none() {
        return Err(Failure::not_found(format!("thread {thread} has no run")));
    }
    let mut options = SignalOptions::default().require_live_run();
    if let Some(key) = key {
        options = options.idempotency_key(key.trim());
    }
    let delivery = runtime.signal_with(thread, name, payload, options).await?;
    let word = format!("{delivery:?}").to_lowercase();
    let message = if delivery == loomflow::runtime::Delivery::Duplicate {
        format!("signal {name} to {thread} not sent again: its key was sent before (duplicate)")
    } else {
        format!("signal {name} sent to {thread} ({word})")
    };
    out.done(
        &message,
        &json!({ "thread": thread, "signal": name, "delivery": word }),
    );
    Ok(())
}

pub(crate) async fn drop_signal(
    runtime: &Runtime,
    out: &Output,
    thread: &str,
    name: &str,
    by: &str,
) -> Result<(), Failure> {
    let Some(payload) = runtime.drop_signal(thread, name, by).await? else {
        return Err(Failure::not_found(format!(
            "no signal {name} is pending for thread {thread}"
        )));
    };
    out.done(
        &format!("dropped signal {name} of {thread}, unread: {payload}"),
        &json!({ "thread": thread, "signal": name, "dropped": payload }),
    );
    Ok(())
}

/// A call to decide: its thread, its id, and when the request decided was made, if given.
pub(crate) type Call<'a> = (&'a str, &'a str, Option<u64>);

/// Sends `decision` for the call; with the time a request was made, for that request only.
/// When nothing waits under that id, the failure lists what does.
async fn decide(
    runtime: &Runtime,
    (thread, call_id, asked_at): Call<'_>,
    decision: ApprovalDecision,
    by: &str,
) -> Result<(), Failure> {
    let sent = runtime
        .decide_approval_asked_at(thread, call_id, asked_at, decision, by)
        .await;
    let Err(loomflow::Error::Runtime(loomflow::RuntimeError::NoPendingApproval { .. })) = sent
    else {
        return Ok(sent?);
    };
    let approvals = runtime.pending_approvals(thread).await?;
    let pending: Vec<&str> = approvals.iter().map(|a| a.call_id.as_str()).collect();
    Err(Failure::not_found(format!(
        "no approval pending for call {call_id} on thread {thread} (pending: {})",
        if pending.is_empty() {
            "none".to_owned()
        } else {
            pending.join(", ")
        }
    )))
}

/// Who decides an approval from the command line: `--by`, else `$USER`, else `cli`. An
/// empty `--by` would record a decision by nobody.
pub(crate) fn decider(by: Option<String>) -> Result<String, Failure> {
    if by.as_deref().is_some_and(|by| by.trim().is_empty()) {
        return Err(Failure::usage("--by must name who decides"));
    }
    Ok(by
        .or_else(|| std::env::var("USER").ok().filter(|u| !u.is_empty()))
        .unwrap_or_else(|| "cli".to_owned()))
}

/// An approval, with the arguments `--edit` gives instead, if any: a JSON object.
pub(crate) fn approval(edit: Option<&str>) -> Result<ApprovalDecision, Failure> {
    Ok(match edit {
        Some(arguments) => match parse_json("--edit", arguments)? {
            arguments @ Value::Object(_) => ApprovalDecision::Edit { arguments },
            other => {
                return Err(Failure::usage(format!(
                    "--edit must be a JSON object of the tool's arguments, not {other}"
                )));
            }
        },
        None => ApprovalDecision::Allow,
    })
}

pub(crate) async fn approve(
    runtime: &Runtime,
    out: &Output,
    call: Call<'_>,
    edit: Option<&str>,
    by: &str,
) -> Result<(), Failure> {
    let (thread, call_id, _) = call;
    let decision = approval(edit)?;
    decide(runtime, call, decision, by).await?;
    out.done(
        &format!("approved call {call_id} on {thread}"),
        &json!({ "thread": thread, "call_id": call_id, "decision": "approved" }),
    );
    Ok(())
}

pub(crate) async fn reject(
    runtime: &Runtime,
    out: &Output,
    call: Call<'_>,
    reason: String,
    by: &str,
) -> Result<(), Failure> {
    let (thread, call_id, _) = call;
    decide(runtime, call, ApprovalDecision::Deny { reason }, by).await?;
    out.done(
        &format!("rejected call {call_id} on {thread}"),
        &json!({ "thread": thread, "call_id": call_id, "decision": "rejected" }),
    );
    Ok(())
}

pub(crate) async fn resume(
    runtime: &Runtime,
    out: &Output,
    thread: &str,
    value: &str,
    interrupt: Option<&str>,
) -> Result<(), Failure> {
    let value = parse_json("the resume value", value)?;
    match interrupt {
        Some(id) => runtime.request_resume_with(thread, id, value).await?,
        None => runtime.request_resume(thread, value).await?,
    };
    out.done(
        &format!("{thread}: resume requested; the run's next execution applies it"),
        &json!({ "thread": thread, "resume": "requested" }),
    );
    Ok(())
}

pub(crate) async fn cancel(runtime: &Runtime, out: &Output, thread: &str) -> Result<(), Failure> {
    let record = runtime.cancel(thread).await?;
    // A run that completed or failed is as it was: `cancel X && …` must not read as done.
    if matches!(record.state, RunState::Completed | RunState::Failed) {
        return Err(Failure::refused(format!(
            "{thread}: its run has ended ({}); nothing to cancel",
            record.state
        )));
    }
    let message = if record.cancel_requested {
        format!("{thread}: cancel requested; the run stops before its next step")
    } else {
        format!("{thread}: {}", record.state)
    };
    out.done(&message, &record);
    Ok(())
}

pub(crate) async fn delete(runtime: &Runtime, out: &Output, thread: &str) -> Result<(), Failure> {
    let run = runtime.store().get_run(thread).await;
    let had_run = run.map_err(loomflow::RuntimeError::from)?.is_some();
    let deleted = runtime.delete_thread(thread).await?;
    // A mistyped thread must not read as one deleted.
    if !had_run && deleted.is_empty() {
        return Err(Failure::not_found(format!("thread {thread} has no run")));
    }
    // Its run's row went too: a queued run has no checkpoint, and "0 checkpoints" alone
    // would read as nothing deleted.
    let run = if had_run { "its run, " } else { "" };
    let message = format!(
        "{thread}: deleted {run}{} checkpoints, {} journal entries, {} pending signals",
        deleted.checkpoints, deleted.journal_entries, deleted.signals
    );
    let json = json!({
        "thread": thread,
        "run": had_run,
        "checkpoints": deleted.checkpoints,
        "journal_entries": deleted.journal_entries,
        "signals": deleted.signals,
    });
    out.done(&message, &json);
    Ok(())
}

pub(crate) async fn graph(runtime: &Runtime, out: &Output, thread: &str) -> Result<(), Failure> {
    let info = runtime.run(thread).await?;
    let checkpoints = runtime.list_checkpoints(thread).await?;
    let mut top_level = checkpoints
        .iter()
        .filter(|cp| cp.run == info.record.run && cp.namespace.is_empty());
    let described = top_level
        .clone()
        .rev()
        .find_map(|cp| Some((cp, cp.body.get("graph_description")?.as_array()?)));
    // A run carried on with a changed graph describes the new structure in the first
    // checkpoint it writes under it; one an older loomflow carried on did not: the old
    // structure would be drawn without where it stands.
    if let (Some((cp, _)), Some(newest)) = (described, top_level.clone().next_back())
        && cp.body.get("graph") != newest.body.get("graph")
    {
        return Err(Failure::not_found(format!(
            "the run on {thread} carries on with a changed graph whose structure it did not \
             store (an older loomflow carried it on): there is no diagram to draw"
        )));
    }
    let description: Vec<String> = described
        .map(|(_, lines)| {
            lines
                .iter()
                .filter_map(|l| l.as_str().map(str::to_owned))
                .collect()
        })
        .ok_or_else(|| {
            Failure::not_found(format!(
                "the run on {thread} has no stored graph (it has not started, or an older \
                 loomflow wrote it)"
            ))
        })?;
    let current: Vec<&str> = top_level
        .next_back()
        .map(|cp| cp.next())
        .unwrap_or_default();
    let mermaid = from_description(&description, &current);
    if out.json {
        out.json(&json!({ "thread": thread, "mermaid": mermaid, "current": current }));
    } else {
        out!("{mermaid}");
    }
    Ok(())
}
