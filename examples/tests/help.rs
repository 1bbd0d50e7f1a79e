//! Every example answers `--help` and `-h` with what it does and its flags, exits 0, and runs
//! nothing.
//!
//! The examples are run as built by `cargo test` (which builds every example of the package
//! before running its tests), from the profile directory this test binary lives in.

use std::process::Command;

mod support;
use support::example_binary;

/// Each example, and the flags its help must list besides `--help`.
const EXAMPLES: &[(&str, &[&str])] = &[
    ("quickstart", &["--mermaid"]),
    ("signals", &["--mermaid"]),
    (
        "refund_approval",
        &["--stage", "--reject", "--db", "--mermaid"],
    ),
    ("refund_service", &["--db", "--reject", "--mermaid"]),
    ("tools", &[]),
    ("research_agent", &["--base-url", "--model", "--mermaid"]),
    ("supervisor", &["--mermaid"]),
    ("observability", &[]),
    (
        "chat",
        &[
            "--model",
            "--base-url",
            "--anthropic",
            "--system",
            "--max-tokens",
            "--api-key",
        ],
    ),
];

#[test]
fn every_example_answers_help_without_running() -> Result<(), String> {
    for (name, flags) in EXAMPLES {
        let binary = example_binary(name)?;
        let mut answers = Vec::new();
        for help in ["--help", "-h"] {
            // A fresh, empty directory: an example that ran would leave files (refund_approval's
            // database) or print its story.
            let dir = std::env::temp_dir()
                .join(format!("loomflow-help-{name}{help}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let output = Command::new(&binary)
                .arg(help)
                .current_dir(&dir)
                .output()
                .map_err(|e| format!("{name}: {e}"))?;
            let left_behind = std::fs::read_dir(&dir).map_err(|e| e.to_string())?.count();
            std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;

            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                output.status.success(),
                "{name} {help}: {}\n{stderr}",
                output.status
            );
            assert!(stderr.is_empty(), "{name} {help} wrote to stderr: {stderr}");
            assert_eq!(left_behind, 0, "{name} {help} left files behind: it ran");
            assert!(
                stdout.starts_with(&format!("{name}: ")),
                "{name} {help} says what it is:\n{stdout}"
            );
            for flag in flags.iter().chain(&["--help"]) {
                assert!(
                    stdout.contains(flag),
                    "{name} {help} does not list {flag}:\n{stdout}"
                );
            }
            answers.push(stdout);
        }
        assert_eq!(answers[0], answers[1], "{name}: -h and --help differ");
    }
    Ok(())
}

/// `observability` prints the spans a run exported, its audit log and its cost.
#[test]
fn the_observability_example_prints_spans_audit_and_cost() -> Result<(), String> {
    let output = Command::new(example_binary("observability")?)
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    for expected in [
        "invoke_agent support",
        "run support",
        "chat gpt-4o",
        "gen_ai.usage.input_tokens=412",
        "execute_tool lookup_order",
        "gen_ai.tool.call.id=call_1",
        "tool_call lookup_order by customer-88",
        "cost: 942 input + 42 output tokens = $0.002775",
    ] {
        assert!(
            stdout.contains(expected),
            "{expected} missing from:\n{stdout}"
        );
    }
    Ok(())
}
