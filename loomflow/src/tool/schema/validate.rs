//! Checking a model's arguments against a tool's schema, naming the field that is wrong.

use serde_json::Value;
use std::cell::RefCell;

use super::bounds::{Depth, MAX_DEPTH, MAX_FRAMES, MAX_HOPS, MAX_STEPS, Steps};
use super::sizes::{check_bounds, check_integer_format, check_lengths, integral};

/// Checks `value` against `schema`; on a mismatch, says where and what was expected.
///
/// Covers what tool schemas use: `type`, `properties`, `required`, `additionalProperties`,
/// `enum`, `const`, `items`, `prefixItems`, `anyOf`/`oneOf`/`allOf`, numeric bounds, the
/// integer ranges of schemars' `format`s (`uint8`, `int32`, `uint64`, …), string and array
/// lengths, and local `$ref`s. `oneOf` is checked as `anyOf` (a value one branch takes
/// passes), and a field that `patternProperties` may name is not checked. Other keywords
/// are not checked here: a `#[tool]`'s own decoding still checks its arguments, an MCP
/// server's tool whatever the server does.
///
/// Two leniencies match what models send, and what [`normalize_arguments`] then fixes
/// before decoding: an integer may be written as an integral float (`3.0`), and `null` for
/// a property that is not required counts as leaving it out (OpenAI's strict mode makes
/// every property required and sends `null` for the ones that were optional).
///
/// [`normalize_arguments`]: super::normalize_arguments
///
/// A check takes at most [`MAX_STEPS`] steps: a schema that branches (`anyOf`) into itself
/// (`$ref`) at every level would take exponential time, and one a server sent is refused
/// rather than let hold a thread for minutes. It follows the arguments at most
/// [`MAX_DEPTH`] levels down, and refuses arguments that nest deeper.
pub(crate) fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let steps = Steps::default();
    Validator {
        root: schema,
        steps: &steps,
        const_missed: RefCell::default(),
    }
    .check(schema, value, &mut String::new(), Depth::default())
}

/// Whether `value` fits `schema`, a part of `root` (which its `$ref`s point into), within
/// what is left of `steps`, checked from `depth`: where the caller's recursion is.
pub(super) fn fits(
    root: &Value,
    schema: &Value,
    value: &Value,
    (steps, depth): (&Steps, Depth),
) -> bool {
    Validator {
        root,
        steps,
        const_missed: RefCell::default(),
    }
    .check(schema, value, &mut String::new(), depth)
    .is_ok()
}

/// The schema a local `$ref` points to: a JSON pointer written as a URI fragment, whose
/// characters outside a fragment's are percent-encoded (schemars refers to a type it files
/// as `Order Line` as `#/$defs/Order%20Line`).
pub(super) fn resolve<'s>(root: &'s Value, reference: &str) -> Option<&'s Value> {
    let pointer = reference.strip_prefix('#')?;
    match pointer.contains('%') {
        false => root.pointer(pointer),
        true => root.pointer(&percent_decoded(pointer)?),
    }
}

/// `text` with each `%` and two hex digits after it read as the byte they give; `None` when
/// the bytes are not UTF-8. A `%` without two hex digits after it stays as it is.
fn percent_decoded(text: &str) -> Option<String> {
    let hex = |byte: Option<&u8>| byte.and_then(|&b| char::from(b).to_digit(16));
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        let escaped = (byte == b'%')
            .then(|| Some(hex(bytes.get(at + 1))? * 16 + hex(bytes.get(at + 2))?))
            .flatten()
            .and_then(|value| u8::try_from(value).ok());
        match escaped {
            Some(value) => {
                decoded.push(value);
                at += 3;
            }
            None => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8(decoded).ok()
}

struct Validator<'s> {
    root: &'s Value,
    steps: &'s Steps,
    /// The constants the last error's value was not one of (`const`, `enum`), if it came
    /// from such a miss.
    const_missed: RefCell<Option<Box<ConstMiss>>>,
}

/// A value that is not one of the constants (`const`, `enum`) a schema asks for.
#[derive(Clone)]
struct ConstMiss {
    /// Where, as [`at`] names it.
    at: String,
    /// The constants asked for.
    expected: Vec<Value>,
    /// The value, as [`clipped`] shows it.
    got: String,
}

impl ConstMiss {
    fn new(path: &str, expected: Vec<Value>, value: &Value) -> Self {
        Self {
            at: at(path),
            expected,
            got: clipped(value),
        }
    }

