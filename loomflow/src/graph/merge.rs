//! Merging the results of concurrent nodes: field-level diffs and reducers.
//!
//! Every node of a superstep works on its own copy of the state as it was when the step
//! began. Afterwards each copy is compared with that starting state, top-level field by
//! top-level field (through its JSON form), and the changed fields are merged in declaration
//! order. A field changed by one node takes that node's value; a field changed by several
//! needs a [`Reducer`], or the step fails naming the field and the first two writers.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::graph::error::RunError;

type Result<T, E = RunError> = std::result::Result<T, E>;

/// The field a reducer is declared under for a state that is not a JSON object (a number, a
/// `Vec`, a string): such a state is one field, and two nodes of a superstep that both change
/// it need a reducer for it.
///
/// ```
/// use loomflow::graph::WHOLE_STATE;
/// use loomflow::prelude::*;
///
/// let graph = Graph::<Vec<String>>::new("notes")
///     .node_sync("a", |notes: &mut Vec<String>| notes.push("from a".into()))
///     .node_sync("b", |notes: &mut Vec<String>| notes.push("from b".into()))
///     .edge(START, "a")
///     .edge(START, "b")
///     .edge("a", END)
///     .edge("b", END)
///     .reducer(WHOLE_STATE, Reducer::append());
/// # graph.compile().unwrap();
/// ```
pub const WHOLE_STATE: &str = "(state)";

type CustomReducer = Arc<dyn Fn(Value, Value) -> Result<Value, String> + Send + Sync>;

/// How concurrent writes to one state field combine.
///
/// # Examples
///
/// ```
/// use loomflow::prelude::*;
///
/// #[derive(Clone, Default, Serialize, Deserialize)]
/// struct S { log: Vec<String>, best: u32 }
///
/// let graph = Graph::<S>::new("g")
///     .reducer("log", Reducer::append())
///     .reducer("best", Reducer::with(|a: u32, b: u32| a.max(b)));
/// # let _ = graph;
/// ```
#[derive(Clone)]
pub struct Reducer(ReducerKind);

#[derive(Clone)]
enum ReducerKind {
    Append,
    Custom(CustomReducer),
}

impl fmt::Debug for Reducer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            ReducerKind::Append => f.write_str("Reducer::append"),
            ReducerKind::Custom(_) => f.write_str("Reducer::with(..)"),
        }
    }
}

impl Reducer {
    /// For sequence fields (`Vec`, arrays): the items each node appended are concatenated in
    /// declaration order after the items the field held when the step began.
    ///
    /// Where other nodes of the step wrote the field too, a node that removed or rewrote
    /// existing items, rather than appending, fails the step, and the error names it. A node
    /// that writes the field alone in its step sets it as it likes, as without a reducer.
    pub fn append() -> Self {
        Self(ReducerKind::Append)
    }

    /// Folds the values the nodes wrote with `f`, in declaration order:
    /// `f(f(first, second), third)`. Each argument is a writer's whole new value of the field,
    /// not what it added: a counter two nodes each raised by one from 10 is written as 11
    /// twice, and a sum folds it to 22. Count with a sequence and [`append`](Self::append), or
    /// fold values that do not depend on what the field held (`max`, a set's union).
    pub fn with<T, F>(f: F) -> Self
    where
        T: Serialize + DeserializeOwned,
        F: Fn(T, T) -> T + Send + Sync + 'static,
    {
        Self(ReducerKind::Custom(Arc::new(move |a, b| {
            let a: T = serde_json::from_value(a).map_err(|e| e.to_string())?;
            let b: T = serde_json::from_value(b).map_err(|e| e.to_string())?;
            serde_json::to_value(f(a, b)).map_err(|e| e.to_string())
        })))
    }

    /// Combines the values `writes` gives (each with the name of the node that wrote it).
    fn combine(&self, base: Option<&Value>, writes: Vec<(&str, Value)>) -> Result<Value, String> {
        match &self.0 {
            ReducerKind::Append => {
                let base_items = match base {
                    Some(Value::Array(items)) => items.as_slice(),
                    None | Some(Value::Null) => &[],
                    Some(_) => return Err("append needs an array field".to_owned()),
                };
                let mut merged = base_items.to_vec();
                for (node, write) in writes {
                    let items = match write {
                        Value::Array(items) => items,
                        // A field the node removed (`skip_serializing_if` on an empty list).
                        Value::Null => Vec::new(),
                        _ => return Err("append needs an array field".to_owned()),
                    };
                    if !items.starts_with(base_items) {
                        return Err(format!(
                            "node {node} changed existing items instead of appending"
                        ));
                    }
                    merged.extend(items.into_iter().skip(base_items.len()));
                }
                Ok(Value::Array(merged))
            }
            ReducerKind::Custom(f) => {
                let mut writes = writes.into_iter().map(|(_, value)| value);
                let first = writes.next().unwrap_or(Value::Null);
                writes.try_fold(first, |acc, next| {
                    // A reducer is the user's code: its panic fails the step, as a node's does.
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(acc, next)))
                        .unwrap_or_else(|panic| {
                            let message = crate::sync::panic_message(&*panic);
                            Err(format!("the reducer panicked: {message}"))
                        })
                })
            }
        }
    }
}

/// One node's finished copy of the state, with its name, in declaration order.
pub(crate) struct BranchResult<'a, S> {
    pub(crate) node: &'a str,
    pub(crate) state: S,
    /// The only fields the copy changed, when that was worked out as it finished (a
    /// sibling's copy kept across a suspension): its other fields are the base's, however
    /// they serialize now (a `HashSet` read back lists its items in another order).
    pub(crate) changed: Option<&'a [String]>,
}

