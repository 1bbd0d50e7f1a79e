//! Checks of the audit log: entries ride with what they describe, read back in order, and
//! are pruned by age.

use serde_json::json;

use super::{signal, unique};
use crate::runtime::store::{
    AuditEntry, AuditKind, AuditQuery, Checkpoint, JournalKey, RunStatus, SignalPush, Store,
};

/// Far enough in the future that no lease in these checks expires on its own.
const LATER: u64 = u64::MAX / 4;

fn kinds(entries: &[AuditEntry]) -> Vec<AuditKind> {
    entries.iter().map(|e| e.kind).collect()
}

/// Appended entries read back by thread, in order, with every field; a query filters by
/// kind, pages after an id and stops at its limit.
pub(super) async fn entries_read_back_in_order(store: &dyn Store) {
    let thread = unique("audit");
    let other = unique("audit-other");
    let entries = vec![
        AuditEntry::new(
            &thread,
            AuditKind::ToolCall,
            "refund",
            json!({ "amount": 40 }),
        )
        .run(2)
        .actor(Some("ada"))
        .at_ms(1_000),
        AuditEntry::new(&other, AuditKind::ToolCall, "refund", json!({})).at_ms(1_001),
        AuditEntry::new(
            &thread,
            AuditKind::Decision,
            "refund",
            json!({ "decision": "allow" }),
        )
        .run(2)
        .at_ms(1_002),
    ];
    store.append_audit(entries).await.unwrap();
    let read = store.audit(&AuditQuery::thread(&thread)).await.unwrap();
    assert_eq!(kinds(&read), [AuditKind::ToolCall, AuditKind::Decision]);
    assert!(read[0].id > 0 && read[1].id > read[0].id, "ids increase");
    assert_eq!(read[0].thread, thread);
    assert_eq!(read[0].run, 2);
    assert_eq!(read[0].at_ms, 1_000);
    assert_eq!(read[0].subject, "refund");
    assert_eq!(read[0].actor.as_deref(), Some("ada"));
    assert_eq!(read[0].detail, json!({ "amount": 40 }));
    assert_eq!(read[1].actor, None);

    let decisions = AuditQuery::thread(&thread).kind(AuditKind::Decision);
    assert_eq!(
        kinds(&store.audit(&decisions).await.unwrap()),
        [AuditKind::Decision]
    );
    let after = AuditQuery::thread(&thread).after_id(read[0].id);
    assert_eq!(store.audit(&after).await.unwrap(), read[1..]);
    let first = AuditQuery::thread(&thread).limit(1);
    assert_eq!(store.audit(&first).await.unwrap(), read[..1]);
}

/// A stored signal is audited as sent, with its payload; a duplicate is not; taking it
/// audits its receipt, once, under the taking run.
pub(super) async fn signals_are_audited_with_the_signal(store: &dyn Store) {
    let session = unique("audit-sig");
    let SignalPush::Stored(seq) = store
        .push_signal(signal(&session, "approve", 3, Some("k")))
        .await
        .unwrap()
    else {
        panic!("the first send is stored");
    };
    assert_eq!(
        store
            .push_signal(signal(&session, "approve", 4, Some("k")))
            .await
            .unwrap(),
        SignalPush::Duplicate
    );
    let key = JournalKey::new(&session, 5, "", 1, "n", "signal:approve", 0);
    store.claim(&session, "reader", LATER, 1).await.unwrap();
    assert!(
        store
            .take_signal_claimed(&session, seq, (key, json!(3)), "reader", LATER)
            .await
            .unwrap()
    );
    assert!(
        !store.try_take_signal(&session, seq).await.unwrap(),
        "taken once"
    );
    let read = store.audit(&AuditQuery::thread(&session)).await.unwrap();
    assert_eq!(
        kinds(&read),
        [AuditKind::SignalSent, AuditKind::SignalReceived]
    );
    assert_eq!(read[0].subject, "approve");
    assert_eq!(read[0].detail["payload"], json!({ "n": 3 }));
    assert_eq!(read[0].detail["seq"], json!(seq));
    assert_eq!(read[0].detail["idempotency_key"], json!("k"));
    assert_eq!(read[1].subject, "approve");
    assert_eq!(read[1].run, 5);
    assert_eq!(read[1].detail["seq"], json!(seq));
    assert_eq!(read[0].actor, None, "a signal says nobody sent it");
    store.release(&session, "reader").await.unwrap();

    // One of loomflow's own that names who sent it (an approval decision's `by`): its
    // decider is the entry's actor from the moment it is stored; a user's is not read.
    let decided = |name: &str| {
        let mut decided = signal(&session, name, 0, None);
        decided.payload = json!({ "action": "allow", "by": "ada" });
        decided
    };
    for (name, actor) in [("loomflow:approval:c1", Some("ada")), ("review", None)] {
        store.push_signal(decided(name)).await.unwrap();
        let read = store.audit(&AuditQuery::thread(&session)).await.unwrap();
        let sent = read.iter().rev().find(|e| e.subject == name).unwrap();
        assert_eq!(sent.actor.as_deref(), actor, "{name}");
    }
}

