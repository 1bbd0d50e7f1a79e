//! What a node may fail with: loomflow's error, any of its subsystems' (the memory's, the
//! graph's, a model's), a message, an error of the user's own through `NodeError`, and any
//! other error type (`std::io::Error`, one's own with no conversion written).
use loomflow::memory::MemoryError;
use loomflow::model::ModelError;
use loomflow::prelude::*;

#[derive(Clone, Default, Serialize, Deserialize)]
struct S {
    n: u32,
}

#[node]
async fn recalls(state: &mut S) -> Result<(), MemoryError> {
    state.n += 1;
    Ok(())
}

#[node]
async fn builds(state: &mut S) -> Result<(), loomflow::GraphError> {
    state.n += 1;
    Ok(())
}

#[node]
async fn asks(state: &mut S) -> Result<(), ModelError> {
    state.n += 1;
    Ok(())
}

#[node]
async fn says(state: &mut S) -> Result<(), String> {
    state.n += 1;
    Ok(())
}

#[derive(Debug)]
struct Mine;

impl std::fmt::Display for Mine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mine")
    }
}

impl std::error::Error for Mine {}

impl From<Mine> for loomflow::graph::NodeError {
    fn from(error: Mine) -> Self {
        loomflow::graph::NodeError::failed(error)
    }
}

#[node]
async fn mine(state: &mut S) -> Result<(), Mine> {
    state.n += 1;
    Ok(())
}

#[node]
async fn reads(state: &mut S) -> std::io::Result<()> {
    state.n += 1;
    Ok(())
}

#[derive(Debug)]
struct Theirs;

impl std::fmt::Display for Theirs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("theirs")
    }
}

impl std::error::Error for Theirs {}

#[node]
async fn theirs(state: &mut S) -> Result<(), Theirs> {
    state.n += 1;
    Ok(())
}

fn main() {
    let _graph = Graph::new("g")
        .node(recalls)
        .node(builds)
        .node(asks)
        .node(says)
        .node(mine)
        .edge(START, "recalls")
        .edge("recalls", "builds")
        .edge("builds", "asks")
        .edge("asks", "says")
        .edge("says", "mine")
        .node(reads)
        .node(theirs)
        .edge("mine", "reads")
        .edge("reads", "theirs")
        .edge("theirs", END)
        .compile()
        .unwrap();
}
