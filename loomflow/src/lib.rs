//! loomflow: typed, durable graphs for LLM agents and workflows.
//!
//! Write steps as async functions over your own state type, wire them into a [`Graph`] with
//! edges, branches, fan-outs and joins, [`compile`](Graph::compile) it (every structural
//! problem is reported at once), and run it on a [`Runtime`]. Runs advance in supersteps:
//! every active node runs concurrently on its own copy of the state, their changes merge
//! deterministically, and a checkpoint is taken.
//!
//! Runs are durable: on [`Runtime::sqlite`] every superstep is checkpointed, side effects
//! wrapped in [`Context::step`] are journaled and not repeated, and a run that waits for a
//! person ([`Context::wait_for_signal`], [`Context::interrupt`]) can suspend and be carried on
//! after a restart, from any process. On top of graphs sit [models](model) (OpenAI,
//! Anthropic, any compatible server), [tools](mod@tool) (`#[tool]`, permissions, approvals,
//! and with the `mcp` feature the tools of MCP servers), [long-term memory](memory) and
//! [agents](mod@agent), whose loop is itself a graph.
//!
//! # Add it to your project
//!
//! ```toml
//! [dependencies]
//! loomflow = "0.1"
//! serde = { version = "1", features = ["derive"] }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! The prelude re-exports `Serialize` and `Deserialize`, but serde's derives write `serde::`
//! paths into your crate, so serde must be a dependency of yours; tokio's `macros` and
//! `rt-multi-thread` are for `#[tokio::main]`. Deriving `JsonSchema` for a `#[tool]` argument
//! struct needs `schemars = "1"` the same way.
//!
//! # Examples
//!
//! ```
//! use loomflow::prelude::*;
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize)]
//! struct Trip { city: String, notes: Vec<String>, booked: bool }
//!
//! /// Look up the weather.
//! #[node]
//! async fn weather(state: &mut Trip, _ctx: &Context) -> loomflow::Result<()> {
//!     state.notes.push(format!("sunny in {}", state.city));
//!     Ok(())
//! }
//!
//! /// Look up hotels.
//! #[node]
//! async fn hotels(state: &mut Trip) -> loomflow::Result<()> {
//!     state.notes.push("3 hotels".into());
//!     Ok(())
//! }
//!
//! #[node]
//! async fn book(state: &mut Trip) -> loomflow::Result<()> {
//!     state.booked = true;
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
//! let graph = Graph::new("trip")
//!     .node(weather)
//!     .node(hotels)
//!     .node(book)
//!     .edge(START, "weather")
//!     .edge(START, "hotels")          // fan-out: both run in the first superstep
//!     .join(["weather", "hotels"], "book")
//!     .edge("book", END)
//!     .reducer("notes", Reducer::append())
//!     .compile()?;
//!
//! let trip = graph
//!     .invoke(&Runtime::in_memory(), "trip-1", Trip { city: "Lyon".into(), ..Default::default() })
//!     .await?
//!     .completed()?;
//! assert_eq!(trip.notes, ["sunny in Lyon", "3 hotels"]);   // declaration order
//! assert!(trip.booked);
//! println!("{}", graph.to_mermaid());
//! # Ok(()) }
//! ```
//!
//! `cargo run --example NAME` in the repository runs fuller ones: `refund_service` (a
//! durable service with its worker), `quickstart`, `signals`, `refund_approval` (durable,
//! across restarts), `tools`, `research_agent`, `supervisor`, `chat`, `observability`,
//! `mcp_tools`.
//!
//! # Where things are
//!
//! - [`prelude`]: the common path, `use loomflow::prelude::*`.
//! - [`graph`]: [`Graph`] (nodes, edges, branches, joins, reducers, subgraphs),
//!   [`CompiledGraph`] (invoke, start, stream, resume, recover, Mermaid), [`RunOutcome`].
//! - [`context`]: [`Context`], what a node can do: emit events, wait for signals, interrupt,
//!   journal steps.
//! - [`runtime`]: [`Runtime`] (in memory, SQLite or PostgreSQL), checkpoints, the signal
//!   mailbox,
//!   [`Durability`].
//! - [`event`]: the [`Event`]s a run streams.
//! - [`model`]: the [`Model`](model::Model) trait and its adapters, scripted models for tests.
//! - [`tool`](mod@tool): the [`Tool`](tool::Tool) trait, [`ToolHost`](tool::ToolHost), permissions,
//!   approvals and hooks.
//! - [`agent`](mod@agent): [`Agent`](agent::Agent), a ReAct loop over a model and tools, with budgets.
//! - [`architecture`]: multi-agent shapes (router, supervisor, swarm, plan-and-execute,
//!   reflexion, debate, actor-critic).
//! - [`error`]: [`Error`] and one error enum per subsystem.
//! - The macros: [`node`], [`tool`](macro@tool), [`agent`](macro@agent).
//!
//! # Cargo features
//!
//! | feature | default | what it adds |
//! | --- | --- | --- |
//! | `sqlite` | on | `SqliteStore`, `Runtime::sqlite`, `SqliteMemory`: SQLite bundled, no system library |
//! | `openai` | on | `OpenAiModel` (reqwest with rustls and the platform's certificate verifier: no OpenSSL) |
//! | `anthropic` | on | `AnthropicModel` (the same HTTP stack) |
//! | `postgres` | off | `PostgresStore`, `Runtime::postgres`, `PostgresMemory`: one database shared by many workers |
//! | `http` | off | `loomflow::http`: the HTTP ingress and the approval inbox (axum) |
//! | `otel` | off | trace links between the executions of a run (spans themselves need no feature) |
//! | `mcp` | off | `tool::mcp`: an MCP server's tools as loomflow tools (rmcp) |
//! | `test-util` | off | `runtime::store::conformance`: the suite every `Store` passes |
//!
//! With `default-features = false`, loomflow is the engine alone: graphs, [`Context`], the
//! in-memory runtime, tools, and agents over any [`Model`](model::Model).

