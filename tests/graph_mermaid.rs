//! Mermaid rendering: structure checks here, and a parse by the real mermaid.js when it is
//! installed (`.ci/mermaid/install.sh`; `.ci/run` always installs it).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::Command;

use loomflow::prelude::*;

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct S {
    n: u32,
    log: Vec<String>,
}

fn nasty_names() -> CompiledGraph<S> {
    let names = [
        "end",
        "graph",
        "style",
        "say \"hi\"",
        "naïve 日本語 ✓",
        "a <b> & c # d",
        "pipe | [x] {y} ;",
        "`tick` 50%",
        "two\nlines",
        "set direction LR",
        "subgraph",
    ];
    let mut graph = Graph::new("nasty");
    for name in names {
        graph = graph.node_sync(name, |s: &mut S| s.n += 1);
    }
    graph = graph.edge(START, names[0]);
    for pair in names.windows(2) {
        graph = graph.edge(pair[0], pair[1]);
    }
    graph
        .branch(names[names.len() - 1], ["end", END], |s: &S| {
            if s.n > 100 { END } else { "end" }
        })
        .compile()
        .unwrap()
}

fn with_subgraph_and_join() -> CompiledGraph<S> {
    let inner = Graph::new("inner graph")
        .node_sync("inner a", |s: &mut S| s.n += 1)
        .node_sync("end", |s: &mut S| s.n += 1)
        .edge(START, "inner a")
        .edge("inner a", "end")
        .edge("end", END)
        .compile()
        .unwrap();
    Graph::new("outer")
        .node_sync("left", |s: &mut S| s.log.push("l".into()))
        .node_sync("right", |s: &mut S| s.log.push("r".into()))
        .subgraph(
            "sub \"graph\" direction TB",
            inner,
            Clone::clone,
            |s: &mut S, t: S| *s = t,
        )
        .edge(START, "left")
        .edge(START, "right")
        .join(["left", "right"], "sub \"graph\" direction TB")
        .edge("sub \"graph\" direction TB", END)
        .reducer("log", Reducer::append())
        .compile()
        .unwrap()
}

