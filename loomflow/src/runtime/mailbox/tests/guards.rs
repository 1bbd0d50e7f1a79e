//! Which guard's exit keeps a session's leftovers, and in what order.

use serde_json::json;

use super::mailbox;

/// A run's guard (which keeps leftovers) leaving before a user's guard on the same session:
/// what the run did not receive is kept as pending when the user's guard leaves last, for
/// the run's next execution, rather than discarded with it.
#[test]
fn a_runs_leftovers_are_kept_whichever_guard_leaves_last() {
    let mb = mailbox();
    let user = mb.open_session("s");
    let run = mb.open_shared_session(std::sync::Arc::from("s"));
    run.keep_leftovers();
    mb.signal("s", "b", json!("for the run")).unwrap();
    drop(run);
    drop(user);
    assert_eq!(
        mb.pending_sessions(),
        1,
        "the run's leftovers went back to pending"
    );
    assert_eq!(mb.queued("s", "b"), 1);

    // Without a run's guard, the last exit discards them, as before.
    let user = mb.open_session("t");
    mb.signal("t", "b", json!("nobody's")).unwrap();
    drop(user);
    assert_eq!(mb.queued("t", "b"), 0);
}

/// Payloads given back at the head of a queue (no place in send order) keep their order
/// when the session retires to pending: before its fix each went to the front in turn,
/// and they came out reversed.
#[test]
fn payloads_given_back_keep_their_order_when_the_session_retires() {
    let mb = mailbox();
    let wait = mb.wait("s", "other", None);
    mb.requeue_front("s", "n", json!("b")).unwrap();
    mb.requeue_front("s", "n", json!("a")).unwrap();
    drop(wait);
    assert_eq!(mb.queued("s", "n"), 2);
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("a")));
    assert_eq!(mb.poll("s", "n").unwrap(), Some(json!("b")));
}