/// A discarded signal (one the mailbox dropped undelivered) leaves the store with nothing
/// saying it was received, and a discarded signal's idempotency key is still remembered;
/// discarding one that is gone changes nothing.
pub(super) async fn discarded_signals_are_not_audited_as_received(store: &dyn Store) {
    let session = unique("audit-discard");
    let mut sent = Vec::new();
    for (n, key) in [(1, None), (2, Some("k"))] {
        let SignalPush::Stored(seq) = store
            .push_signal(signal(&session, "approve", n, key))
            .await
            .unwrap()
        else {
            panic!("a first send is stored");
        };
        sent.push(seq);
    }
    for &seq in &sent {
        store.discard_signal(&session, seq).await.unwrap();
        store.discard_signal(&session, seq).await.unwrap();
    }
    let pending = store.pending_signals().await.unwrap();
    assert!(
        pending.iter().all(|s| s.session != session),
        "discarded signals are not pending"
    );
    assert_eq!(
        store
            .push_signal(signal(&session, "approve", 3, Some("k")))
            .await
            .unwrap(),
        SignalPush::Duplicate
    );
    let read = store.audit(&AuditQuery::thread(&session)).await.unwrap();
    assert_eq!(
        kinds(&read),
        [AuditKind::SignalSent, AuditKind::SignalSent],
        "nobody received them"
    );
}

/// Entries a checkpoint written outside a claim carries are written with it, in order.
pub(super) async fn entries_ride_with_an_unclaimed_checkpoint(store: &dyn Store) {
    let thread = unique("audit-unclaimed");
    let mut cp = Checkpoint::new(&thread, 1, "", 0, RunStatus::Running, json!({"state": 1}));
    for subject in ["first", "second", "third"] {
        cp.audit
            .push(AuditEntry::new(&thread, AuditKind::Decision, subject, json!({})).run(1));
    }
    store.put_checkpoint(cp).await.unwrap();
    let read = store.audit(&AuditQuery::thread(&thread)).await.unwrap();
    let subjects: Vec<&str> = read.iter().map(|e| e.subject.as_str()).collect();
    assert_eq!(subjects, ["first", "second", "third"]);
    assert!(
        read.iter()
            .all(|e| e.run == 1 && e.kind == AuditKind::Decision)
    );
    let latest = store.latest_checkpoint(&thread, "").await.unwrap().unwrap();
    assert_eq!(latest.state(), &json!(1));
}

/// Entries a checkpoint or a journal entry carries are written with it, and only when the
/// write is: a write under a lost claim leaves no entry behind.
pub(super) async fn entries_ride_with_their_write(store: &dyn Store) {
    let thread = unique("audit-ride");
    store.claim(&thread, "a", LATER, 1).await.unwrap();
    let mut cp = Checkpoint::new(
        &thread,
        1,
        "",
        1,
        RunStatus::Interrupted,
        json!({"state": 1}),
    );
    cp.audit
        .push(AuditEntry::new(&thread, AuditKind::Interrupt, "n#0", json!({ "node": "n" })).run(1));
    let mut decided = AuditEntry::new(&thread, AuditKind::Interrupt, "n#1", json!({})).run(1);
    decided.actor = Some("ada".into());
    cp.audit.push(decided);
    store.put_checkpoint_claimed(cp, "a", LATER).await.unwrap();
    let back = store.latest_checkpoint(&thread, "").await.unwrap().unwrap();
    assert!(back.audit.is_empty(), "entries are not part of the row");
    let key = JournalKey::new(&thread, 1, "", 2, "n", "tool:c1", 0);
    let call = AuditEntry::new(&thread, AuditKind::ToolCall, "refund", json!({})).run(1);
    store
        .put_journal_audited(key.clone(), json!("ok"), vec![call.clone()], "a", LATER)
        .await
        .unwrap();
    assert_eq!(store.get_journal(&key).await.unwrap(), Some(json!("ok")));
    // The same key again (a write repeated, its acknowledgement lost): the first value
    // stands, and the entries that describe it are not added twice.
    store
        .put_journal_audited(key.clone(), json!("again"), vec![call.clone()], "a", LATER)
        .await
        .unwrap();
    assert_eq!(store.get_journal(&key).await.unwrap(), Some(json!("ok")));
    // Another execution takes the run over; the first one's late write is refused whole.
    store.release(&thread, "a").await.unwrap();
    store.claim(&thread, "b", LATER, 1).await.unwrap();
    let late = JournalKey::new(&thread, 1, "", 3, "n", "tool:c2", 0);
    assert!(
        store
            .put_journal_audited(late.clone(), json!("late"), vec![call], "a", LATER)
            .await
            .is_err()
    );
    let mut stale = Checkpoint::new(&thread, 1, "", 4, RunStatus::Running, json!({}));
    stale
        .audit
        .push(AuditEntry::new(&thread, AuditKind::Interrupt, "n#9", json!({})).run(1));
    assert!(
        store
            .put_checkpoint_claimed(stale, "a", LATER)
            .await
            .is_err()
    );
    let read = store.audit(&AuditQuery::thread(&thread)).await.unwrap();
    assert_eq!(
        kinds(&read),
        [
            AuditKind::Interrupt,
            AuditKind::Interrupt,
            AuditKind::ToolCall
        ],
        "in the order written, nothing of the refused writes"
    );
    assert_eq!(read[0].subject, "n#0");
    assert_eq!(read[0].detail, json!({ "node": "n" }));
    assert_eq!(read[1].subject, "n#1");
    assert_eq!(read[1].actor.as_deref(), Some("ada"));
    assert_eq!(read[1].detail, json!({}));
    store.release(&thread, "b").await.unwrap();
}

/// Pruning deletes the entries older than the cut-off and keeps the rest.
pub(super) async fn old_entries_are_pruned(store: &dyn Store) {
    let thread = unique("audit-prune");
    store
        .append_audit(vec![
            AuditEntry::new(&thread, AuditKind::Resume, "n#0", json!({})).at_ms(10),
            AuditEntry::new(&thread, AuditKind::Resume, "n#1", json!({})).at_ms(LATER),
        ])
        .await
        .unwrap();
    assert!(store.prune_audit(11).await.unwrap() >= 1);
    let read = store.audit(&AuditQuery::thread(&thread)).await.unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].subject, "n#1");
}
