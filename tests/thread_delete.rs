//! Deleting a thread, as a user meets it: a suspended run goes with its checkpoints and the
//! signals waiting for it, and the name starts afresh; a run that executes holds its thread,
//! here or in another runtime on the same store; a deleted run is not carried on by a
//! worker. On the memory store, SQLite, and PostgreSQL (skipped without `LOOMFLOW_PG_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

#[path = "support/asker.rs"]
mod asker;
#[path = "support/faulty_store.rs"]
mod faulty_store;
#[path = "support/held_run.rs"]
mod held_run;
#[path = "support/postgres.rs"]
mod postgres;
#[path = "support/waiting.rs"]
mod waiting;

use asker::asker;
use faulty_store::FaultyStore;
use held_run::HeldRun;
use loomflow::RuntimeError;
use loomflow::prelude::*;
use loomflow::runtime::{AuditKind, PostgresStore, RunState, SqliteStore, StoreError};
use waiting::worker;

/// A suspended run is deleted with its checkpoints and the signal sent to it meanwhile; its
/// audit entries stay; the name then starts afresh, as run 1, and gets no old signal.
async fn a_suspended_thread_is_deleted_and_its_name_starts_afresh(runtime: &Runtime) {
    let graph = asker::<u32>();
    let out = graph.invoke(runtime, "t", None).await.unwrap();
    assert_eq!(out.interrupts().len(), 1);
    runtime.signal("t", "go", 7u32).await.unwrap();
    runtime.signal("u", "go", 8u32).await.unwrap();
    graph.invoke(runtime, "u", None).await.unwrap();

    let deleted = runtime.delete_thread("t").await.unwrap();
    assert_eq!(deleted.checkpoints, 2, "its input and its suspension");
    assert_eq!(deleted.journal_entries, 0);
    assert_eq!(
        deleted.signals, 1,
        "the signal sent to it, kept by the store or by the process"
    );
    assert!(runtime.list_checkpoints("t").await.unwrap().is_empty());
    assert!(runtime.pending_interrupts("t").await.unwrap().is_empty());
    let gone = runtime.run("t").await;
    assert!(
        matches!(gone, Err(RuntimeError::UnknownRun { .. })),
        "{gone:?}"
    );
    assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), None);
    let resumed = graph.resume(runtime, "t", 3).await;
    assert!(resumed.is_err(), "nothing to resume: {resumed:?}");
    let audit = runtime.audit("t").await.unwrap();
    assert!(
        audit.iter().any(|e| e.kind == AuditKind::Interrupt),
        "the audit log keeps what happened"
    );

    let out = graph.invoke(runtime, "t", None).await.unwrap();
    assert_eq!(out.interrupts().len(), 1);
    assert_eq!(runtime.run("t").await.unwrap().record.run, 1, "run 1 again");
    let done = graph.resume(runtime, "t", 5).await.unwrap();
    assert_eq!(done.completed().unwrap(), Some(5));

    // The thread beside it keeps everything.
    assert_eq!(runtime.pending_interrupts("u").await.unwrap().len(), 1);
    assert_eq!(runtime.poll_signal::<u32>("u", "go").unwrap(), Some(8));
    assert_eq!(runtime.list_checkpoints("u").await.unwrap().len(), 2);
}

/// A run executing its thread holds it: the delete is refused, naming the thread, and
/// deletes nothing; once the run is over, the delete goes through.
async fn a_thread_whose_run_executes_is_not_deleted(runtime: &Runtime, other: &Runtime) {
    let held = HeldRun::start(runtime, "busy", 1).await;
    for deleting in [runtime, other] {
        match deleting.delete_thread("busy").await {
            Err(RuntimeError::Busy { thread, .. }) => assert_eq!(thread, "busy"),
            refused => panic!("deleted a thread whose run executes: {refused:?}"),
        }
    }
    assert_eq!(held.finish().await, 2);
    assert!(!runtime.list_checkpoints("busy").await.unwrap().is_empty());
    let deleted = other.delete_thread("busy").await.unwrap();
    assert_eq!(deleted.checkpoints, 2, "its input and its step");
    assert!(runtime.list_checkpoints("busy").await.unwrap().is_empty());
}

/// A run suspended for a signal and deleted is not carried on by a worker when the signal
/// comes: there is no run left to carry on.
async fn a_deleted_run_is_not_carried_on(runtime: &Runtime) {
    runtime.submit("waiting", "w", None::<u32>).await.unwrap();
    assert_eq!(worker(runtime).run_until_idle().await.unwrap(), 1);
    runtime.delete_thread("w").await.unwrap();
    runtime.signal("w", "go", 1u32).await.unwrap();
    assert_eq!(worker(runtime).run_until_idle().await.unwrap(), 0);
    assert!(runtime.list_checkpoints("w").await.unwrap().is_empty());
}