#![doc(test(attr(deny(warnings))))]

extern crate self as loomflow;

pub mod agent;
pub mod architecture;
pub mod context;
pub mod error;
mod error_chain;
pub mod event;
pub mod graph;
#[cfg(feature = "http")]
pub mod http;
pub mod json;
mod json_depth;
mod json_text;
pub mod memory;
pub mod model;
mod numbered;
pub mod runtime;
mod stable_hash;
mod sync;
pub mod telemetry;
pub mod tool;
mod type_name;
pub mod worker;

#[doc(inline)]
pub use context::Context;
#[doc(inline)]
pub use error::{Error, GraphError, GraphProblem, Result, RunError};
pub use error_chain::ErrorChain;
#[doc(inline)]
pub use event::{Event, EventKind};
#[doc(inline)]
pub use graph::{
    CompiledGraph, END, Graph, Node, Reducer, Route, RunBuilder, RunHandle, RunOutcome, RunStream,
    START, State,
};
#[doc(inline)]
pub use runtime::{Durability, Interrupt, Runtime, RuntimeError, SignalError};
/// schemars, which `#[tool]` uses for argument schemas: derive [`JsonSchema`](schemars::JsonSchema)
/// on argument types (`use loomflow::prelude::*` brings the derive).
pub use schemars;
#[doc(inline)]
pub use worker::{RunReport, Worker, WorkerHandle};

