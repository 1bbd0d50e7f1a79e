//! How a `#[node]` function's return value becomes the executor's result, picked by its type
//! (autoref specialisation, as a `#[tool]`'s is): a `Result` whose error converts into
//! [`NodeError`] keeps that conversion (a `loomflow::Error` that is a suspension stays one),
//! through [`NodeErrorOutputKind`]; a `Result` whose error is any other error (`anyhow`'s, an
//! `std::io::Error`, a `thiserror` type of one's own) fails the node with it, through
//! [`BoxedErrorOutputKind`]; anything else goes through [`IntoNodeResult`], whose message
//! says what a node may return. The generated code calls
//! `(&&&NodeOutputOf(&output)).node_output_kind().convert(output)` with the three traits in
//! scope: method lookup tries each kind one dereference later than the one before (the
//! first kind's `&self` on `&&NodeOutputOf` is the receiver's own type).

use super::node::{BoxError, IntoNodeResult, NodeError, NodeResult};

/// A node's return value, borrowed, for its kind to be picked.
#[derive(Debug)]
pub struct NodeOutputOf<'a, T>(pub &'a T);

/// See the module docs: an error that converts into [`NodeError`].
#[derive(Debug)]
pub struct NodeErrorOutput;

/// See the module docs: any other error.
#[derive(Debug)]
pub struct BoxedErrorOutput;

/// See the module docs: `()`, or what [`IntoNodeResult`] takes.
#[derive(Debug)]
pub struct OtherNodeOutput;

/// Picks [`NodeErrorOutput`].
pub trait NodeErrorOutputKind {
    /// The conversion to use.
    fn node_output_kind(&self) -> NodeErrorOutput {
        NodeErrorOutput
    }
}

impl<E: Into<NodeError>> NodeErrorOutputKind for &&NodeOutputOf<'_, Result<(), E>> {}

/// Picks [`BoxedErrorOutput`].
pub trait BoxedErrorOutputKind {
    /// The conversion to use.
    fn node_output_kind(&self) -> BoxedErrorOutput {
        BoxedErrorOutput
    }
}

impl<E: Into<BoxError>> BoxedErrorOutputKind for &NodeOutputOf<'_, Result<(), E>> {}

/// Picks [`OtherNodeOutput`].
pub trait OtherNodeOutputKind {
    /// The conversion to use.
    fn node_output_kind(&self) -> OtherNodeOutput {
        OtherNodeOutput
    }
}

impl<T> OtherNodeOutputKind for NodeOutputOf<'_, T> {}

impl NodeErrorOutput {
    /// The error converted into a [`NodeError`].
    ///
    /// # Errors
    ///
    /// The node's error.
    pub fn convert<E: Into<NodeError>>(self, output: Result<(), E>) -> NodeResult {
        output.map_err(Into::into)
    }
}

impl BoxedErrorOutput {
    /// The error as the node's failure.
    ///
    /// # Errors
    ///
    /// The node's error, as [`NodeError::Failed`].
    pub fn convert<E: Into<BoxError>>(self, output: Result<(), E>) -> NodeResult {
        output.map_err(NodeError::failed)
    }
}

impl OtherNodeOutput {
    /// What [`IntoNodeResult`] makes of it.
    ///
    /// # Errors
    ///
    /// The node's error.
    pub fn convert<T: IntoNodeResult>(self, output: T) -> NodeResult {
        output.into_node_result()
    }
}
