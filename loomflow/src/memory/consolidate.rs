//! [`Consolidation`]: merges a scope's old items into fewer through one model call, run as
//! a one-node graph so that the selection, the model's answer and the rewrite are journaled.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::prompt::string_array;
use super::{Memory, MemoryError, MemoryId, MemoryItem, Scope};
use crate::context::Context;
use crate::graph::{
    BoxFuture, CompiledGraph, END, Graph, Node, NodeError, NodeResult, RunOutcome, START,
};
use crate::model::{Message, Model, ModelRequest, ModelResponse, Usage};
use crate::runtime::Runtime;

const INSTRUCTIONS: &str = "You consolidate a long-term memory. Merge the numbered items \
below into fewer items: combine duplicates and closely related facts into one statement, \
keep every distinct fact that is still true, and where two items disagree keep the later \
one (items are listed oldest first). Answer with only a JSON array of short, \
self-contained statements.";

/// What a consolidation did; also the state its graph checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ConsolidationReport {
    /// The scope consolidated.
    pub scope: Scope,
    /// The items merged away: empty when there were fewer than two to merge, or when some
    /// of those chosen were gone by the rewrite (forgotten meanwhile, or merged by another
    /// consolidation), which then writes nothing.
    pub removed: Vec<MemoryId>,
    /// The items written in their place.
    pub added: Vec<MemoryId>,
    /// The tokens the model call used.
    pub usage: Usage,
}

/// Merges a scope's old items into fewer through one model call.
///
/// The call is made inside a graph run on the given [`Runtime`], on the thread
/// `loomflow:memory:<kind>:<id>` (see [`memory_name`](Self::memory_name) for two memories
/// on one runtime): the chosen items, the model's answer and the rewrite are
/// journaled steps, so a consolidation that fails after the model answered (or whose process
/// died) is carried on by [`recover`](Self::recover) without asking the model again, and
/// never rewrites twice. The rewrite is one transaction: the old items go and the merged
/// ones come in together, dated as the newest of the old. Should any of the old items be
/// gone by then (forgotten, or merged by a consolidation run meanwhile, in this process or
/// another), nothing is rewritten: the merged items could repeat what was forgotten.
///
/// # Examples
///
/// ```
/// use loomflow::memory::{Consolidation, Memory, Scope, SqliteMemory};
/// use loomflow::model::{ModelResponse, ScriptedModel};
/// use loomflow::prelude::*;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> loomflow::Result<()> {
/// let memory = SqliteMemory::in_memory()?;
/// let ada = Scope::user("ada");
/// for fact in ["Ada likes tea", "Ada likes green tea", "Ada lives in Lyon", "Ada has a cat"] {
///     memory.remember(&ada, fact, json!({})).await?;
/// }
/// let model = ScriptedModel::new([ModelResponse::text(r#"["Ada likes green tea", "Ada lives in Lyon"]"#)]);
/// let report = Consolidation::new(model)
///     .keep_newest(1) // the cat stays as it is
///     .run(&memory, &Runtime::in_memory(), &ada)
///     .await?;
/// assert_eq!((report.removed.len(), report.added.len()), (3, 2));
/// assert_eq!(memory.count(&ada).await?, 3);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Consolidation {
    model: Arc<dyn Model>,
    keep_newest: usize,
    older_than: Option<Duration>,
    max_items: usize,
    memory_name: Option<String>,
}

impl std::fmt::Debug for Consolidation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consolidation")
            .field("model", &self.model.name())
            .field("keep_newest", &self.keep_newest)
            .field("older_than", &self.older_than)
            .field("max_items", &self.max_items)
            .field("memory_name", &self.memory_name)
            .finish()
    }
}

impl Consolidation {
    /// A consolidation that asks `model` to merge.
    pub fn new(model: impl Model + 'static) -> Self {
        Self {
            model: Arc::new(model),
            keep_newest: 20,
            older_than: None,
            max_items: 50,
            memory_name: None,
        }
    }

    /// Names the memory consolidated, for the run's thread:
    /// `loomflow:memory@<name>:<kind>:<id>` instead of `loomflow:memory:<kind>:<id>`.
    ///
    /// Two memories consolidated on one runtime (say a memory per tenant) need a name
    /// each: unnamed, a scope of one and the same scope of the other share a thread, so
    /// that the second's consolidation waits for the first's, and a `recover` with one
    /// carries on the other's run, replaying its journaled answer into the wrong memory. A
    /// name that is empty, longer than 128 bytes, or holds `:` (it could read as a scope)
    /// or a NUL is refused when the consolidation runs.
    #[must_use]
    pub fn memory_name(mut self, name: impl Into<String>) -> Self {
        self.memory_name = Some(name.into());
        self
    }

    /// The newest `n` items of the scope are left as they are (default 20).
    #[must_use]
    pub fn keep_newest(mut self, n: usize) -> Self {
        self.keep_newest = n;
        self
    }