#[test]
fn names_only_appear_escaped_inside_quoted_labels() {
    let text = nasty_names().to_mermaid();
    assert!(text.starts_with("flowchart TD\n"));
    assert!(text.contains(r#"n0["end"]"#), "{text}");
    assert!(text.contains(r#"n3["say #quot;hi#quot;"]"#), "{text}");
    assert!(
        text.contains(r#"n5["a #lt;b#gt; #amp; c #35; d"]"#),
        "{text}"
    );
    assert!(text.contains(r#"n8["two<br/>lines"]"#), "{text}");
    assert!(text.contains(r#"n9["set #100;irection LR"]"#), "{text}");
    assert!(
        text.contains(r#"n10 -.->|"end"| n0"#),
        "branch edges are dashed and labelled: {text}"
    );
    assert!(text.contains(r#"n10 -.->|"END"| __end__"#), "{text}");
    assert!(
        text.contains("__start__ --> n0"),
        "plain edges are solid: {text}"
    );
}

#[test]
fn subgraphs_become_blocks_and_joins_become_circles() {
    let text = with_subgraph_and_join().to_mermaid();
    assert!(
        text.contains("subgraph n2 [\"sub #quot;graph#quot; #100;irection TB\"]"),
        "{text}"
    );
    assert!(text.contains("n2_n0[\"inner a\"]"), "{text}");
    assert!(text.contains("n2___start__ --> n2_n0"), "{text}");
    assert!(text.contains("join0((\"join\"))"), "{text}");
    assert!(
        text.contains("n0 --> join0") && text.contains("n1 --> join0"),
        "{text}"
    );
    assert!(text.contains("join0 --> n2"), "{text}");
}

#[tokio::test]
async fn the_rendered_graphs_also_run() {
    let rt = Runtime::in_memory();
    let s = with_subgraph_and_join()
        .invoke(&rt, "t", S::default())
        .await
        .unwrap()
        .completed()
        .unwrap();
    assert_eq!(s.log, ["l", "r"]);
    assert_eq!(s.n, 2);
}

/// Writes the diagrams for `.ci/run` (and parses them here when the parser is installed).
#[test]
fn diagrams_parse_in_real_mermaid() {
    let dir = std::env::var_os("LOOMFLOW_MERMAID_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mermaid"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).unwrap();
    let files = [
        ("test_nasty_names.mmd", nasty_names().to_mermaid()),
        (
            "test_subgraph_join.mmd",
            with_subgraph_and_join().to_mermaid(),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).unwrap();
    }

    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let checker = root.join(".ci/mermaid/check.mjs");
    if !root.join(".ci/mermaid/node_modules/mermaid").exists() {
        println!("skipped: mermaid.js parse (run .ci/mermaid/install.sh to enable)");
        return;
    }
    let paths: Vec<PathBuf> = files.iter().map(|(name, _)| dir.join(name)).collect();
    let output = Command::new("node")
        .arg(&checker)
        .args(&paths)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "mermaid.js rejected a diagram:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Waits for a person.
#[node]
async fn waits(state: &mut S, ctx: &Context) -> loomflow::Result<()> {
    let n: u32 = ctx.wait_for_signal("go").await?;
    state.n = n;
    Ok(())
}

#[node]
async fn asks(state: &mut S, ctx: &Context) -> loomflow::Result<()> {
    state.n = ctx.interrupt("how many?")?;
    Ok(())
}

#[test]
fn nodes_that_wait_for_the_outside_world_are_marked() {
    assert_eq!(Node::<S>::markers(&waits), ["waits for signal"]);
    assert_eq!(Node::<S>::markers(&asks), ["may interrupt"]);
    let text = Graph::new("m")
        .node(waits)
        .node(asks)
        .edge(START, "waits")
        .edge("waits", "asks")
        .edge("asks", END)
        .compile()
        .unwrap()
        .to_mermaid();
    assert!(
        text.contains(r#"n0{{"waits<br/>waits for signal"}}:::waits"#),
        "{text}"
    );
    assert!(
        text.contains(r#"n1{{"asks<br/>may interrupt"}}:::waits"#),
        "{text}"
    );
    assert!(text.contains("classDef waits"), "{text}");
}

/// The description a run stores of `graph`, which `loomflow graph THREAD` draws from.
async fn stored_description(graph: &CompiledGraph<S>) -> Vec<String> {
    let runtime = Runtime::in_memory();
    graph.invoke(&runtime, "t", S::default()).await.unwrap();
    let checkpoints = runtime.list_checkpoints("t").await.unwrap();
    let lines = checkpoints
        .iter()
        .find_map(|cp| cp.body.get("graph_description")?.as_array().cloned())
        .expect("a stored description");
    lines
        .iter()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect()
}

/// A diagram drawn from a stored description keeps the edges of nodes whose names hold
/// what the description separates names with, and of a node named `END`.
#[tokio::test]
async fn a_diagram_from_a_stored_description_keeps_every_edge_whatever_the_names() {
    let graph = Graph::new("g")
        .node_sync("draft -> review", |s: &mut S| s.n += 1)
        .node_sync("END", |s: &mut S| s.n += 1)
        .node_sync("a (b)", |s: &mut S| s.n += 1)
        .edge(START, "draft -> review")
        .edge("draft -> review", "END")
        .branch("END", ["a (b)", END], |_: &S| "a (b)")
        .edge("a (b)", END)
        .compile()
        .unwrap();
    let description = stored_description(&graph).await;
    let text = loomflow::graph::mermaid::from_description(&description, &["END"]);
    for edge in [
        "__start__ --> n0",
        "n0 --> n1",
        r#"n1 -.->|"a (b)"| n2"#,
        "n2 --> __end__",
        r#"n1["END"]:::current"#,
    ] {
        assert!(
            text.contains(edge),
            "{edge} missing:\n{description:?}\n{text}"
        );
    }
    assert!(!text.contains("n0 --> __end__"), "{text}");

    // An edge to a node named END and one to the graph's end are different graphs: their
    // descriptions, and so their fingerprints, differ.
    let ending = |work_to: &str| {
        Graph::new("g")
            .node_sync("work", |s: &mut S| s.n += 1)
            .node_sync("END", |s: &mut S| s.n += 1)
            .edge(START, "work")
            .edge(START, "END")
            .edge("work", work_to)
            .edge("END", END)
            .compile()
            .unwrap()
    };
    assert_ne!(ending(END).fingerprint(), ending("END").fingerprint());
}