    /// What it says: every constant asked for.
    fn message(&self) -> String {
        match &self.expected[..] {
            [one] => format!("{}: expected {one}, got {}", self.at, self.got),
            many => {
                let many: Vec<String> = many.iter().map(Value::to_string).collect();
                format!(
                    "{}: expected one of {}, got {}",
                    self.at,
                    many.join(", "),
                    self.got
                )
            }
        }
    }
}

fn too_deep(path: &str, depth: Depth) -> String {
    if depth.too_deep_in_arguments() {
        format!(
            "{}: the arguments nest deeper than the schema check follows ({MAX_DEPTH} levels)",
            at(path)
        )
    } else if depth.too_many_hops() {
        format!(
            "{}: the schema refers on to itself more than {MAX_HOPS} times at one level",
            at(path)
        )
    } else {
        format!(
            "{}: the schema nests deeper than the check follows ({MAX_FRAMES} levels of \
             references, branches, properties and items)",
            at(path)
        )
    }
}

fn too_long(path: &str) -> String {
    format!(
        "{}: the schema takes too long to check (over {MAX_STEPS} steps)",
        at(path)
    )
}

impl Validator<'_> {
    fn check(
        &self,
        schema: &Value,
        value: &Value,
        path: &mut String,
        depth: Depth,
    ) -> Result<(), String> {
        self.check_within(schema, value, path, depth, &[])
    }

    /// [`check`](Self::check), where `enclosing` are the fields that schemas around this one
    /// require of the same value (this one is their `$ref`, or a branch of theirs): a `null`
    /// for one of them is not a field left out, whatever this schema requires.
    fn check_within(
        &self,
        schema: &Value,
        value: &Value,
        path: &mut String,
        depth: Depth,
        enclosing: &[&str],
    ) -> Result<(), String> {
        let map = match schema {
            Value::Bool(true) => return Ok(()),
            Value::Bool(false) => return Err(format!("{}: no value is allowed here", at(path))),
            Value::Object(map) if map.is_empty() => return Ok(()),
            Value::Object(map) => map,
            _ => return Ok(()),
        };
        if depth.too_deep() {
            return Err(too_deep(path, depth));
        }
        if !self.steps.take() {
            return Err(too_long(path));
        }
        // The fields this schema and those around it require of an object, for the branches
        // and the reference that check it too.
        let mut required_here = Vec::new();
        let branches = ["$ref", "allOf", "anyOf", "oneOf"];
        if value.is_object() && branches.iter().any(|key| map.contains_key(*key)) {
            required_here.extend_from_slice(enclosing);
            required_here.extend(required_names(map));
        }
        if let Some(Value::String(reference)) = map.get("$ref")
            && let Some(target) = self.resolve(reference)
        {
            self.check_within(target, value, path, depth.hop(), &required_here)?;
        }
        if let Some(ty) = map.get("type")
            && !type_matches(ty, value)
        {
            return Err(format!(
                "{}: expected {}, got {}",
                at(path),
                describe_type(ty),
                describe_value(value)
            ));
        }
        if let Some(Value::Array(options)) = map.get("enum")
            && !options.iter().any(|option| same_value(option, value))
        {
            return Err(self.missed(path, options, value));
        }
        if let Some(expected) = map.get("const")
            && !same_value(expected, value)
        {
            return Err(self.missed(path, std::slice::from_ref(expected), value));
        }
        check_integer_format(map, value, path)?;
        check_lengths(map, value, path)?;
        check_bounds(map, value, path)?;
        if let Value::Object(object) = value {
            let required = required_names(map);
            let properties = map.get("properties").and_then(Value::as_object);
            for (name, field) in object {
                // `null` for an optional property is the property left out.
                if field.is_null()
                    && properties.is_some_and(|p| p.contains_key(name))
                    && !required.contains(&name.as_str())
                    && !enclosing.contains(&name.as_str())
                {
                    continue;
                }
                let len = path.len();
                push_field(path, name);
                let result = match properties.and_then(|p| p.get(name)) {
                    Some(property) => self.check(property, field, path, depth.down()),
                    // A field a pattern may name is not judged here (patterns are not).
                    None if map.contains_key("patternProperties") => Ok(()),
                    None => match map.get("additionalProperties") {
                        Some(Value::Bool(false)) => Err(format!("unexpected field `{path}`")),
                        Some(extra) => self.check(extra, field, path, depth.down()),
                        None => Ok(()),
                    },
                };
                path.truncate(len);
                result?;
            }
            // After the fields given: a tagged enum's other variants miss on their tag
            // first, rather than on a field the variant meant does not have.
            for name in &required {
                if !object.contains_key(*name) {
                    return Err(format!("missing required field `{}`", join(path, name)));
                }
            }
        }
        // Positional schemas: `prefixItems`, or `items` as a list (draft-07's tuples, as
        // zod-to-json-schema writes them), then `additionalItems` for the rest.
        let (prefix, rest) = match (map.get("prefixItems"), map.get("items")) {
            (Some(Value::Array(prefix)), rest) => (Some(prefix), rest),
            (_, Some(Value::Array(prefix))) => (Some(prefix), map.get("additionalItems")),
            (_, rest) => (None, rest),
        };
        if let (Value::Array(items), Some(prefix)) = (value, prefix) {
            for (index, (item, item_schema)) in items.iter().zip(prefix).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                let result = self.check(item_schema, item, path, depth.down());
                path.truncate(len);
                result?;
            }
        }
        if let (Value::Array(items), Some(item_schema)) = (value, rest) {
            let skip = prefix.map_or(0, Vec::len);
            for (index, item) in items.iter().enumerate().skip(skip) {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                let result = self.check(item_schema, item, path, depth.down());
                path.truncate(len);
                result?;
            }
        }
        if let Some(Value::Array(all)) = map.get("allOf") {
            for branch in all {
                self.check_within(branch, value, path, depth.hop(), &required_here)?;
            }
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(branches)) = map.get(key) {
                let mut misses = Vec::new();
                let mut matched = false;
                for branch in branches {
                    *self.const_missed.borrow_mut() = None;
                    match self.check_within(branch, value, path, depth.hop(), &required_here) {
                        Ok(()) => {
                            matched = true;
                            break;
                        }
                        Err(error) => misses.push((error, self.const_missed.take())),
                    }
                }
                if !matched && self.steps.spent() {
                    // What a branch failed for is then only that the steps ran out.
                    return Err(too_long(path));
                }
                if !matched {
                    return Err(self.no_branch(branches, value, path, misses));
                }
            }
        }
        Ok(())
    }

    /// What a value no branch of an `anyOf`/`oneOf` took is told: every allowed value when
    /// the branches are constants (an enum's documented variants, `null` for an `Option`),
    /// or when every branch missed on a constant in the same place (the tag of an internally
    /// tagged enum); else what the branch the value came closest to asks for: one it did not
    /// miss on a constant (a tagged enum's other variants miss on their tag), and of those
    /// the one whose error lies deepest.
    #[inline(never)] // kept out of the recursion's frame
    fn no_branch(
        &self,
        branches: &[Value],
        value: &Value,
        path: &str,
        misses: Vec<(String, Option<Box<ConstMiss>>)>,
    ) -> String {
        if let Some(allowed) = constants(self.root, branches, true) {
            return self.missed(path, &allowed, value);
        }
        // An `Option`'s `null` is not what a value that is not null came closest to: what
        // the other branches ask for is told.
        let mut misses = misses;
        if !value.is_null() && misses.len() == branches.len() {
            let others: Vec<_> = (branches.iter().zip(misses))
                .filter(|(branch, _)| !is_null_type(branch))
                .map(|(_, miss)| miss)
                .collect();
            misses = others;
        }
        if let Some(merged) = same_place(&misses) {
            let message = merged.message();
            *self.const_missed.borrow_mut() = Some(merged);
            return message;
        }
        let mut best: Option<(String, Option<Box<ConstMiss>>)> = None;
        for (error, miss) in misses {
            let better = match &best {
                None => true,
                Some((kept, kept_miss)) => {
                    (kept_miss.is_some() && miss.is_none())
                        || (kept_miss.is_some() == miss.is_some() && reach(&error) > reach(kept))
                }
            };
            if better {
                best = Some((error, miss));
            }
        }
        match best {
            Some((error, miss)) => {
                *self.const_missed.borrow_mut() = miss;
                error
            }
            None => format!("{}: no schema matched", at(path)),
        }
    }

    /// The error of `value` at `path`, not one of the constants `expected`, remembered as a
    /// miss on a constant. Kept out of the recursion's frame.
    #[cold]
    #[inline(never)]
    fn missed(&self, path: &str, expected: &[Value], value: &Value) -> String {
        let miss = ConstMiss::new(path, expected.to_vec(), value);
        let message = miss.message();
        *self.const_missed.borrow_mut() = Some(Box::new(miss));
        message
    }

    fn resolve(&self, reference: &str) -> Option<&Value> {
        resolve(self.root, reference)
    }
}

