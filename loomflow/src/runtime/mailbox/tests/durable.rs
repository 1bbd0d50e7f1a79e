//! Durable entries: the store's sequence number rides beside the payload, and every stored
//! signal let go undelivered is reported so that the runtime removes it from the store.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::FutureExt;
use serde_json::json;

use super::{mailbox, ready};
use crate::runtime::mailbox::*;

/// (session, seq) of the stored signals a mailbox reported as dropped.
type Reported = Arc<Mutex<Vec<(String, u64)>>>;

/// A mailbox that records the stored signals it reports as dropped.
fn reporting(config: MailboxConfig) -> (Mailbox, Reported) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hook: DropHook = {
        let seen = Arc::clone(&seen);
        Box::new(move |dropped: Vec<Dropped>| {
            let mut seen = seen.lock().unwrap();
            seen.extend(dropped.into_iter().map(|d| (d.session.to_string(), d.seq)));
        })
    };
    (Mailbox::with_drop_hook(config, hook), seen)
}

fn reported(seen: &Mutex<Vec<(String, u64)>>) -> Vec<(String, u64)> {
    std::mem::take(&mut *seen.lock().unwrap())
}

#[test]
fn a_stored_entry_carries_its_seq_beside_the_untouched_payload() {
    let mb = mailbox();
    let _open = mb.open_session("s");
    let payload = json!({ "__loomflow_signal_seq": "the user's own field", "payload": 1 });
    mb.signal_stored("s", "n", payload.clone(), 7, 0, Duration::ZERO);
    let entry = mb.poll_in("s", "n", Scope::User).unwrap().unwrap();
    assert_eq!(entry.seq, Some(7));
    assert_eq!(entry.payload, payload, "the payload is never rewritten");

    // Given back, it keeps its seq and its send time.
    let sent_at = entry.sent_at;
    mb.requeue_front_in("s", "n", entry, Scope::User).unwrap();
    let wait = mb.wait_in("s", "n", None, Scope::User);
    let entry = wait.now_or_never().unwrap().unwrap();
    assert_eq!((entry.seq, entry.sent_at), (Some(7), sent_at));

    // The public API still speaks plain payloads.
    mb.signal_stored("s", "n", json!(2), 8, 0, Duration::ZERO);
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(2)));
}

#[test]
fn stored_signals_dropped_by_the_lru_bound_are_reported() {
    let (mb, seen) = reporting(MailboxConfig::default().max_pending_signal_sessions(Some(1)));
    mb.signal_stored("a", "n", json!(1), 1, 0, Duration::ZERO);
    mb.signal_stored("a", "m", json!(2), 2, 0, Duration::ZERO);
    mb.signal("a", "n", json!("in memory")).unwrap();
    assert!(reported(&seen).is_empty());
    mb.signal_stored("b", "n", json!(3), 3, 0, Duration::ZERO);
    let mut dropped = reported(&seen);
    dropped.sort();
    assert_eq!(
        dropped,
        [("a".to_owned(), 1), ("a".to_owned(), 2)],
        "only stored signals are reported, every one of them"
    );
    assert_eq!(mb.queued("b", "n"), 1);
}

#[test]
fn a_disabled_pending_mailbox_reports_what_it_drops() {
    let (mb, seen) = reporting(MailboxConfig::default().max_pending_signal_sessions(Some(0)));
    assert_eq!(
        mb.signal_stored("s", "n", json!(1), 4, 0, Duration::ZERO),
        Delivery::Dropped
    );
    assert_eq!(reported(&seen), [("s".to_owned(), 4)]);
}

/// A signal a disabled pending mailbox drops says so, and its idempotency key is not
/// remembered: the retry, once the session is open, is delivered. Before its fix the send
/// said `Pending`, and the retry was a `Duplicate` that delivered nothing.
#[test]
fn a_signal_dropped_on_arrival_says_so_and_its_retry_delivers() {
    let mb = Mailbox::new(MailboxConfig::default().max_pending_signal_sessions(Some(0)));
    let send = || {
        mb.send("s", "n", json!(1), Some("k"), Scope::User, 0)
            .unwrap()
    };
    assert_eq!(send(), Delivery::Dropped);
    let _open = mb.open_session("s");
    assert_eq!(send(), Delivery::Queued);
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!(1)));
}