/// A deleted thread's checkpoint ids are not handed out again, even when it held the newest:
/// a checkpoint id kept from before the delete never names a checkpoint written after it.
async fn a_deleted_threads_checkpoint_ids_are_not_handed_out_again(runtime: &Runtime) {
    let graph = asker::<u32>();
    graph.invoke(runtime, "ids", None).await.unwrap();
    let before = runtime.list_checkpoints("ids").await.unwrap();
    let newest_before = before.iter().map(|c| c.id).max().unwrap();
    runtime.delete_thread("ids").await.unwrap();

    graph.invoke(runtime, "ids", None).await.unwrap();
    let after = runtime.list_checkpoints("ids").await.unwrap();
    assert!(
        after.iter().all(|c| c.id > newest_before),
        "ids {:?} written after the delete, {newest_before} the newest before it",
        after.iter().map(|c| c.id).collect::<Vec<_>>()
    );
}

/// A store that cannot delete threads refuses, naming the thread, and leaves its run as it
/// was: a run suspended on a wait of a day is let go, not made runnable at once, so no worker
/// carries it on before its signal comes.
#[tokio::test]
async fn a_store_that_cannot_delete_leaves_the_run_as_it_was() {
    let db = loomflow_tests::TempDb::new("thread-delete-unsupported");
    let (store, _faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    runtime.submit("waiting", "w", None::<u32>).await.unwrap();
    assert_eq!(worker(&runtime).run_until_idle().await.unwrap(), 1);

    match runtime.delete_thread("w").await {
        Err(RuntimeError::Store(StoreError::Unsupported { operation, thread })) => {
            assert_eq!((operation, thread.as_str()), ("delete_thread", "w"));
        }
        other => panic!("a store without deletes: {other:?}"),
    }
    let row = runtime.store().get_run("w").await.unwrap().unwrap();
    assert_eq!(row.state, RunState::Waiting);
    assert_eq!(row.lease_owner, None, "the delete let go of its claim");
    assert_eq!(
        worker(&runtime).run_until_idle().await.unwrap(),
        0,
        "nothing to carry on before the signal"
    );
    runtime.signal("w", "go", 3u32).await.unwrap();
    assert_eq!(worker(&runtime).run_until_idle().await.unwrap(), 1);
    let record = runtime.run("w").await.unwrap().record;
    assert_eq!(record.state, RunState::Completed);
    assert_eq!(runtime.list_checkpoints("w").await.unwrap().len(), 3);
}

/// A signal sent once the store has deleted the thread, before the delete returned, is for
/// the name's next run: the delete forgets only what this process queued before it began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_sent_while_the_thread_is_deleted_is_kept_for_its_next_run() {
    let db = loomflow_tests::TempDb::new("thread-delete-racing-signal");
    let (store, faults) = FaultyStore::new(SqliteStore::open(db.path()).unwrap());
    let runtime = Runtime::builder().store(store).build();
    let graph = asker::<u32>();
    let out = graph.invoke(&runtime, "t", None).await.unwrap();
    assert_eq!(out.interrupts().len(), 1);
    runtime.signal("t", "go", 1u32).await.unwrap();

    let (deleted, go) = faults.hold_next_delete();
    let deleting = tokio::spawn({
        let runtime = runtime.clone();
        async move { runtime.delete_thread("t").await }
    });
    deleted.await.unwrap();
    runtime.signal("t", "go", 2u32).await.unwrap();
    go.send(()).unwrap();
    let gone = deleting.await.unwrap().unwrap();
    assert_eq!(gone.signals, 1, "the signal sent before the delete");

    assert_eq!(
        runtime.poll_signal::<u32>("t", "go").unwrap(),
        Some(2),
        "the signal sent during the delete waits for the name's next run"
    );
    assert_eq!(runtime.poll_signal::<u32>("t", "go").unwrap(), None);
}

#[tokio::test]
async fn on_the_memory_store() {
    let runtime = Runtime::in_memory();
    a_suspended_thread_is_deleted_and_its_name_starts_afresh(&runtime).await;
    a_thread_whose_run_executes_is_not_deleted(&runtime, &runtime.clone()).await;
    a_deleted_run_is_not_carried_on(&runtime).await;
    a_deleted_threads_checkpoint_ids_are_not_handed_out_again(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let db = loomflow_tests::TempDb::new("thread-delete");
    let open = || {
        Runtime::builder()
            .store(SqliteStore::open(db.path()).unwrap())
            .build()
    };
    let runtime = open();
    a_suspended_thread_is_deleted_and_its_name_starts_afresh(&runtime).await;
    a_thread_whose_run_executes_is_not_deleted(&runtime, &open()).await;
    a_deleted_run_is_not_carried_on(&runtime).await;
    a_deleted_threads_checkpoint_ids_are_not_handed_out_again(&runtime).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let Some(db) = postgres::TempPgDb::create("thread delete").await else {
        return;
    };
    let open = async || {
        let store = PostgresStore::connect(&db.url).await.unwrap();
        Runtime::builder().store(store).build()
    };
    let runtime = open().await;
    a_suspended_thread_is_deleted_and_its_name_starts_afresh(&runtime).await;
    a_thread_whose_run_executes_is_not_deleted(&runtime, &open().await).await;
    a_deleted_run_is_not_carried_on(&runtime).await;
    a_deleted_threads_checkpoint_ids_are_not_handed_out_again(&runtime).await;
}
