//! The node abstraction: a named async body over `&mut S` and `&Context`.

use std::sync::Arc;

use crate::context::Context;
use crate::graph::error::RunError;
use crate::graph::shape::GraphShape;
use crate::runtime::{RuntimeError, SignalError, StoreError};

/// A boxed, `Send` future borrowing for `'a`: what node bodies return.
pub use futures_util::future::BoxFuture;

/// Any error, boxed: how the engine carries an error whose type belongs to user code or to
/// a layer above it.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a node's [`run`](Node::run) returns.
pub type NodeResult = std::result::Result<(), NodeError>;

/// How a node ended without finishing: it asked to suspend, or it failed.
///
/// Converts from [`loomflow::Error`](crate::Error) and every subsystem error, and from
/// `String`/`&str`, so `?` works in a hand-written [`Node::run`].
#[derive(Debug)]
#[non_exhaustive]
pub enum NodeError {
    /// The node asked to suspend the run (its `Context` recorded why).
    Suspended {
        /// The node.
        node: String,
    },
    /// The node failed; the error is downcastable to its own type.
    Failed(BoxError),
}

impl NodeError {
    /// Wraps any error as a failure.
    pub fn failed(error: impl Into<BoxError>) -> Self {
        Self::Failed(error.into())
    }
}

impl From<RunError> for NodeError {
    fn from(error: RunError) -> Self {
        match error {
            RunError::Suspended { node } => Self::Suspended { node },
            other => Self::Failed(Box::new(other)),
        }
    }
}

macro_rules! node_error_via_run_error {
    ($($ty:ty),*) => {$(
        impl From<$ty> for NodeError {
            fn from(error: $ty) -> Self {
                Self::from(RunError::from(error))
            }
        }
    )*};
}
node_error_via_run_error!(RuntimeError, StoreError, SignalError);

impl From<String> for NodeError {
    fn from(message: String) -> Self {
        Self::Failed(message.into())
    }
}

impl From<&str> for NodeError {
    fn from(message: &str) -> Self {
        Self::Failed(message.into())
    }
}

impl From<BoxError> for NodeError {
    fn from(error: BoxError) -> Self {
        Self::Failed(error)
    }
}

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
/// use loomflow::graph::NodeResult;
///
/// struct AddOne;
///
/// impl Node<u64> for AddOne {
///     fn name(&self) -> &str {
///         "add_one"
///     }
///     fn run<'a>(&'a self, state: &'a mut u64, _ctx: &'a Context) -> BoxFuture<'a, NodeResult> {
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
    fn run<'a>(&'a self, state: &'a mut S, ctx: &'a Context) -> BoxFuture<'a, NodeResult>;

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
/// [`NodeError`] (`loomflow::Error`, any subsystem error, `String`, `&str`, a [`BoxError`]).
/// Lets `#[node]` accept a user's own result alias. A `#[node]` also takes a `Result<(), E>`
/// whose error is any error type that is `Send + Sync` (an `anyhow::Error`, an
/// `std::io::Error`, one's own): it fails the node with that error.
#[diagnostic::on_unimplemented(
    message = "a node must return `()` or `Result<(), E>` where `E` is an error type (`Into<Box<dyn Error + Send + Sync>>`), not `{Self}`",
    label = "this node's return type",
    note = "`loomflow::Error`, `String`, `&str`, `anyhow::Error` and any `std::error::Error + Send + Sync` convert"
)]
pub trait IntoNodeResult {
    /// Converts into the executor's result type.
    fn into_node_result(self) -> NodeResult;
}

impl IntoNodeResult for () {
    fn into_node_result(self) -> NodeResult {
        Ok(())
    }
}

impl<E: Into<NodeError>> IntoNodeResult for std::result::Result<(), E> {
    fn into_node_result(self) -> NodeResult {
        self.map_err(Into::into)
    }
}

/// What a [`node_sync`](crate::Graph::node_sync) closure may return: `()`, or a
/// `Result<(), E>` whose error is any error type that is `Send + Sync` (`loomflow::Error`,
/// an `anyhow::Error`, an `std::io::Error`, one's own), a `String` or a `&str`, or a
/// [`NodeError`]: the node fails with that error, as it was returned (the failure's
/// `source`; a `#[node]` converts loomflow's own errors instead, keeping a suspension one).
#[diagnostic::on_unimplemented(
    message = "a node_sync closure must return `()` or `Result<(), E>` where `E` is an error type (`Into<Box<dyn Error + Send + Sync>>`), not `{Self}`",
    label = "this closure's return type",
    note = "`loomflow::Error`, `String`, `&str`, `anyhow::Error` and any `std::error::Error + Send + Sync` convert"
)]
pub trait IntoSyncNodeResult {
    /// Converts into the executor's result type.
    fn into_sync_node_result(self) -> NodeResult;
}

impl IntoSyncNodeResult for () {
    fn into_sync_node_result(self) -> NodeResult {
        Ok(())
    }
}

impl<E: Into<BoxError>> IntoSyncNodeResult for std::result::Result<(), E> {
    fn into_sync_node_result(self) -> NodeResult {
        self.map_err(NodeError::failed)
    }
}

impl IntoSyncNodeResult for NodeResult {
    fn into_sync_node_result(self) -> NodeResult {
        self
    }
}

/// What a `#[node]` function's second parameter may be: the [`Context`](crate::Context),
/// under whatever name the function gives it (an import renamed, an alias). The macro hands
/// the context over through it, so that another type there is reported on that type.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the second parameter of a #[node] function must be `&Context`, not `&{Self}`",
    label = "not the node's context",
    note = "the context may go by another name (an import renamed, an alias), not another type"
)]
pub trait NodeContext {
    /// The context, as this type.
    fn from_context(ctx: &crate::Context) -> &Self;
}

impl NodeContext for crate::Context {
    fn from_context(ctx: &crate::Context) -> &Self {
        ctx
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
    F: for<'a> Fn(&'a mut S, &'a Context) -> BoxFuture<'a, NodeResult> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn run<'a>(&'a self, state: &'a mut S, ctx: &'a Context) -> BoxFuture<'a, NodeResult> {
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
    R: IntoSyncNodeResult,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn run<'a>(&'a self, state: &'a mut S, _ctx: &'a Context) -> BoxFuture<'a, NodeResult> {
        match (self.func)(state).into_sync_node_result() {
            // A sync node that finished, the common case: boxing a zero-sized future does not
            // allocate.
            Ok(()) => Box::pin(Finished),
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    }
}

/// A node's future that has already finished well.
struct Finished;

impl std::future::Future for Finished {
    type Output = NodeResult;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<NodeResult> {
        std::task::Poll::Ready(Ok(()))
    }
}
