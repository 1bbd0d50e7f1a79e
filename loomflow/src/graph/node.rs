//! The node abstraction: a named async body over `&mut S` and `&Context`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::context::Context;
use crate::graph::shape::GraphShape;
use crate::{Error, Result};

/// A boxed, `Send` future borrowing for `'a`: what node bodies return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A step of a graph over state `S`.
///
/// Usually written with [`#[node]`](crate::node) on an async fn, or with
/// [`Graph::node_fn`](crate::Graph::node_fn) from a closure. Implement it by hand for nodes
/// that carry configuration.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// struct AddOne;
///
/// impl Node<u64> for AddOne {
///     fn name(&self) -> &str {
///         "add_one"
///     }
///     fn run<'a>(&'a self, state: &'a mut u64, _ctx: &'a Context) -> BoxFuture<'a, loomflow::Result<()>> {
///         Box::pin(async move {
///             *state += 1;
///             Ok(())
///         })
///     }
/// }
///
/// let graph = Graph::new("count").node(AddOne).edge(START, "add_one").edge("add_one", END);
/// assert!(graph.compile().is_ok());
/// ```
pub trait Node<S>: Send + Sync + 'static {
    /// The node's name, unique within its graph.
    fn name(&self) -> &str;

    /// A human description (the doc comment for `#[node]` functions).
    fn description(&self) -> Option<&str> {
        None
    }

    /// Runs the node: it may change `state` and talk to the world through `ctx`.
    fn run<'a>(&'a self, state: &'a mut S, ctx: &'a Context) -> BoxFuture<'a, Result<()>>;

    /// The shape of the graph this node wraps, when it is a subgraph (used by Mermaid).
    fn subgraph_shape(&self) -> Option<Arc<GraphShape>> {
        None
    }

    /// Markers shown in diagrams, such as `"waits for signal"`.
    fn markers(&self) -> &[&'static str] {
        &[]
    }
}

/// What a node function may return: `()` or a `Result<(), E>` whose error converts into
/// [`Error`]. Lets `#[node]` accept a user's own result alias.
#[diagnostic::on_unimplemented(
    message = "a node must return `()` or `Result<(), E>` where `E: Into<loomflow::Error>`, not `{Self}`",
    label = "this node's return type"
)]
pub trait IntoNodeResult {
    /// Converts into the executor's result type.
    fn into_node_result(self) -> Result<()>;
}

impl IntoNodeResult for () {
    fn into_node_result(self) -> Result<()> {
        Ok(())
    }
}

impl<E: Into<Error>> IntoNodeResult for std::result::Result<(), E> {
    fn into_node_result(self) -> Result<()> {
        self.map_err(Into::into)
    }
}

/// A node built from a closure; see [`Graph::node_fn`](crate::Graph::node_fn).
pub(crate) struct FnNode<F> {
    pub(crate) name: String,
    pub(crate) func: F,
}

impl<S, F> Node<S> for FnNode<F>
where
    S: 'static,
    F: for<'a> Fn(&'a mut S, &'a Context) -> BoxFuture<'a, Result<()>> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn run<'a>(&'a self, state: &'a mut S, ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        (self.func)(state, ctx)
    }
}

/// A node built from a synchronous closure; see [`Graph::node_sync`](crate::Graph::node_sync).
pub(crate) struct SyncFnNode<F> {
    pub(crate) name: String,
    pub(crate) func: F,
}

impl<S, F, R> Node<S> for SyncFnNode<F>
where
    S: Send + 'static,
    F: Fn(&mut S) -> R + Send + Sync + 'static,
    R: IntoNodeResult,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn run<'a>(&'a self, state: &'a mut S, _ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        let result = (self.func)(state).into_node_result();
        Box::pin(std::future::ready(result))
    }
}
