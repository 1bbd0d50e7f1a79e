//! The delivery contract, one test (or a few) per rule.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::{Value, json};

use super::*;

mod durable;
mod guards;

fn mailbox() -> Mailbox {
    Mailbox::new(MailboxConfig::default())
}

/// Resolves a wait that must already be ready.
fn ready(wait: Wait) -> Result<Value, SignalError> {
    match wait.now_or_never() {
        Some(result) => result,
        None => panic!("wait was expected to resolve at once"),
    }
}

// 1. FIFO per (session, name).

#[test]
fn payloads_come_out_oldest_first_through_poll_and_wait() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    for i in 0..4 {
        mb.signal("s", "n", json!(i)).unwrap();
    }
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(0)));
    assert_eq!(ready(mb.wait("s", "n", None)).unwrap(), json!(1));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(2)));
    assert_eq!(ready(mb.wait("s", "n", None)).unwrap(), json!(3));
    assert_eq!(mb.poll("s", "n").unwrap(), None);
}

// 2. One waiter per payload, oldest waiter first.

#[tokio::test]
async fn parked_waiters_are_served_oldest_first_one_payload_each() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let first = mb.wait("s", "n", None);
    let second = mb.wait("s", "n", None);
    let third = mb.wait("s", "n", None);
    assert_eq!(mb.waiting("s", "n"), 3);

    assert_eq!(
        mb.signal_with("s", "n", json!("a"), SignalOptions::default())
            .unwrap(),
        Delivery::Woke
    );
    mb.signal("s", "n", json!("b")).unwrap();
    assert_eq!(first.await.unwrap(), json!("a"));
    assert_eq!(second.await.unwrap(), json!("b"));
    assert_eq!(mb.waiting("s", "n"), 1);
    assert_eq!(mb.queued("s", "n"), 0);
    drop(third);
    assert_eq!(mb.waiting("s", "n"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_waiters_and_senders_never_lose_or_duplicate() {
    const N: usize = 2_000;
    let mb = mailbox();
    let _open = mb.open_session("s");
    let waiters: Vec<_> = (0..N)
        .map(|_| {
            let mb = mb.clone();
            tokio::spawn(async move { mb.wait("s", "n", None).await })
        })
        .collect();
    let senders: Vec<_> = (0..4)
        .map(|t| {
            let mb = mb.clone();
            tokio::spawn(async move {
                for i in 0..N / 4 {
                    mb.signal("s", "n", json!(t * N + i)).unwrap();
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for sender in senders {
        sender.await.unwrap();
    }
    let mut seen = HashSet::new();
    for waiter in waiters {
        let value = waiter.await.unwrap().unwrap();
        assert!(
            seen.insert(value.as_u64().unwrap()),
            "delivered twice: {value}"
        );
    }
    assert_eq!(seen.len(), N);
    assert_eq!(mb.queued("s", "n"), 0);
}

// 3. Queue before wait.

#[test]
fn a_signal_sent_before_the_wait_is_returned_at_once() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    assert_eq!(
        mb.signal_with("s", "n", json!(1), SignalOptions::default())
            .unwrap(),
        Delivery::Queued
    );
    assert_eq!(ready(mb.wait("s", "n", None)).unwrap(), json!(1));
}

// 4. Isolation.

#[test]
fn sessions_and_names_do_not_see_each_others_signals() {
    let mb = mailbox();
    let _a = mb.open_session("a");
    let _b = mb.open_session("b");
    mb.signal("a", "sig", json!("a-sig")).unwrap();
    assert_eq!(mb.poll("b", "sig").unwrap(), None);
    assert_eq!(mb.poll("a", "other").unwrap(), None);
    let mut on_b = mb.wait("b", "sig", None);
    assert!((&mut on_b).now_or_never().is_none());
    assert_eq!(mb.poll("a", "sig").unwrap(), Some(json!("a-sig")));
}

// 5. Cancellation safety.

#[test]
fn a_dropped_waiter_hands_its_payload_to_the_next_waiter() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let first = mb.wait("s", "n", None);
    let second = mb.wait("s", "n", None);
    mb.signal("s", "n", json!("p")).unwrap();
    // `first` was handed "p" but never took it.
    drop(first);
    assert_eq!(ready(second).unwrap(), json!("p"));
}

#[test]
fn a_dropped_waiter_puts_its_payload_back_at_the_head() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let first = mb.wait("s", "n", None);
    mb.signal("s", "n", json!("p")).unwrap();
    mb.signal("s", "n", json!("q")).unwrap();
    drop(first);
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("p")));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("q")));
}