/// Marks an async fn as a graph node.
///
/// The function takes `&mut S` (the state) and optionally `&Context` (under any name: an
/// import renamed or an alias, but no other type), and returns `()` or a `Result<(), E>`
/// with `E: Into<`[`NodeError`](graph::NodeError)`>` (`loomflow::Error`, any of its
/// subsystems' errors, `String`, `&str`, a boxed error, or an error of one's own with a
/// `From` impl for `NodeError`), or any other error that is `Send + Sync`
/// (`anyhow::Error`, `std::io::Error`, a `thiserror` type), which fails the node. The macro turns the name
/// into a unit value implementing [`Node<S>`]: pass it to [`Graph::node`]. The node is
/// named after the function, without the `r#` of a raw identifier (`r#match` is the node
/// `"match"`; override with `#[node(name = "...")]`); the doc comment becomes its
/// description. A crate that renames its loomflow dependency (`lf = { package =
/// "loomflow", .. }`) says where it is with `#[node(crate = lf)]`, as it does for `#[tool]`
/// and `#[agent]`.
/// The original body stays callable as `name::call(state, ctx)`, and the fn's other
/// attributes go on it: a `#[tracing::instrument]` below `#[node]` makes a span named
/// `call` (give it a name, or put it above `#[node]`). A state type that is not a
/// [`State`] is reported at the `&mut S` parameter. The fn must be a free function (at module
/// level): the macro declares a struct and a `static` beside it, which an `impl` block cannot
/// hold, so on an associated fn rustc reports errors about the expansion instead.
///
/// # The name
///
/// The function's name becomes a braced empty struct (a type: `name::call`) and a `static` of it
/// (the value: `.node(name)`, `Node::<S>::name(&name)`). Where the node is in scope, a local
/// binding of the same name (`let name = ..`, a parameter, or a pattern such as
/// `Pair { name, .. }`) is refused with rustc's "let bindings cannot shadow statics"
/// (E0530), pointing at the node. Rename the binding (`Pair { name: n, .. }`), or keep the
/// nodes in their own module and refer to them by path (`.node(nodes::name)`). A binding
/// cannot simply shadow the node: only a fn may be shadowed that way, and a fn cannot be
/// a value implementing `Node`. Derived code binds names too: a `JsonSchema` derive in the
/// module binds `generator` and `schema`, so a node fn of one of those names fails inside
/// that derive; name the fn otherwise and keep the node's name with `name = ".."`.
///
/// The struct takes the name in the module's type namespace too: a crate, module or `use`
/// of the same name is hidden there (a node `regex` beside `regex::Regex`). Write the
/// crate's path from the root (`::regex::Regex`), or name the fn otherwise.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// /// Say hello.
/// #[node(name = "say hello")]
/// async fn greet(state: &mut String, ctx: &Context) -> loomflow::Result<()> {
///     state.push_str(ctx.node());
///     Ok(())
/// }
///
/// assert_eq!(Node::<String>::name(&greet), "say hello");
/// assert_eq!(Node::<String>::description(&greet), Some("Say hello."));
/// ```
pub use loomflow_macros::node;

/// Declares an agent on a struct: the doc comment is its instructions, the attribute its
/// settings; generates `Name::builder()` (an [`AgentBuilder`](agent::AgentBuilder) with
/// everything set) and `Name::agent()` (built).
///
/// Attributes: `model = "..."` (a model string, see [`model::resolve`]), `tools(a, b)` (values
/// implementing [`Tool`](tool::Tool): `#[tool]` functions, a value of your own type), `max_turns = n`,
/// `timeout_secs = n`, `temperature = x`, `max_tokens = n`, `name = "..."` (default: the
/// struct's name in snake case, an acronym as one word: `HTTPHelper` is `http_helper`,
/// `Agent2Go` is `agent2_go`), `instructions = "..."` (instead of the doc comment),
/// `crate = path`.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// /// You repeat what you are told.
/// #[agent(model = "echo", max_turns = 3)]
/// struct Parrot;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let parrot = Parrot::agent()?;
/// assert_eq!(parrot.name(), "parrot");
/// assert_eq!(parrot.run("hello").await?.output, "hello");
/// # Ok(()) }
/// ```
pub use loomflow_macros::agent;

