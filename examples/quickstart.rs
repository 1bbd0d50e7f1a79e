//! A first graph: a fan-out with a join, a branch, and a loop, on the in-memory runtime.
//!
//! ```text
//! cargo run --example quickstart              # run it and print the final state
//! cargo run --example quickstart -- --mermaid # print only its Mermaid diagram
//! ```

use loomflow::prelude::*;

const HELP: &str = "\
quickstart: a first graph, a fan-out with a join, a branch and a loop, run on the in-memory
runtime; prints the article it writes and how many supersteps it took.

Usage: cargo run --example quickstart [-- OPTIONS]

Options:
  --mermaid   print the graph's Mermaid diagram instead of running it
  -h, --help  print this help
";

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
struct Article {
    topic: String,
    facts: Vec<String>,
    outline: Vec<String>,
    draft: String,
    revisions: u32,
    approved: bool,
}

/// Gather facts about the topic.
#[node]
async fn research(state: &mut Article, ctx: &Context) -> loomflow::Result<()> {
    state
        .facts
        .push(format!("{} is older than it looks", state.topic));
    state.facts.push(format!("{} has a fan club", state.topic));
    ctx.emit("found", json!({ "facts": state.facts.len() }));
    Ok(())
}

/// Sketch the outline, in parallel with the research.
#[node]
async fn outline(state: &mut Article) -> loomflow::Result<()> {
    state.outline = vec!["hook".into(), "facts".into(), "ending".into()];
    Ok(())
}

/// Write a draft once both the research and the outline are in.
#[node]
async fn write(state: &mut Article) -> loomflow::Result<()> {
    state.draft = format!(
        "{}: {} ({} sections)",
        state.topic,
        state.facts.join("; "),
        state.outline.len()
    );
    Ok(())
}

/// Review the draft; it takes two revisions to pass.
#[node]
async fn review(state: &mut Article) -> loomflow::Result<()> {
    state.approved = state.revisions >= 2;
    Ok(())
}

/// Revise the draft and send it back to review.
#[node]
async fn revise(state: &mut Article) -> loomflow::Result<()> {
    state.revisions += 1;
    state.draft.push_str(" [revised]");
    Ok(())
}

fn build() -> loomflow::Result<CompiledGraph<Article>> {
    Ok(Graph::new("article")
        .node(research)
        .node(outline)
        .node(write)
        .node(review)
        .node(revise)
        .edge(START, "research")
        .edge(START, "outline")
        .join(["research", "outline"], "write")
        .edge("write", "review")
        .branch("review", ["revise", END], |a: &Article| {
            if a.approved { END } else { "revise" }
        })
        .edge("revise", "review")
        .compile()?)
}

#[tokio::main]
async fn main() -> loomflow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{HELP}");
        return Ok(());
    }
    let graph = build()?;
    if std::env::args().any(|a| a == "--mermaid") {
        print!("{}", graph.to_mermaid());
        return Ok(());
    }

    let runtime = Runtime::in_memory();
    let input = Article {
        topic: "the paperclip".into(),
        ..Article::default()
    };
    let article = graph
        .invoke(&runtime, "article-1", input)
        .await?
        .completed()?;
    println!(
        "{}",
        serde_json::to_string_pretty(&article).map_err(Error::custom)?
    );
    // The first checkpoint holds the input; each superstep writes one after it.
    let checkpoints = runtime.list_checkpoints("article-1").await?;
    let steps = checkpoints.last().map_or(0, |cp| cp.step);
    println!("finished in {steps} supersteps");
    Ok(())
}