#[test]
fn payloads_given_back_out_of_order_return_to_send_order() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let first = mb.wait("s", "n", None);
    let second = mb.wait("s", "n", None);
    mb.signal("s", "n", json!("p")).unwrap();
    mb.signal("s", "n", json!("q")).unwrap();
    mb.signal("s", "n", json!("r")).unwrap();
    // Both were handed a payload; the later one gives it back first.
    drop(second);
    drop(first);
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("p")));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("q")));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("r")));
}

#[test]
fn entries_taken_and_given_back_in_any_order_return_to_send_order() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    for n in 1..=3 {
        mb.signal("s", "n", json!(n)).unwrap();
    }
    let first = mb.poll_in("s", "n", Scope::User).unwrap().unwrap();
    let second = mb.poll_in("s", "n", Scope::User).unwrap().unwrap();
    // Two receivers give up, the one that took the older payload first.
    mb.requeue_front_in("s", "n", first, Scope::User).unwrap();
    mb.requeue_front_in("s", "n", second, Scope::User).unwrap();
    for n in 1..=3 {
        assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(n)));
    }
}

#[test]
fn a_payload_given_back_after_its_session_closed_goes_to_pending_in_order() {
    let mb = mailbox();
    let wait = mb.wait("s", "n", None);
    // The waiter held the session; handing it "p" releases it, so "q" goes to pending.
    mb.signal("s", "n", json!("p")).unwrap();
    mb.signal("s", "n", json!("q")).unwrap();
    drop(wait);
    assert_eq!(mb.queued("s", "n"), 2);
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("p")));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("q")));
}

#[test]
fn an_unpolled_ready_wait_puts_its_payload_back_when_dropped() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    mb.signal("s", "n", json!("p")).unwrap();
    mb.signal("s", "n", json!("q")).unwrap();
    drop(mb.wait("s", "n", None));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("p")));
}

#[tokio::test]
async fn an_aborted_task_woken_but_not_run_loses_nothing() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let task = tokio::spawn({
        let mb = mb.clone();
        async move { mb.wait("s", "n", None).await }
    });
    while mb.waiting("s", "n") == 0 {
        tokio::task::yield_now().await;
    }
    // On this single-threaded runtime the woken task cannot run before it is aborted.
    assert_eq!(
        mb.signal_with("s", "n", json!("p"), SignalOptions::default())
            .unwrap(),
        Delivery::Woke
    );
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("p")));
}

// 6. Timeout.

#[tokio::test(start_paused = true)]
async fn a_wait_times_out_and_a_later_payload_stays_queued() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let started = tokio::time::Instant::now();
    let err = mb
        .wait("s", "n", Some(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert!(
        matches!(err, SignalError::Timeout { ref name, .. } if name == "n"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "no signal n arrived for session s within 5s"
    );
    assert_eq!(mb.waiting("s", "n"), 0);

    mb.signal("s", "n", json!("late")).unwrap();
    assert_eq!(mb.queued("s", "n"), 1);
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("late")));
}

#[tokio::test(start_paused = true)]
async fn a_payload_arriving_before_the_timeout_wins() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let wait = mb.wait("s", "n", Some(Duration::from_secs(5)));
    let sender = tokio::spawn({
        let mb = mb.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            mb.signal("s", "n", json!("in time")).unwrap();
        }
    });
    assert_eq!(wait.await.unwrap(), json!("in time"));
    sender.await.unwrap();
}

