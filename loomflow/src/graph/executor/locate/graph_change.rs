//! The check that a run carries on with the graph that wrote its checkpoint.

use super::Stored;
use crate::graph::compiled::CompiledInner;
use crate::graph::error::RunError;
use crate::graph::executor::Result;
use crate::graph::executor::checkpoint::Snapshot;
use crate::graph::identity;
use crate::runtime::Runtime;

/// Refuses a checkpoint written by a graph of another structure, naming what changed (from
/// the description its run kept; a checkpoint from before fingerprints, or a caller who
/// allowed the change, is let through).
///
/// Takes the checkpoint by reference: the future then keeps no copy of it, and a checkpoint
/// of the same graph is let through without waiting on anything.
pub(super) async fn check_graph<S>(
    g: &CompiledInner<S>,
    thread: &str,
    runtime: &Runtime,
    cp: &Stored<S>,
    allow_graph_change: bool,
) -> Result<()> {
    let Some(recorded) = cp.snapshot.graph.as_deref().filter(|_| !allow_graph_change) else {
        return Ok(());
    };
    if *recorded == *g.fingerprint {
        return Ok(());
    }
    let mut before = cp.snapshot.graph_description.clone();
    if before.is_none() {
        for earlier in runtime.store().list_checkpoints(thread).await? {
            if earlier.run != cp.run || !earlier.namespace.is_empty() {
                continue;
            }
            let earlier = Snapshot::decode(earlier.body, thread)?;
            if earlier.graph.as_deref() == Some(recorded) && earlier.graph_description.is_some() {
                before = earlier.graph_description;
                break;
            }
        }
    }
    let changes = match before {
        Some(before) => {
            // Recorded before subgraphs were fingerprinted without their edge order: compared
            // with the graph described as it then would have been.
            let as_declared = g
                .has_subgraphs
                .then(|| identity::describe_as_declared(&g.shape));
            let mut forms = std::iter::once(&g.description).chain(as_declared.as_ref());
            // Edges declared in another order: the same graph to a run.
            if forms.any(|now| identity::same_but_for_edge_order(&before, now)) {
                return Ok(());
            }
            // What changed, from the form that shares most facts with the recorded one.
            let shared = |now: &Vec<String>| now.iter().filter(|l| before.contains(l)).count();
            let now = match &as_declared {
                Some(old) if shared(old) > shared(&g.description) => old,
                _ => &g.description,
            };
            identity::changes(&before, now)
        }
        None => vec![format!("structure {recorded} is now {}", g.fingerprint)],
    };
    // A change, unless it is another graph's run (a thread the caller mixed up): said so,
    // not as a change of this graph, whose way past would run its nodes over the other's
    // run. A graph renamed, its structure the same to a run, was let through above.
    // Boxed: the run's future keeps no room for a read made only on the way to an error.
    let other = Box::pin(async {
        let store = runtime.store();
        let Some(written) = store.get_checkpoint(thread, cp.id).await? else {
            return Ok(None);
        };
        // Named in the checkpoint when it describes its graph; a top-level one's run row
        // names the graph too (a subgraph's names its parent).
        let name = match written.graph_name() {
            Some(name) => Some(name.to_owned()),
            None if written.namespace.is_empty() => {
                store.get_run(thread).await?.and_then(|row| row.graph)
            }
            None => None,
        };
        Ok::<_, crate::runtime::StoreError>(name.filter(|name| **name != *g.name))
    })
    .await?;
    if let Some(recorded) = other {
        return Err(RunError::OtherGraph {
            thread: thread.to_owned(),
            graph: g.name.to_string(),
            recorded,
        });
    }
    // The run stands at a node this graph no longer has: no way past runs it, so the
    // change's way past (`allow_graph_change`) is not offered.
    if let super::StoredNext::Names(next) = &cp.next
        && let Some(gone) = next.iter().find(|name| g.node_index(name).is_none())
    {
        return Err(RunError::CheckpointMismatch {
            thread: thread.to_owned(),
            graph: g.name.to_string(),
            node: gone.clone(),
        });
    }
    Err(RunError::GraphChanged {
        thread: thread.to_owned(),
        graph: g.name.to_string(),
        changes,
    })
}
