//! [`Error`], the facade over every subsystem's error.
//!
//! Each layer owns its error type: the engine [`GraphError`] and [`RunError`], the runtime
//! [`RuntimeError`], [`StoreError`] and [`SignalError`], and above
//! them [`ModelError`], [`ToolError`] and [`AgentError`]. `Error` collects them so that node
//! bodies and applications can use `?` on all of them. The engine never names this type:
//! it sees a node's error as a boxed `std::error::Error` (see
//! [`RunError::NodeFailed`]), which can be downcast back to `Error`.

use std::fmt;

use crate::agent::AgentError;
use crate::graph::{BoxError, NodeError};
use crate::memory::MemoryError;
use crate::model::ModelError;
use crate::runtime::{RuntimeError, SignalError, StoreError};
use crate::tool::ToolError;

pub use crate::graph::{GraphError, GraphProblem, RunError};

/// The result type used throughout loomflow.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Any error loomflow returns.
///
/// Each subsystem has its own `#[non_exhaustive]` enum; this one collects them. Conversions
/// flatten: a [`RunError::Store`] becomes [`Error::Store`], a [`RunError::Suspended`]
/// becomes [`Error::Suspended`], so one `match` sees each kind in one place.
///
/// # Examples
///
/// Anything that is a message or a standard error converts with `?` or `.into()`:
///
/// ```
/// use loomflow::prelude::*;
///
/// fn parse(text: &str) -> loomflow::Result<u32> {
///     if text.is_empty() {
///         return Err("empty input".into());              // a &str or a String
///     }
///     text.parse::<u32>().map_err(Error::custom)         // any std::error::Error
/// }
/// assert_eq!(parse("7").unwrap(), 7);
/// assert_eq!(parse("").unwrap_err().to_string(), "empty input");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A graph failed to compile.
    #[error(transparent)]
    Graph(#[from] GraphError),
    /// A run failed.
    #[error(transparent)]
    Run(RunError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A model call failed.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// An agent could not be built or a run could not finish.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// A tool call failed outside a run's tool dispatch.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// Long-term memory failed.
    #[error(transparent)]
    Memory(#[from] MemoryError),
    /// A value could not be converted to or from JSON.
    #[error("json conversion failed for {what}")]
    Json {
        /// What was being converted (a state type, a payload, a field).
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// The run asked to suspend (an interrupt or a wait).
    ///
    /// Node bodies propagate this with `?`; the executor recognises it as a control value, not
    /// as a failure. Catching it does not cancel the suspension: the [`Context`](crate::Context)
    /// remembers that the node asked to suspend.
    #[error("node {node} suspended the run")]
    Suspended {
        /// The node that asked to suspend.
        node: String,
    },
    /// A signal was refused, or a wait for one ended without a payload.
    #[error(transparent)]
    Signal(#[from] SignalError),
    /// A runtime call failed for a reason of its own: a thread with no run, a submit to a
    /// thread whose run is still going, ….
    #[error(transparent)]
    Runtime(RuntimeError),
    /// An error raised by user code: [`Error::msg`], [`Error::custom`], or a `String`/`&str`
    /// converted with `?` or `.into()`.
    #[error("{0}")]
    Custom(BoxError),
}

impl Error {
    /// Wraps any error raised by user code.
    pub fn custom(error: impl Into<BoxError>) -> Self {
        Self::Custom(error.into())
    }

    /// Builds an error from a message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self::Custom(message.to_string().into())
    }

    pub(crate) fn json(what: impl Into<String>, source: serde_json::Error) -> Self {
        Self::Json {
            what: what.into(),
            source,
        }
    }

    /// This error as the work of a journaled step ([`Context::step`](crate::Context::step))
    /// returns it: a store's failure as the store's own, which the step tells from its work
    /// failing (a store failing in passing lets the run go, to be carried on, instead of
    /// failing it for good); anything else as itself.
    pub(crate) fn into_step_source(self) -> BoxError {
        match self {
            Self::Store(failure) | Self::Run(RunError::Store(failure)) => Box::new(failure),
            other => Box::new(other),
        }
    }

    /// Unboxes an error that crossed the engine as a `BoxError`: a `loomflow::Error` comes
    /// back as itself, anything else becomes [`Error::Custom`].
    fn from_boxed(error: BoxError) -> Self {
        match error.downcast::<Error>() {
            Ok(error) => *error,
            Err(other) => match other.downcast::<RunError>() {
                Ok(run) => Self::from(*run),
                Err(other) => Self::Custom(other),
            },
        }
    }
}

impl From<RunError> for Error {
    fn from(error: RunError) -> Self {
        match error {
            RunError::Store(e) => Self::Store(e),
            RunError::Signal(e) => Self::Signal(e),
            RunError::Json { what, source } => Self::Json { what, source },
            RunError::Suspended { node } => Self::Suspended { node },
            RunError::Runtime(e) => Self::Runtime(*e),
            other => Self::Run(other),
        }
    }
}

impl From<RuntimeError> for Error {
    fn from(error: RuntimeError) -> Self {
        match error {
            error @ (RuntimeError::UnknownRun { .. }
            | RuntimeError::UnknownCheckpoint { .. }
            | RuntimeError::RunActive { .. }
            | RuntimeError::NotInterrupted { .. }) => Self::Runtime(error),
            other => Self::from(RunError::from(other)),
        }
    }
}

impl From<NodeError> for Error {
    fn from(error: NodeError) -> Self {
        match error {
            NodeError::Suspended { node } => Self::Suspended { node },
            NodeError::Failed(error) => Self::from_boxed(error),
        }
    }
}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Self::Custom(message.into())
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Self::Custom(message.into())
    }
}

/// A `#[node]` function (or a hand-written [`Node`](crate::Node)) returns `loomflow::Error`;
/// the engine carries it boxed, and keeps a suspension a suspension.
impl From<Error> for NodeError {
    fn from(error: Error) -> Self {
        match error {
            Error::Suspended { node } => NodeError::Suspended { node },
            // As the run's own: the engine tells a store's failure from the node's.
            Error::Store(e) => NodeError::Failed(Box::new(RunError::Store(e))),
            other => NodeError::Failed(Box::new(other)),
        }
    }
}

macro_rules! node_error_via_facade {
    ($($ty:ty),*) => {$(
        impl From<$ty> for NodeError {
            fn from(error: $ty) -> Self {
                Self::from(Error::from(error))
            }
        }
    )*};
}
node_error_via_facade!(ModelError, AgentError, ToolError, MemoryError, GraphError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boxed_facade_error_comes_back_as_itself() {
        let original = Error::Tool(ToolError::UnknownTool {
            name: "x".into(),
            known: vec![],
        });
        let node = NodeError::from(original);
        assert!(matches!(Error::from(node), Error::Tool(_)));
    }

    #[test]
    fn suspension_survives_the_round_trip_through_the_engine() {
        let node = NodeError::from(Error::Suspended { node: "a".into() });
        assert!(matches!(node, NodeError::Suspended { .. }));
        assert!(matches!(Error::from(node), Error::Suspended { .. }));
    }

    #[test]
    fn signal_errors_convert_into_the_facade() {
        let err: Error = SignalError::EmptyName {
            session: "s".into(),
        }
        .into();
        assert_eq!(
            err.to_string(),
            "signal name for session s is empty (or only spaces)"
        );
    }

    #[test]
    fn run_errors_flatten_into_the_facade() {
        let error = Error::from(RunError::Suspended { node: "a".into() });
        assert!(matches!(error, Error::Suspended { .. }));
    }
}