/// The top-level fields `copy` changed from `base` (added, rewritten or removed), as
/// [`merge_branches`] tells them apart; for copies that share their hashers (clones), so
/// that unordered collections list their items alike.
pub(crate) fn changed_fields<S: Serialize>(base: &S, copy: &S) -> Result<Vec<String>> {
    let (base, copy) = (to_fields(base)?, to_fields(copy)?);
    let removed = base.keys().filter(|key| !copy.contains_key(*key));
    let mut changed: Vec<String> = removed.cloned().collect();
    for (key, value) in copy {
        if base.get(&key) != Some(&value) {
            changed.push(key);
        }
    }
    Ok(changed)
}

/// Whether two values differ only in the order of their lists' items (a set read back with
/// another hasher).
fn same_but_for_order(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn sorted(items: &[Value]) -> Vec<String> {
        let mut texts: Vec<String> = items.iter().map(Value::to_string).collect();
        texts.sort_unstable();
        texts
    }
    match (a, b) {
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            a.len() == b.len() && (a == b || sorted(a) == sorted(b))
        }
        (a, b) => a == b,
    }
}

/// The nodes that changed one field, in declaration order, each with its new value: `None`
/// when the node removed the field (a map state's key, a field skipped when empty).
type Writers = Vec<(usize, Option<Value>)>;

/// Merges the copies of several nodes into a new state.
pub(crate) fn merge_branches<S: Serialize + DeserializeOwned>(
    base_state: S,
    branches: Vec<BranchResult<'_, S>>,
    reducers: &std::collections::HashMap<String, Reducer>,
    step: u64,
) -> Result<S> {
    let base = to_fields(&base_state)?;
    let mut writes: Vec<(String, Writers)> = Vec::new();
    let mut note =
        |key: &str, b: usize, value: Option<Value>| match writes.iter_mut().find(|(k, _)| k == key)
        {
            Some((_, writers)) => writers.push((b, value)),
            None => writes.push((key.to_owned(), vec![(b, value)])),
        };
    for (b, branch) in branches.iter().enumerate() {
        let fields = to_fields(&branch.state)?;
        // A name the state no longer has (a field renamed since, read back by its serde
        // `alias`) stands for a field the list cannot name: the fields it does not name
        // count too where the copy differs in more than its items' order (a set read back
        // with another hasher lists them otherwise).
        let renamed = (branch.changed).is_some_and(|only| {
            (only.iter()).any(|key| !base.contains_key(key) && !fields.contains_key(key))
        });
        let counts = |key: &str, before: Option<&Value>, after: Option<&Value>| match branch.changed
        {
            None => true,
            Some(only) if only.iter().any(|k| k == key) => true,
            Some(_) => renamed && !same_but_for_order(before, after),
        };
        for key in base.keys().filter(|key| !fields.contains_key(*key)) {
            if counts(key, base.get(key), None) {
                note(key, b, None);
            }
        }
        for (key, value) in fields {
            if base.get(&key) != Some(&value) && counts(&key, base.get(&key), Some(&value)) {
                note(&key, b, Some(value));
            }
        }
    }
    if writes.is_empty() {
        return Ok(base_state);
    }
    // One writer for everything: take that node's copy as it is.
    let sole = writes[0].1[0].0;
    if writes.iter().all(|(_, w)| w.len() == 1 && w[0].0 == sole) {
        return branches
            .into_iter()
            .nth(sole)
            .map(|b| b.state)
            .ok_or_else(|| RunError::Internal {
                problem: "merge lost a branch",
            });
    }

    let mut merged = base;
    for (field, writers) in writes {
        let value = if writers.iter().all(|(_, v)| v.is_none()) {
            // Removed by every node that touched it: gone, whatever the reducer.
            merged.remove(&field);
            continue;
        } else if writers.len() == 1 {
            writers
                .into_iter()
                .next()
                .and_then(|(_, v)| v)
                .unwrap_or(Value::Null)
        } else if let Some(reducer) = reducers.get(&field) {
            // A removal among other writes reaches the reducer as `null` (an append reads it
            // as an empty list).
            let values = writers
                .into_iter()
                .map(|(b, v)| (branches[b].node, v.unwrap_or(Value::Null)))
                .collect();
            reducer
                .combine(merged.get(&field), values)
                .map_err(|message| RunError::Reducer {
                    field: field.clone(),
                    step,
                    message,
                })?
        } else {
            return Err(RunError::MergeConflict {
                field,
                first: branches[writers[0].0].node.to_owned(),
                second: branches[writers[1].0].node.to_owned(),
                step,
            });
        };
        merged.insert(field, value);
    }
    from_fields::<S>(merged)
}

fn to_fields<S: Serialize>(state: &S) -> Result<Map<String, Value>> {
    match serde_json::to_value(state) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => {
            let mut map = Map::with_capacity(1);
            map.insert(WHOLE_STATE.to_owned(), other);
            Ok(map)
        }
        Err(e) => Err(RunError::json(std::any::type_name::<S>(), e)),
    }
}

fn from_fields<S: DeserializeOwned>(mut fields: Map<String, Value>) -> Result<S> {
    let value = match fields.remove(WHOLE_STATE) {
        Some(whole) if fields.is_empty() => whole,
        Some(whole) => {
            fields.insert(WHOLE_STATE.to_owned(), whole);
            Value::Object(fields)
        }
        None => Value::Object(fields),
    };
    // The merged value's field that does not fit is named: a reducer wrote something its
    // field's type cannot hold (a sum past a `u8`, say).
    serde_path_to_error::deserialize(value).map_err(|e| {
        let what = match e.path().to_string().as_str() {
            "." => std::any::type_name::<S>().to_owned(),
            path => format!("field {path} of {} as merged", std::any::type_name::<S>()),
        };
        RunError::json(what, e.into_inner())
    })
}