/// The names in an object schema's `required`.
pub(super) fn required_names(map: &serde_json::Map<String, Value>) -> Vec<&str> {
    match map.get("required") {
        Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// The constants `branches` allow, when each is a `const`, an `enum` or `null` (through a
/// local `$ref`), or, when `nested_once`, branches of such (an `Option` of an enum whose
/// variants are documented); `None` when one is anything else.
fn constants(root: &Value, branches: &[Value], nested_once: bool) -> Option<Vec<Value>> {
    let mut allowed = Vec::new();
    for branch in branches {
        let mut branch = branch;
        if let Some(target) = branch
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| resolve(root, r))
        {
            branch = target;
        }
        match (branch.get("const"), branch.get("enum")) {
            (Some(constant), _) => allowed.push(constant.clone()),
            (None, Some(Value::Array(values))) => allowed.extend(values.iter().cloned()),
            // An `Option`'s `null`.
            _ if is_null_type(branch) => {
                allowed.push(Value::Null);
            }
            // An enum of documented variants, through an `Option`'s `$ref`.
            _ => match branch.get("oneOf").or_else(|| branch.get("anyOf")) {
                Some(Value::Array(nested)) if nested_once => {
                    allowed.extend(constants(root, nested, false)?);
                }
                _ => return None,
            },
        }
    }
    Some(allowed)
}

/// Whether `branch` is `{"type": "null"}` (an `Option`'s other branch).
fn is_null_type(branch: &Value) -> bool {
    branch.get("type").and_then(Value::as_str) == Some("null")
}

/// The misses of branches that each missed on a constant in the same place, as one that
/// lists every constant they asked for; `None` unless there are two or more such branches
/// and no other.
fn same_place(misses: &[(String, Option<Box<ConstMiss>>)]) -> Option<Box<ConstMiss>> {
    let mut merged: Option<Box<ConstMiss>> = None;
    for (_, miss) in misses {
        let miss = miss.as_ref()?;
        match &mut merged {
            None => merged = Some(miss.clone()),
            Some(kept) if kept.at == miss.at && kept.got == miss.got => {
                for constant in &miss.expected {
                    if !kept.expected.contains(constant) {
                        kept.expected.push(constant.clone());
                    }
                }
            }
            Some(_) => return None,
        }
    }
    merged.filter(|_| misses.len() > 1)
}

/// How deep in the arguments an error lies: the length of the field it names.
fn reach(error: &str) -> usize {
    error.split('`').nth(1).map_or(0, |field| field.len() + 1)
}

pub(super) fn at(path: &str) -> String {
    if path.is_empty() {
        "arguments".to_owned()
    } else {
        format!("field `{path}`")
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn push_field(path: &mut String, name: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(name);
}

fn type_matches(ty: &Value, value: &Value) -> bool {
    match ty {
        Value::String(name) => single_type_matches(name, value),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .any(|name| single_type_matches(name, value)),
        _ => true,
    }
}

fn single_type_matches(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

fn describe_type(ty: &Value) -> String {
    let article = |name: &str| match name {
        "object" | "array" | "integer" => format!("an {name}"),
        "null" => "null".to_owned(),
        other => format!("a {other}"),
    };
    match ty {
        Value::String(name) => article(name),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .map(article)
            .collect::<Vec<_>>()
            .join(" or "),
        other => other.to_string(),
    }
}

/// Whether `value` is `expected`, numbers compared by value (`3.0` is `3`), as the integer
/// leniency asks of `enum` and `const`.
pub(super) fn same_value(expected: &Value, value: &Value) -> bool {
    match (expected, value) {
        (Value::Number(a), Value::Number(b)) => match (integral(a), integral(b)) {
            (Some(a), Some(b)) => a == b,
            _ => a.as_f64() == b.as_f64(),
        },
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_value(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(key, a)| b.get(key).is_some_and(|b| same_value(a, b)))
        }
        _ => expected == value,
    }
}

/// `value` as JSON, cut short past 80 bytes: an error quotes what was sent, not all of it.
fn clipped(value: &Value) -> String {
    const SHOWN: usize = 80;
    let text = value.to_string();
    if text.len() <= SHOWN {
        return text;
    }
    let cut = (0..=SHOWN)
        .rev()
        .find(|&at| text.is_char_boundary(at))
        .unwrap_or(0);
    format!("{}… ({} bytes)", &text[..cut], text.len())
}

fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.len() <= 40 => format!("the string {s:?}"),
        Value::String(_) => "a string".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
