//! A blank thread (an id built from a missing value) is refused by every way a run or a
//! signal names one, as is a signal name with a control character: all anonymous callers
//! would otherwise share one thread, and one agent conversation.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use loomflow::prelude::*;
use loomflow::runtime::SignalError;
use loomflow::{RunError, RuntimeError};

fn count() -> CompiledGraph<u64> {
    Graph::new("count")
        .node_sync("inc", |n: &mut u64| *n += 1)
        .edge(START, "inc")
        .edge("inc", END)
        .compile()
        .unwrap()
}

fn is_empty_thread(error: &RunError) -> bool {
    matches!(error, RunError::Runtime(e) if matches!(**e, RuntimeError::EmptyThread))
}

#[tokio::test]
async fn a_blank_thread_is_refused_by_runs_submits_forks_and_signals() {
    let runtime = Runtime::in_memory();
    for thread in ["", "  "] {
        let ran = count().invoke(&runtime, thread, 1).await.unwrap_err();
        assert!(is_empty_thread(&ran), "{ran:?}");
        let recovered = count().recover(&runtime, thread).await.unwrap_err();
        assert!(is_empty_thread(&recovered), "{recovered:?}");
        let submitted = runtime.submit("count", thread, 1).await.unwrap_err();
        assert!(
            matches!(submitted, RuntimeError::EmptyThread),
            "{submitted:?}"
        );
        let sent = runtime.signal(thread, "go", true).await.unwrap_err();
        assert!(
            matches!(sent, RuntimeError::Signal(SignalError::EmptySession { .. })),
            "{sent:?}"
        );
    }
    count().invoke(&runtime, "t", 1).await.unwrap();
    let first = runtime.list_checkpoints("t").await.unwrap()[0].id;
    let forked = runtime.fork("t", first, "").await.unwrap_err();
    assert!(matches!(forked, RuntimeError::EmptyThread), "{forked:?}");
    // Nothing was written for a blank thread: "t" is the only run.
    let runs = runtime.runs(&Default::default()).await.unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
}

#[tokio::test]
async fn a_signal_name_with_a_control_character_is_refused() {
    let runtime = Runtime::in_memory();
    for name in ["review\n", "re\tview", "\u{1b}[31mreview"] {
        let sent = runtime.signal("t", name, true).await.unwrap_err();
        assert!(
            matches!(
                sent,
                RuntimeError::Signal(SignalError::ControlInName { .. })
            ),
            "{sent:?}"
        );
    }
}