#[tokio::test(start_paused = true)]
async fn the_ttl_counts_from_the_stored_send_time() {
    let ttl = Duration::from_secs(60);
    let (mb, seen) = reporting(MailboxConfig::default().pending_signal_ttl(Some(ttl)));
    // As after a restart: sent 50 s ago, 10 s left; another already past the TTL.
    mb.signal_stored("s", "n", json!("old"), 1, 0, Duration::from_secs(50));
    mb.signal_stored("s", "n", json!("older"), 2, 0, ttl);
    assert_eq!(reported(&seen), [("s".to_owned(), 2)], "expired on arrival");
    mb.signal_stored("s", "n", json!("new"), 3, 0, Duration::ZERO);
    assert_eq!(mb.queued("s", "n"), 2);

    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        mb.queued("s", "n"),
        1,
        "the old one expired, not 60 s after loading"
    );
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("new")));
    assert_eq!(reported(&seen), [("s".to_owned(), 1)]);
}

#[tokio::test(start_paused = true)]
async fn expired_pending_signals_are_reported_however_they_go() {
    let ttl = Duration::from_secs(60);
    let (mb, seen) = reporting(MailboxConfig::default().pending_signal_ttl(Some(ttl)));
    let age = Duration::from_secs(50);
    mb.signal_stored("opened", "n", json!(1), 1, 0, age);
    mb.signal_stored("waited", "n", json!(2), 2, 0, age);
    mb.signal_stored("swept", "n", json!(3), 3, 0, Duration::ZERO);
    tokio::time::advance(Duration::from_secs(10)).await;

    // The sessions were touched 10 s ago, but two signals were sent a whole TTL ago.
    let _open = mb.open_session("opened");
    assert_eq!(reported(&seen), [("opened".to_owned(), 1)]);
    drop(mb.wait("waited", "n", None));
    assert_eq!(reported(&seen), [("waited".to_owned(), 2)]);

    tokio::time::advance(ttl).await;
    assert_eq!(mb.pending_sessions(), 0);
    assert_eq!(reported(&seen), [("swept".to_owned(), 3)]);
}

#[tokio::test(start_paused = true)]
async fn leftovers_returned_to_pending_keep_their_send_time() {
    let ttl = Duration::from_secs(60);
    let (mb, seen) = reporting(MailboxConfig::default().pending_signal_ttl(Some(ttl)));
    let wait = mb.wait("s", "n", Some(ttl));
    mb.signal_stored("s", "other", json!("left"), 9, 0, Duration::ZERO);
    assert!(wait.await.is_err(), "timed out after a whole TTL");
    assert_eq!(mb.queued("s", "other"), 0);
    assert_eq!(reported(&seen), [("s".to_owned(), 9)]);
}

#[test]
fn signals_discarded_with_the_last_guard_are_reported() {
    let (mb, seen) = reporting(MailboxConfig::default());
    let open = mb.open_session("s");
    let again = open.clone();
    mb.signal_stored("s", "n", json!(1), 5, 0, Duration::ZERO);
    mb.signal_stored("s", "m", json!(2), 6, 0, Duration::ZERO);
    mb.signal("s", "n", json!("in memory")).unwrap();
    drop(open);
    assert!(reported(&seen).is_empty(), "still open");
    drop(again);
    let mut dropped = reported(&seen);
    dropped.sort();
    assert_eq!(dropped, [("s".to_owned(), 5), ("s".to_owned(), 6)]);
}

#[test]
fn delivered_and_returned_signals_are_not_reported() {
    let (mb, seen) = reporting(MailboxConfig::default());
    let wait = mb.wait("s", "n", None);
    mb.signal_stored("s", "n", json!(1), 1, 0, Duration::ZERO);
    mb.signal_stored("s", "n", json!(2), 2, 0, Duration::ZERO);
    // The waiter's payload is handed over; the leftover goes back to pending.
    assert_eq!(ready(wait).unwrap(), json!(1));
    assert_eq!(mb.queued("s", "n"), 1);
    assert!(reported(&seen).is_empty());
}