/// Turns a sync or async fn into a [`Tool`](tool::Tool) a model can call.
///
/// The macro turns the name into a unit value implementing `Tool`: pass it to
/// [`ToolHost::with`](tool::ToolHost::with). The tool is named after the function; the doc
/// comment's first paragraph is its description (a raw identifier's `r#` is dropped:
/// `r#type` is the tool `type`). The original body stays callable as
/// `name::call(...)`. As with [`node`], the fn must be a free function, not inside an `impl`
/// block, and the value is a `static` named after the function:
/// where it is in scope, a local binding of the same name is refused with "let bindings
/// cannot shadow statics" (E0530); rename the binding or refer to the tool by path. A fn
/// cannot be named `schema` or `generator`, names the schema derive binds (in every
/// `JsonSchema` derive of the module): name it otherwise, and the tool with `name = ".."`.
/// The tool's struct hides a crate, module or `use` of its name in the module (a tool
/// `uuid` beside `uuid::Uuid`): write `::uuid::Uuid`, or name the fn otherwise
/// (`#[tool(name = "uuid")] fn new_uuid()`).
///
/// - **Parameters** become the properties of a JSON Schema (2020-12) made by schemars; each
///   type must implement `Deserialize` and `JsonSchema`. Describe them with
///   `#[tool(param(city = "..."))]`, or a doc comment on the parameter (`param` first). A
///   parameter's `#[serde(..)]` and `#[schemars(..)]` attributes apply to its argument
///   (`#[serde(default)] limit: u32` may be left out, `#[serde(rename = "q")] query: String`
///   is sent as `q`); `#[cfg]` on a parameter is refused. A single parameter whose type is
///   a struct with named fields (and no `param` description nor attribute) *is* the
///   arguments object; its field docs become the descriptions.
/// - **`&ToolContext`** parameters (session, user, call id) are injected and not in the schema.
/// - **Arguments** are checked against the schema before the body runs, and every error
///   names the field (``field `hosts[1].addr`: ...``). Fields that are not parameters are
///   refused (the schema says `additionalProperties: false`), unless a parameter takes them
///   (`#[serde(flatten)] labels: BTreeMap<String, String>`), and with a whole-struct
///   argument too unless the struct itself accepts extra fields (a flattened map); the
///   schema names each field by its serialized name only, so a `#[serde(alias)]` is refused
///   like any other unknown field. An integral float (`3.0`) is accepted for an integer
///   within the range of its type, and `null` for an optional parameter is the parameter
///   left out, as OpenAI's strict mode sends it. The check covers types, required fields,
///   `enum`/`const`, numeric bounds, integer formats and lengths; a `pattern` or a string
///   `format` (`#[schemars(regex(..))]`, `#[schemars(email)]`) is told to the model but
///   not checked: check it in the body and return an `Err` the model reads.
/// - **The return value** is serialized. A `Result<T, E>` makes a fallible tool: `Err`
///   becomes a failed call the model reads, as `E`'s `Display` text. An alias of `Result`
///   (`type ToolResult<T> = Result<T, String>`) is fallible too. An `E` that is not
///   `Display` is a compile error, spelled out or through an alias. An `E` that is
///   [`ToolError`](crate::tool::ToolError) itself is the call's error as it is, its variant
///   kept (`InvalidArguments`, `Denied`, …).
/// - **Sync or async**: a sync body runs on tokio's blocking pool
///   (`tokio::task::spawn_blocking`), with its arguments moved there and `&ToolContext` a
///   clone, so it may block: the calls of one turn run together and the host's timeout
///   applies. A body that overruns the timeout is reported as timed out but runs on to its
///   end, as a blocking thread cannot be stopped. Its parameter types must therefore be
///   `Send` (the result is serialized on the blocking thread, so it need not be).
/// - **The fn's other attributes** go on its body, `name::call`: a `#[tracing::instrument]`
///   below `#[tool]` makes a span named `call` (give it a name). `unsafe fn` is refused.
/// - **Attributes**: `name = "..."`, `description = "..."` (instead of a doc comment),
///   `approval` (every call needs a person's approval), `destructive` (for permission
///   policies), `crate = path` (where loomflow is), `param(x = "...", ...)`.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
/// use loomflow::tool::{Tool, ToolContext};
///
/// /// Get the weather for a city.
/// ///
/// /// Not shown to the model: only the first paragraph is.
/// #[tool(param(city = "The city, e.g. Lyon"))]
/// async fn weather(city: String, days: Option<u8>) -> String {
///     format!("sunny in {city} for {} days", days.unwrap_or(1))
/// }
///
/// #[derive(Deserialize, JsonSchema)]
/// struct Transfer {
///     /// Amount in cents.
///     amount: u64,
///     /// Destination account.
///     to: String,
/// }
///
/// /// Move money.
/// #[tool(approval, destructive, name = "transfer_money")]
/// fn transfer(args: Transfer, ctx: &ToolContext) -> Result<String, String> {
///     if args.amount == 0 { return Err("nothing to move".into()); }
///     Ok(format!("{} sent to {} for {:?}", args.amount, args.to, ctx.user))
/// }
///
/// let spec = weather.spec();
/// assert_eq!(spec.description, "Get the weather for a city.");
/// assert_eq!(spec.parameters["properties"]["city"]["description"], "The city, e.g. Lyon");
/// assert_eq!(spec.parameters["required"], json!(["city"]));
/// assert_eq!(spec.strict_parameters()["required"], json!(["city", "days"]));
///
/// let spec = transfer.spec();
/// assert_eq!(spec.name, "transfer_money");
/// assert!(spec.requires_approval && spec.destructive);
/// assert_eq!(spec.parameters["properties"]["amount"]["description"], "Amount in cents.");
///
/// // The body is still an ordinary function.
/// let ctx = ToolContext::new("session-1", None, "call-1");
/// let nothing = Transfer { amount: 0, to: "savings".into() };
/// assert_eq!(transfer::call(nothing, &ctx), Err("nothing to move".to_owned()));
/// ```
///
/// Outside this crate's prelude, `#[derive(JsonSchema)]` needs schemars as a dependency, or
/// `#[schemars(crate = "loomflow::schemars")]` on the type.
pub use loomflow_macros::tool;