    /// Only items at least this old are merged (default: any age), by the system's clock,
    /// which dates the items (not the runtime's [`Clock`](crate::runtime::Clock)).
    #[must_use]
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// The most items one consolidation merges, oldest first (default 50; at least 2).
    #[must_use]
    pub fn max_items(mut self, n: usize) -> Self {
        self.max_items = n;
        self
    }

    /// Consolidates `scope` of `memory`, as a new run on `runtime`.
    ///
    /// # Errors
    ///
    /// [`MemoryError::BadOptions`] (as [`Error::Memory`](crate::Error::Memory)) when
    /// `max_items` is below 2 or the [`memory_name`](Self::memory_name) is one it refuses;
    /// a scope no backend keeps (see [`Scope::check`]). A failed consolidation (the model failed, its answer is not a
    /// non-empty JSON array of strings, the memory failed) is [`Error::Run`](crate::Error::Run)
    /// whose source chain holds the [`MemoryError`] or
    /// [`ModelError`](crate::model::ModelError); nothing was rewritten then.
    pub async fn run<M: Memory + Clone>(
        &self,
        memory: &M,
        runtime: &Runtime,
        scope: &Scope,
    ) -> crate::Result<ConsolidationReport> {
        let graph = self.graph(memory, scope)?;
        let start = ConsolidationReport {
            scope: scope.clone(),
            removed: Vec::new(),
            added: Vec::new(),
            usage: Usage::default(),
        };
        let thread = self.thread(scope);
        report(graph.invoke(runtime, thread, start).await?)
    }

    /// Carries on the last consolidation of `scope` on `runtime` (after it failed or its
    /// process died): journaled steps are not repeated, so the model is not asked again.
    /// A consolidation that completed returns its report.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run); a scope never consolidated on `runtime` is an error of the
    /// runtime.
    pub async fn recover<M: Memory + Clone>(
        &self,
        memory: &M,
        runtime: &Runtime,
        scope: &Scope,
    ) -> crate::Result<ConsolidationReport> {
        let graph = self.graph(memory, scope)?;
        report(graph.recover(runtime, self.thread(scope)).await?)
    }

    fn graph<M: Memory + Clone>(
        &self,
        memory: &M,
        scope: &Scope,
    ) -> crate::Result<CompiledGraph<ConsolidationReport>> {
        scope.checked()?;
        let bad = |problem: String| MemoryError::BadOptions {
            scope: scope.clone(),
            problem,
        };
        if self.max_items < 2 {
            let problem = format!("max_items is {}; merging needs at least 2", self.max_items);
            return Err(bad(problem).into());
        }
        if let Some(name) = &self.memory_name
            && (name.is_empty() || name.len() > 128 || name.contains([':', '\0']))
        {
            let problem =
                format!("memory_name {name:?} must be 1 to 128 bytes, without `:` or NUL");
            return Err(bad(problem).into());
        }
        let node = Merge {
            memory: Arc::new(memory.clone()),
            plan: self.clone(),
        };
        Ok(Graph::new("memory_consolidation")
            .node(node)
            .edge(START, "consolidate")
            .edge("consolidate", END)
            .compile()?)
    }
}

impl Consolidation {
    /// The thread `scope`'s consolidations run on.
    fn thread(&self, scope: &Scope) -> String {
        match &self.memory_name {
            // `@`, not `:`, after `memory`: no unnamed memory's scope reads the same.
            Some(name) => format!("loomflow:memory@{name}:{}:{}", scope.kind(), scope.id()),
            None => format!("loomflow:memory:{}:{}", scope.kind(), scope.id()),
        }
    }
}

fn report(outcome: RunOutcome<ConsolidationReport>) -> crate::Result<ConsolidationReport> {
    match outcome {
        RunOutcome::Completed(report) => Ok(report),
        RunOutcome::Failed { error, .. } => Err(error.into()),
        RunOutcome::Interrupted { .. } => Err(crate::Error::msg(
            "memory consolidation was interrupted; nothing in it interrupts",
        )),
    }
}

struct Merge {
    memory: Arc<dyn Memory>,
    plan: Consolidation,
}

impl Node<ConsolidationReport> for Merge {
    fn name(&self) -> &str {
        "consolidate"
    }

    fn description(&self) -> Option<&str> {
        Some("merges a memory scope's old items through one model call")
    }

    fn run<'a>(
        &'a self,
        state: &'a mut ConsolidationReport,
        ctx: &'a Context,
    ) -> BoxFuture<'a, NodeResult> {
        Box::pin(async move { self.merge(state, ctx).await.map_err(NodeError::from) })
    }
}

