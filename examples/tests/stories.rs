//! The examples' stories told more than once, as a user trying them out would: each run on
//! a file the one before left behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod support;
use support::example_binary;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("loomflow-story-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    Ok(dir)
}

fn run(example: &str, dir: &Path, args: &[&str]) -> Result<Output, String> {
    Command::new(example_binary(example)?)
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("{example} {args:?}: {e}"))
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `refund_approval`'s stages, tried on the file its whole story left: the second refund
/// of the order is decided and paid, not taken for a repeat of the first one's decision.
#[test]
fn refund_approval_stages_after_the_whole_story() -> Result<(), String> {
    let dir = scratch("refund-approval")?;
    let story = run("refund_approval", &dir, &["--db", "r.db"])?;
    assert!(story.status.success(), "{}", stdout(&story));
    for stage in ["ask", "decide", "resume"] {
        let out = run("refund_approval", &dir, &["--db", "r.db", "--stage", stage])?;
        let text = stdout(&out);
        assert!(out.status.success(), "--stage {stage}: {text}");
        assert!(!text.contains("Duplicate"), "--stage {stage}: {text}");
        if stage == "resume" {
            assert!(text.contains("run refund-ord_1042: completed"), "{text}");
        }
    }
    std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())
}

/// `refund_service approve` for an order with no refund is refused, and stores nothing
/// that would approve the order's next refund unseen.
#[test]
fn refund_service_refuses_an_approval_for_no_refund() -> Result<(), String> {
    let dir = scratch("refund-service")?;
    let out = run(
        "refund_service",
        &dir,
        &["approve", "--db", "s.db", "ord_77"],
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert!(stderr.contains("no refund for order ord_77"), "{stderr}");
    std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())
}