// 7. Pending mailbox.

#[tokio::test]
async fn signals_for_a_closed_session_are_picked_up_when_it_opens() {
    let mb = mailbox();
    assert_eq!(
        mb.signal_with("s", "n", json!(1), SignalOptions::default())
            .unwrap(),
        Delivery::Pending
    );
    mb.signal("s", "n", json!(2)).unwrap();
    assert_eq!(mb.pending_sessions(), 1);
    let _open = mb.open_session("s");
    assert_eq!(mb.pending_sessions(), 0);
    assert_eq!(mb.wait("s", "n", None).await.unwrap(), json!(1));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(2)));
}

#[test]
fn the_least_recently_used_pending_session_is_dropped_first() {
    let mb = Mailbox::new(MailboxConfig::default().max_pending_signal_sessions(Some(2)));
    mb.signal("a", "n", json!("a")).unwrap();
    mb.signal("b", "n", json!("b")).unwrap();
    // Using "a" again makes "b" the least recently used.
    mb.signal("a", "n", json!("a2")).unwrap();
    mb.signal("c", "n", json!("c")).unwrap();
    assert_eq!(mb.pending_sessions(), 2);
    assert_eq!(mb.queued("b", "n"), 0);
    assert_eq!(mb.queued("a", "n"), 2);
    assert_eq!(mb.queued("c", "n"), 1);
}

#[test]
fn an_unbounded_pending_mailbox_keeps_every_session() {
    let mb = Mailbox::new(MailboxConfig::default().max_pending_signal_sessions(None));
    for i in 0..20_000 {
        mb.signal(&format!("s{i}"), "n", json!(i)).unwrap();
    }
    assert_eq!(mb.pending_sessions(), 20_000);
}

#[tokio::test(start_paused = true)]
async fn pending_signals_older_than_the_ttl_are_dropped() {
    let ttl = Duration::from_secs(60);
    let mb = Mailbox::new(MailboxConfig::default().pending_signal_ttl(Some(ttl)));
    mb.signal("old", "n", json!("old")).unwrap();
    mb.signal("mixed", "n", json!("expires")).unwrap();
    tokio::time::advance(Duration::from_secs(30)).await;
    mb.signal("mixed", "n", json!("stays")).unwrap();
    tokio::time::advance(Duration::from_secs(30)).await;

    assert_eq!(mb.pending_sessions(), 1, "old expired as a whole");
    assert_eq!(mb.queued("old", "n"), 0);
    assert_eq!(mb.queued("mixed", "n"), 1);
    let _open = mb.open_session("mixed");
    assert_eq!(mb.poll("mixed", "n").unwrap(), Some(json!("stays")));
    assert_eq!(mb.poll("mixed", "n").unwrap(), None);
}

// 8. Reference-counted sessions.

#[test]
fn the_mailbox_goes_with_the_last_guard() {
    let mb = mailbox();
    let outer = mb.open_session("s");
    let inner = mb.open_session("s");
    let cloned = inner.clone();
    mb.signal("s", "n", json!(1)).unwrap();
    drop(inner);
    drop(outer);
    assert!(mb.is_open("s"));
    assert_eq!(mb.queued("s", "n"), 1);
    drop(cloned);
    assert!(!mb.is_open("s"));
    assert_eq!(mb.queued("s", "n"), 0);
    assert_eq!(
        mb.pending_sessions(),
        0,
        "undelivered signals are discarded, not pending"
    );
}

