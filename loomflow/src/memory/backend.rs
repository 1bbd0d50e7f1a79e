//! What the backends share: the checks before storing, the searchable words of a query,
//! and times as stored.

use std::time::SystemTime;

use serde_json::Value;

use super::{MemoryError, Scope};

/// The most words of a query that are searched.
const MAX_WORDS: usize = 32;

/// The query's words: runs of letters and digits, lowercased, each once, in order. Nothing
/// else of the query reaches a backend's search syntax.
pub(crate) fn words(query: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in query.split(|c: char| !c.is_alphanumeric()) {
        let word = word.to_lowercase();
        if !word.is_empty() && !words.contains(&word) {
            words.push(word);
        }
        if words.len() == MAX_WORDS {
            break;
        }
    }
    words
}

/// `an array`, `a string`, … for error messages.
pub(crate) fn json_kind(value: &Value) -> String {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
    .to_owned()
}

/// The checks every backend makes before storing: a scope with an id, a text with
/// something in it, metadata that is an object (`null` becomes `{}`).
pub(crate) fn check_new(scope: &Scope, text: &str, metadata: Value) -> Result<Value, MemoryError> {
    scope.checked()?;
    check_text(scope, text)?;
    check_metadata(scope, metadata)
}

pub(crate) fn check_text(scope: &Scope, text: &str) -> Result<(), MemoryError> {
    if text.trim().is_empty() {
        return Err(MemoryError::EmptyText {
            scope: scope.clone(),
        });
    }
    Ok(())
}

pub(crate) fn check_metadata(scope: &Scope, metadata: Value) -> Result<Value, MemoryError> {
    match metadata {
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        Value::Object(map) => Ok(Value::Object(map)),
        other => Err(MemoryError::BadMetadata {
            scope: scope.clone(),
            found: json_kind(&other),
        }),
    }
}

/// Milliseconds since the Unix epoch, as the backends store times.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A stored time back as a `SystemTime`.
pub(crate) fn from_ms(ms: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_words_survive() {
        assert_eq!(
            words(r#"How does "she" take her coffee? NEAR(x) AND -- ; DROP"#),
            [
                "how", "does", "she", "take", "her", "coffee", "near", "x", "and", "drop"
            ]
        );
        assert!(words("?!  ...").is_empty());
        assert_eq!(words("Café café"), ["café"]);
    }
}