/// The common path: `use loomflow::prelude::*;`.
pub mod prelude {
    pub use crate::context::Context;
    pub use crate::graph::{
        BoxFuture, CompiledGraph, END, Graph, Node, NodeResult, Reducer, RunOutcome, START, State,
    };
    pub use crate::runtime::{Durability, Runtime};
    pub use crate::tool::{Tool, ToolContext, ToolHost};
    pub use crate::worker::Worker;
    pub use crate::{Error, agent, node, tool};
    pub use schemars::JsonSchema;
    pub use serde::{Deserialize, Serialize};
    pub use serde_json::json;
    pub use std::time::Duration;
}

/// Items the macros' generated code refers to. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::graph::node_output::{
        BoxedErrorOutput, BoxedErrorOutputKind, NodeErrorOutput, NodeErrorOutputKind, NodeOutputOf,
        OtherNodeOutput, OtherNodeOutputKind,
    };
    pub use crate::graph::{BoxFuture, IntoNodeResult, NodeContext, NodeResult};
    pub use crate::tool::macro_support::{
        FallibleOutput, FallibleOutputKind, OutputOf, PlainOutput, PlainOutputKind,
        ToolErrorOutput, ToolErrorOutputKind, ToolErrorText, parse_tool_arguments,
        plain_tool_output, run_blocking_tool, tool_arguments_schema, whole_argument_schema,
    };
    pub use schemars;
    pub use serde;
    pub use serde_json;
    pub use std;
}

/// Headline types are shareable across tasks and threads.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Runtime>();
    assert_send_sync::<Context>();
    assert_send_sync::<CompiledGraph<u64>>();
    assert_send_sync::<Error>();
    assert_send_sync::<std::sync::Arc<dyn memory::Memory>>();
    assert_send_sync::<memory::Consolidation>();
    #[cfg(feature = "sqlite")]
    assert_send_sync::<memory::SqliteMemory>();
    #[cfg(feature = "postgres")]
    assert_send_sync::<memory::PostgresMemory>();
    #[cfg(feature = "mcp")]
    assert_send_sync::<tool::mcp::McpServer>();
};