#[tokio::test]
async fn a_wait_on_a_closed_session_holds_the_mailbox_and_returns_leftovers() {
    let mb = mailbox();
    let wait = mb.wait("s", "n", None);
    assert!(!mb.is_open("s"));
    assert_eq!(
        mb.signal_with("s", "other", json!("left"), SignalOptions::default())
            .unwrap(),
        Delivery::Queued,
        "the waiter holds the session's mailbox"
    );
    assert_eq!(mb.pending_sessions(), 0);
    mb.signal("s", "n", json!("mine")).unwrap();
    assert_eq!(wait.await.unwrap(), json!("mine"));
    assert_eq!(mb.pending_sessions(), 1, "leftovers went back to pending");
    assert_eq!(mb.queued("s", "other"), 1);
    let _open = mb.open_session("s");
    assert_eq!(mb.poll("s", "other").unwrap(), Some(json!("left")));
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_wait_on_a_closed_session_returns_leftovers() {
    let mb = mailbox();
    mb.signal("s", "other", json!("early")).unwrap();
    let wait = mb.wait("s", "n", Some(Duration::from_secs(1)));
    assert_eq!(mb.pending_sessions(), 0, "the waiter holds the mailbox");
    mb.signal("s", "other", json!("while waiting")).unwrap();
    assert!(wait.await.is_err());
    assert_eq!(mb.pending_sessions(), 1);
    assert_eq!(mb.poll("s", "other").unwrap(), Some(json!("early")));
    assert_eq!(mb.poll("s", "other").unwrap(), Some(json!("while waiting")));
}

#[test]
fn a_waiter_keeps_the_mailbox_after_the_last_guard_drops() {
    let mb = mailbox();
    let guard = mb.open_session("s");
    let wait = mb.wait("s", "n", None);
    drop(guard);
    mb.signal("s", "n", json!(1)).unwrap();
    assert_eq!(ready(wait).unwrap(), json!(1));
}

// 9. Idempotency.

#[tokio::test(start_paused = true)]
async fn a_repeated_key_delivers_once_while_remembered() {
    let ttl = Duration::from_secs(60);
    let mb = Mailbox::new(
        MailboxConfig::default()
            .pending_signal_ttl(Some(ttl))
            .idempotency_key_ttl(Some(ttl)),
    );
    let _open = mb.open_session("s");
    let key = || SignalOptions::default().idempotency_key("review-1");
    assert_eq!(
        mb.signal_with("s", "n", json!(1), key()).unwrap(),
        Delivery::Queued
    );
    assert_eq!(
        mb.signal_with("s", "n", json!(1), key()).unwrap(),
        Delivery::Duplicate
    );
    // The key is scoped to (session, name).
    assert_eq!(
        mb.signal_with("s", "m", json!(1), key()).unwrap(),
        Delivery::Queued
    );
    assert_eq!(
        mb.signal_with("t", "n", json!(1), key()).unwrap(),
        Delivery::Pending
    );
    assert_eq!(mb.queued("s", "n"), 1);

    tokio::time::advance(ttl).await;
    assert_eq!(
        mb.signal_with("s", "n", json!(2), key()).unwrap(),
        Delivery::Queued
    );
    assert_eq!(mb.queued("s", "n"), 2);
}

#[tokio::test(start_paused = true)]
async fn keys_are_remembered_at_least_as_long_as_pending_signals() {
    let mb = Mailbox::new(
        MailboxConfig::default()
            .pending_signal_ttl(Some(Duration::from_secs(100)))
            .idempotency_key_ttl(Some(Duration::from_secs(1))),
    );
    let key = || SignalOptions::default().idempotency_key("k");
    assert_eq!(
        mb.signal_with("s", "n", json!(1), key()).unwrap(),
        Delivery::Pending
    );
    tokio::time::advance(Duration::from_secs(50)).await;
    assert_eq!(
        mb.signal_with("s", "n", json!(1), key()).unwrap(),
        Delivery::Duplicate
    );
    assert_eq!(mb.queued("s", "n"), 1);
}

// 10. Reserved and empty names, oversized payloads.

#[test]
fn reserved_and_empty_names_are_refused_to_user_code() {
    let mb = mailbox();
    let reserved = "loomflow:approval:call-1";
    let is_reserved = |err: SignalError| matches!(err, SignalError::ReservedName { name, .. } if name == reserved);
    assert!(is_reserved(mb.signal("s", reserved, json!(1)).unwrap_err()));
    assert!(is_reserved(mb.poll("s", reserved).unwrap_err()));
    assert!(is_reserved(
        ready(mb.wait("s", reserved, None)).unwrap_err()
    ));
    assert!(is_reserved(
        mb.requeue_front("s", reserved, json!(1)).unwrap_err()
    ));
    assert_eq!(
        mb.signal("s", reserved, json!(1)).unwrap_err().to_string(),
        "signal name loomflow:approval:call-1 for session s is reserved: names starting with `loomflow:` belong to loomflow"
    );

    let err = mb.signal("s", "", json!(1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "signal name for session s is empty (or only spaces)"
    );
    assert!(matches!(
        ready(mb.wait("s", "", None)),
        Err(SignalError::EmptyName { .. })
    ));
    assert!(matches!(
        mb.poll("s", ""),
        Err(SignalError::EmptyName { .. })
    ));
    assert_eq!(mb.pending_sessions(), 0, "nothing refused was stored");
}

#[test]
fn the_framework_may_use_reserved_names() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let name = "loomflow:approval:call-1";
    let wait = mb.wait_in("s", name, None, Scope::Framework);
    let delivery = mb
        .send(
            "s",
            name,
            json!({ "action": "allow" }),
            None,
            Scope::Framework,
            0,
        )
        .unwrap();
    assert_eq!(delivery, Delivery::Woke);
    assert_eq!(
        ready(Wait::new(wait)).unwrap(),
        json!({ "action": "allow" })
    );
    mb.requeue_front_in("s", name, Entry::new(json!(2), 0), Scope::Framework)
        .unwrap();
    let polled = mb.poll_in("s", name, Scope::Framework).unwrap();
    assert_eq!(polled.map(|entry| entry.payload), Some(json!(2)));
    assert!(matches!(
        mb.send("s", "", json!(1), None, Scope::Framework, 0),
        Err(SignalError::EmptyName { .. })
    ));
}

#[test]
fn oversized_payloads_are_refused_with_their_size_and_the_limit() {
    let mb = Mailbox::new(MailboxConfig::default().max_payload_bytes(10));
    let _open = mb.open_session("s");
    // `"0123456789"` is 12 bytes of JSON.
    let err = mb.signal("s", "n", json!("0123456789")).unwrap_err();
    assert_eq!(
        err,
        SignalError::PayloadTooLarge {
            session: "s".into(),
            name: "n".into(),
            size: 12,
            limit: 10
        }
    );
    assert_eq!(
        err.to_string(),
        "payload of signal n for session s is 12 bytes, over the limit of 10 bytes"
    );
    mb.signal("s", "n", json!("01234567")).unwrap();
    assert_eq!(mb.queued("s", "n"), 1);
}

#[test]
fn the_default_limit_is_one_mebibyte() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let big = "x".repeat(1024 * 1024);
    assert!(matches!(
        mb.signal("s", "n", json!(big)),
        Err(SignalError::PayloadTooLarge { size, limit: 1_048_576, .. }) if size == 1_048_578
    ));
}

// requeue_front, for the typed layer.

#[test]
fn requeue_front_restores_a_payload_ahead_of_the_rest() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    mb.signal("s", "n", json!(1)).unwrap();
    mb.signal("s", "n", json!(2)).unwrap();
    let taken = mb.poll("s", "n").unwrap().unwrap();
    mb.requeue_front("s", "n", taken).unwrap();
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(1)));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(2)));
}

#[test]
fn requeue_front_hands_to_a_parked_waiter() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let wait = mb.wait("s", "n", None);
    mb.requeue_front("s", "n", json!("back")).unwrap();
    assert_eq!(ready(wait).unwrap(), json!("back"));
}

#[test]
fn a_mailbox_is_shareable() {
    let _shared: Arc<Mailbox> = Arc::new(mailbox());
}
