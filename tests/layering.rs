//! The layering contract of DESIGN §2: lower layers never name upper ones.
//!
//! ```text
//!  architecture/  agent/          (LLM layer)
//!  memory/                        (long-term memory: uses tools and models)
//!  tool/  model/                  (beside each other)
//!  graph/  context/               (the engine)
//!  runtime/ (mailbox, store)      (knows nothing of graphs)
//! ```
//!
//! The facade `crate::Error`/`crate::Result` (in `error.rs`) collects the LLM layers'
//! errors, so the engine must not name it either.

#![allow(clippy::unwrap_used)] // test code

use std::path::{Path, PathBuf};

/// What the engine (graph/ and context/) must not name: the LLM layers and the facade.
const ABOVE_THE_ENGINE: &[&str] = &[
    "worker",
    "Worker",
    "tool",
    "model",
    "memory",
    "agent",
    "architecture",
    "error",
    "Error",
    "Result",
];

/// What each lower layer must not name, as `crate::` paths: the runtime also knows nothing
/// of the engine above it.
const RULES: &[(&str, &[&str], &[&str])] = &[
    ("graph", ABOVE_THE_ENGINE, &[]),
    ("context", ABOVE_THE_ENGINE, &[]),
    ("runtime", ABOVE_THE_ENGINE, &["graph", "context"]),
    ("memory", &["agent", "architecture"], &[]),
    ("tool", &["agent", "architecture", "memory"], &[]),
    ("model", &["agent", "architecture", "memory", "tool"], &[]),
];

fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../loomflow/src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The `crate::` paths a line names in code (comments are skipped), as their first segment;
/// `crate::{a, b::c}` names `a` and `b`.
fn named_by(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let first = item.trim().split("::").next().unwrap_or("").trim();
                if !first.is_empty() {
                    names.push(first.to_owned());
                }
            }
        } else {
            let first: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(first);
        }
        rest = after;
    }
    names
}

fn violations(layer: &str, forbidden: &[&str], also: &[&str]) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(&source_dir().join(layer), &mut files);
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for (number, line) in text.lines().enumerate() {
            for name in named_by(line) {
                if forbidden.contains(&name.as_str()) || also.contains(&name.as_str()) {
                    found.push(format!(
                        "{}:{}: {layer}/ names crate::{name}: {}",
                        file.display(),
                        number + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn lower_layers_never_name_upper_ones() {
    let found: Vec<String> = RULES
        .iter()
        .flat_map(|(layer, forbidden, also)| violations(layer, forbidden, also))
        .collect();
    assert!(found.is_empty(), "layering broken:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_every_form_of_path() {
    assert_eq!(named_by("use crate::tool::ToolHost;"), ["tool"]);
    assert_eq!(
        named_by("use crate::{Error, graph::Node};"),
        ["Error", "graph"]
    );
    assert_eq!(named_by("let e = crate::Error::msg(x);"), ["Error"]);
    assert!(named_by("// see crate::tool").is_empty());
    assert!(named_by("/// [`x`](crate::tool::X)").is_empty());
}
