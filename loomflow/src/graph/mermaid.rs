//! Rendering a graph's shape as a Mermaid flowchart.
//!
//! Node ids are generated (`n0`, `n3_1`, `j0`), never taken from node names, so any name
//! renders: names only appear inside quoted labels, escaped with Mermaid's entity codes.

use std::fmt::Write as _;

use petgraph::visit::EdgeRef;

use crate::graph::State;
use crate::graph::compiled::CompiledGraph;
use crate::graph::identity::{Description, Named};
use crate::graph::shape::GraphShape;
use crate::graph::topology::{Link, Vertex};
use crate::graph::{END, START};

impl<S: State> CompiledGraph<S> {
    /// Renders the graph as a Mermaid flowchart.
    ///
    /// `START` and `END` are stadiums; plain edges are solid; branch edges are dashed and
    /// labelled with their route; joins are small circles; subgraphs are `subgraph` blocks;
    /// `#[node]` functions whose body calls `.interrupt(..)` or `.wait_for_signal(..)` are
    /// marked as waiting for the outside world (found by reading the body, so a wait made
    /// in a helper it calls, or `ctx.sleep(..).or_suspend()`, is not marked).
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// let graph = Graph::new("g")
    ///     .node_sync("end", |n: &mut u32| *n += 1)
    ///     .edge(START, "end")
    ///     .edge("end", END)
    ///     .compile()?;
    /// let text = graph.to_mermaid();
    /// assert!(text.starts_with("flowchart TD"));
    /// assert!(text.contains(r#"n0["end"]"#));
    /// # Ok::<(), loomflow::Error>(())
    /// ```
    pub fn to_mermaid(&self) -> String {
        to_mermaid(self.shape())
    }
}

/// Renders any [`GraphShape`] as a Mermaid flowchart.
pub fn to_mermaid(shape: &GraphShape) -> String {
    let mut out = String::from("flowchart TD\n");
    render_body(&mut out, shape, "", 1);
    if has_markers(shape) {
        out.push_str("    classDef waits stroke-dasharray: 5 3\n");
    }
    out
}

fn has_markers(shape: &GraphShape) -> bool {
    shape
        .nodes
        .iter()
        .any(|n| !n.markers.is_empty() || n.subgraph.as_deref().is_some_and(has_markers))
}

fn render_body(out: &mut String, shape: &GraphShape, prefix: &str, depth: usize) {
    let pad = "    ".repeat(depth);
    let start_id = format!("{prefix}__start__");
    let end_id = format!("{prefix}__end__");
    let _ = writeln!(out, "{pad}{start_id}([START])");
    for (i, node) in shape.nodes.iter().enumerate() {
        let id = node_id(prefix, i);
        let mut label = node.name.clone();
        for marker in &node.markers {
            label.push('\n');
            label.push_str(marker);
        }
        if let Some(child) = &node.subgraph {
            let _ = writeln!(out, "{pad}subgraph {id} [\"{}\"]", escape(&label));
            let _ = writeln!(out, "{pad}    direction TB");
            render_body(out, child, &format!("{id}_"), depth + 1);
            let _ = writeln!(out, "{pad}end");
        } else if node.markers.is_empty() {
            let _ = writeln!(out, "{pad}{id}[\"{}\"]", escape(&label));
        } else {
            let _ = writeln!(out, "{pad}{id}{{{{\"{}\"}}}}:::waits", escape(&label));
        }
    }
    let _ = writeln!(out, "{pad}{end_id}([END])");

    // Everything below is read from the topology: edges in declaration order, then joins.
    let topology = &shape.topology;
    let vertex_id = |v: Vertex| match v {
        Vertex::Start => start_id.clone(),
        Vertex::End => end_id.clone(),
        Vertex::Node(i) => node_id(prefix, i),
        Vertex::Join(j) => format!("{prefix}join{j}"),
    };
    for edge in topology.edges() {
        let from = vertex_id(topology.vertex(edge.source()));
        let to = vertex_id(topology.vertex(edge.target()));
        match edge.weight() {
            Link::Plain => {
                let _ = writeln!(out, "{pad}{from} --> {to}");
            }
            Link::Branch { label } => {
                let label = display_name(label);
                let text = escape(label);
                if text.trim().is_empty() {
                    let _ = writeln!(out, "{pad}{from} -.-> {to}");
                } else {
                    let _ = writeln!(out, "{pad}{from} -.->|\"{text}\"| {to}");
                }
            }
            // Drawn with their joins, below.
            Link::JoinSource { .. } | Link::JoinTarget => {}
        }
    }
    for j in 0..topology.join_sizes().len() {
        let id = vertex_id(Vertex::Join(j));
        let _ = writeln!(out, "{pad}{id}((\"join\"))");
        for source in topology.join_sources(j) {
            let _ = writeln!(out, "{pad}{} --> {id}", node_id(prefix, source));
        }
        let _ = writeln!(out, "{pad}{id} --> {}", vertex_id(topology.join_target(j)));
    }
}