impl Merge {
    async fn merge(&self, state: &mut ConsolidationReport, ctx: &Context) -> crate::Result<()> {
        let scope = state.scope.clone();
        // By the system's clock, which dates the items: a runtime's `ManualClock` would pick
        // none (behind) or all (ahead).
        let now = SystemTime::now();
        let chosen: Vec<MemoryItem> = ctx.step("select", || self.select(&scope, now)).await?;
        if chosen.len() < 2 {
            return Ok(());
        }
        let request = ModelRequest::new(vec![
            Message::system(INSTRUCTIONS),
            Message::user(
                chosen
                    .iter()
                    .enumerate()
                    .map(|(i, item)| format!("{}. {}", i + 1, item.text.trim()))
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
        ]);
        let response: ModelResponse = ctx
            .step("merge", || self.plan.model.complete(request))
            .await?;
        state.usage += response.usage;
        let merged = merged_items(&scope, &response.content)?;
        let old: Vec<MemoryId> = chosen.iter().map(|item| item.id).collect();
        // Names this consolidation's rewrite, so that it is made once: the rewrite commits in
        // the memory's database and is journaled in the runtime's, and a crash between the
        // two must not insert the merged items again when the run is recovered. The name is
        // journaled too: the thread and run alone come back once the thread is deleted.
        let key: String = ctx
            .step("name", || async {
                Ok::<_, MemoryError>(format!(
                    "{}#{}#{}",
                    ctx.thread(),
                    ctx.run_number(),
                    crate::runtime::claim::runtime_owner_id()
                ))
            })
            .await?;
        let metadata = json!({ "source": "consolidation", "merged": old, "consolidation": key });
        // `None`: some of the chosen items were gone by the rewrite (forgotten, or merged by a
        // consolidation that ran meanwhile), and the merged items, which may repeat them,
        // are not written.
        let added: Option<Vec<MemoryId>> = ctx
            .step("apply", || async {
                let done = self.rewritten(&scope, &key).await?;
                if !done.is_empty() {
                    return Ok(Some(done));
                }
                match self.memory.replace(&scope, &old, &merged, metadata).await {
                    Ok(added) => Ok(Some(added)),
                    Err(error @ MemoryError::Gone { .. }) => {
                        tracing::warn!(%error, "memory consolidation: nothing rewritten");
                        Ok(None)
                    }
                    Err(error) => Err(error),
                }
            })
            .await?;
        if let Some(added) = added {
            state.removed = old;
            state.added = added;
        }
        Ok(())
    }

    /// The items a rewrite named `key` left in `scope` (none if it has not committed).
    async fn rewritten(&self, scope: &Scope, key: &str) -> Result<Vec<MemoryId>, MemoryError> {
        let total = usize::try_from(self.memory.count(scope).await?).unwrap_or(usize::MAX);
        let mut done: Vec<MemoryItem> = self
            .memory
            .list(scope, total)
            .await?
            .into_iter()
            .filter(|item| item.metadata["consolidation"] == key)
            .collect();
        done.sort_by_key(|item| item.id);
        Ok(done.into_iter().map(|item| item.id).collect())
    }

    /// The oldest items past the newest `keep_newest`, at most `max_items`, old enough.
    async fn select(&self, scope: &Scope, now: SystemTime) -> Result<Vec<MemoryItem>, MemoryError> {
        let total = usize::try_from(self.memory.count(scope).await?).unwrap_or(usize::MAX);
        let candidates = total
            .saturating_sub(self.plan.keep_newest)
            .min(self.plan.max_items);
        if candidates < 2 {
            return Ok(Vec::new());
        }
        let mut items = self.memory.list(scope, candidates).await?;
        if let Some(age) = self.plan.older_than {
            items.retain(|item| now.duration_since(item.created_at).is_ok_and(|d| d >= age));
        }
        Ok(items)
    }
}

/// The merged statements: a non-empty JSON array of non-empty strings (an empty one would
/// forget everything chosen).
fn merged_items(scope: &Scope, answer: &str) -> Result<Vec<String>, MemoryError> {
    let bad = |problem: &str| MemoryError::BadConsolidation {
        scope: scope.clone(),
        problem: problem.to_owned(),
    };
    let items = string_array(answer).ok_or_else(|| bad("no JSON array of strings found"))?;
    if items.is_empty() {
        return Err(bad("the array is empty, which would forget every item"));
    }
    if items.iter().any(|item| item.trim().is_empty()) {
        return Err(bad("an item is empty"));
    }
    // An item the memory would refuse (too long, a NUL) is a bad answer too, refused before
    // anything is rewritten.
    for (at, item) in items.iter().enumerate() {
        if let Err(refused) = super::text::check_text(scope, item) {
            return Err(bad(&format!("item {}: {refused}", at + 1)));
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A merged item the memory would refuse is a bad answer, named as one, before anything
    /// is rewritten: the rewrite failed on it with the memory's error before, which a
    /// recover, replaying the journaled answer, met again and again.
    #[test]
    fn a_merged_item_the_memory_refuses_is_a_bad_answer() {
        let scope = Scope::user("ada");
        let long = "x".repeat(super::super::MAX_TEXT_BYTES + 1);
        for (items, problem) in [
            (vec!["fine", "with\0nul"], "item 2: "),
            (vec![long.as_str()], "item 1: "),
        ] {
            let answer = serde_json::to_string(&items).unwrap_or_default();
            match merged_items(&scope, &answer) {
                Err(MemoryError::BadConsolidation { problem: said, .. }) => {
                    assert!(said.starts_with(problem), "{said}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            merged_items(&scope, r#"["a", "b"]"#).ok(),
            Some(vec!["a".to_owned(), "b".to_owned()])
        );
    }
}