/// Renders a graph from the description a run stores (its checkpoints' `graph_description`:
/// one fact a line, `node a`, `subgraph s <fingerprint>`, `edge a -> b`,
/// `branch a -> b (label)`, `join a + b -> c`), with the nodes in `current` highlighted:
/// where a run stands, drawn without the graph's code.
///
/// Node ids are those [`to_mermaid`] gives (`n0`, `n1`, … in declaration order). A subgraph
/// is drawn as one node (its inside is not in the description). Lines it does not know are
/// skipped.
///
/// # Examples
///
/// ```
/// use loomflow::graph::mermaid::from_description;
///
/// let description = ["node ask", "node pay", "edge START -> ask", "edge ask -> pay", "edge pay -> END"];
/// let text = from_description(&description, &["pay"]);
/// assert!(text.contains(r#"n1["pay"]:::current"#));
/// assert!(text.contains("n0 --> n1"));
/// ```
pub fn from_description<L: AsRef<str>>(description: &[L], current: &[&str]) -> String {
    let read = Description::read(description);
    let id = |named: Named| match named {
        Named::Start => "__start__".to_owned(),
        Named::End => "__end__".to_owned(),
        Named::Node(i) => node_id("", i),
    };
    let mut out = String::from("flowchart TD\n    __start__([START])\n");
    for (i, (name, subgraph)) in read.nodes.iter().enumerate() {
        let class = if current.contains(&name.as_str()) {
            ":::current"
        } else {
            ""
        };
        let label = escape(name);
        let shape = if *subgraph {
            format!("[[\"{label}\"]]")
        } else {
            format!("[\"{label}\"]")
        };
        let _ = writeln!(out, "    {}{shape}{class}", node_id("", i));
    }
    out.push_str("    __end__([END])\n");
    for &(from, to) in &read.edges {
        let _ = writeln!(out, "    {} --> {}", id(from), id(to));
    }
    for (from, to, label) in &read.branches {
        let label = escape(display_name(label));
        let _ = writeln!(out, "    {} -.->|\"{label}\"| {}", id(*from), id(*to));
    }
    for (j, (sources, target)) in read.joins.iter().enumerate() {
        let join = format!("join{j}");
        let _ = writeln!(out, "    {join}((\"join\"))");
        for &source in sources {
            let _ = writeln!(out, "    {} --> {join}", id(source));
        }
        let _ = writeln!(out, "    {join} --> {}", id(*target));
    }
    if !current.is_empty() {
        out.push_str("    classDef current stroke-width:4px,stroke:#d97706\n");
    }
    out
}

fn node_id(prefix: &str, index: usize) -> String {
    format!("{prefix}n{index}")
}

fn display_name(name: &str) -> &str {
    match name {
        START => "START",
        END => "END",
        other => other,
    }
}

/// Escapes text for a quoted Mermaid label, using Mermaid's entity codes.
pub(crate) fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '#' => escaped.push_str("#35;"),
            '"' => escaped.push_str("#quot;"),
            '&' => escaped.push_str("#amp;"),
            '<' => escaped.push_str("#lt;"),
            '>' => escaped.push_str("#gt;"),
            '`' => escaped.push_str("#96;"),
            '%' => escaped.push_str("#37;"),
            '\r' => {}
            '\n' => escaped.push_str("<br/>"),
            other => escaped.push(other),
        }
    }
    if escaped.trim().is_empty() {
        " ".to_owned()
    } else {
        break_direction(escaped)
    }
}

/// `text` with the `d` of each `direction` (in any case) written as an entity: Mermaid's
/// lexer reads a whole line holding `direction TB` (or `LR`, …) as a direction statement
/// before it sees quotes, and a node, an edge or a subgraph's header on it was lost.
fn break_direction(text: String) -> String {
    const WORD: &str = "direction";
    let lower = text.to_ascii_lowercase();
    if !lower.contains(WORD) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 8);
    let mut at = 0;
    while let Some(found) = lower[at..].find(WORD) {
        let start = at + found;
        out.push_str(&text[at..start]);
        // The first byte of the word is an ASCII `d` or `D`.
        out.push_str(if text[start..].starts_with('D') {
            "#68;"
        } else {
            "#100;"
        });
        at = start + 1;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::{escape, from_description};

    #[test]
    fn a_stored_description_renders_with_where_the_run_stands() {
        let description = [
            "node ask manager",
            "subgraph team 0123456789abcdef",
            "node pay",
            "edge START -> ask manager",
            "branch ask manager -> team (team)",
            "branch ask manager -> END (__end__)",
            "join team + pay -> END",
            "something new",
        ];
        let text = from_description(&description, &["team"]);
        assert_eq!(
            text,
            "flowchart TD\n    __start__([START])\n    n0[\"ask manager\"]\n    \
             n1[[\"team\"]]:::current\n    n2[\"pay\"]\n    __end__([END])\n    \
             __start__ --> n0\n    n0 -.->|\"team\"| n1\n    n0 -.->|\"END\"| __end__\n    \
             join0((\"join\"))\n    n1 --> join0\n    n2 --> join0\n    join0 --> __end__\n    \
             classDef current stroke-width:4px,stroke:#d97706\n"
        );
    }

    #[test]
    fn escapes_every_character_mermaid_misreads() {
        assert_eq!(
            escape(r#"say "hi" #1 <b> & `x` 5%"#),
            "say #quot;hi#quot; #35;1 #lt;b#gt; #amp; #96;x#96; 5#37;"
        );
        assert_eq!(escape("a\nb"), "a<br/>b");
        assert_eq!(escape(""), " ");
        assert_eq!(escape("日本語 end"), "日本語 end");
    }
}
