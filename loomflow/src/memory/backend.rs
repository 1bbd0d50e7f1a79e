//! What the backends share: the checks before storing, the searchable words of a query,
//! and times as stored.

use std::time::SystemTime;

use serde_json::Value;
use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

use super::{MemoryError, MemoryId, Scope};

/// The most words of a query that are searched, after its stop words are dropped.
pub(crate) const MAX_WORDS: usize = 64;

/// Common English words that say nothing about what to recall: dropped from every query,
/// so that a long message's cap ([`MAX_WORDS`]) is spent on the words that name something.
/// They include PostgreSQL's English stop words, which its text search drops from queries
/// and texts alike: a query of only such words finds nothing on every backend. Sorted.
const STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "also",
    "am",
    "an",
    "and",
    "any",
    "are",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can",
    "could",
    "did",
    "do",
    "does",
    "doing",
    "don",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "has",
    "have",
    "having",
    "he",
    "her",
    "here",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "i",
    "if",
    "in",
    "into",
    "is",
    "it",
    "its",
    "itself",
    "just",
    "me",
    "more",
    "most",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "now",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "s",
    "same",
    "she",
    "should",
    "so",
    "some",
    "such",
    "t",
    "than",
    "that",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "these",
    "they",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "us",
    "very",
    "was",
    "we",
    "were",
    "what",
    "when",
    "where",
    "which",
    "while",
    "who",
    "whom",
    "why",
    "will",
    "with",
    "would",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// `word` lowercased a character at a time, as PostgreSQL's text search lowercases it: `İ`
/// is `i` (not `i` + U+0307) and a final `Σ` is `σ`, so a query's word is the text's word.
fn lowercase(word: &str) -> String {
    word.chars()
        .flat_map(|c| if c == '\u{130}' { 'i' } else { c }.to_lowercase())
        .collect()
}

/// Whether `c` belongs to a word: a letter or digit, or a combining mark (`\p{M}`), so that
/// an accent typed as its own code point (`e` + U+0301) or the dot of `İ` stays in its word.
fn in_word(c: char) -> bool {
    c.is_alphanumeric() || c.general_category_group() == GeneralCategoryGroup::Mark
}

/// The query's words: runs of letters, digits and combining marks, in Unicode's composed
/// form (NFC), lowercased a character at a time, each once, in order, without common English
/// stop words, at most [`MAX_WORDS`]. Nothing else of the query reaches a backend's search
/// syntax.
pub(crate) fn words(query: &str) -> Vec<String> {
    let query: String = query.nfc().collect();
    let mut words: Vec<String> = Vec::new();
    // Split first, then lowercase: lowercasing can turn a letter into a letter and a mark,
    // which must not split the word.
    for word in query.split(|c: char| !in_word(c)).filter(|w| !w.is_empty()) {
        let word = lowercase(word);
        if STOP_WORDS.binary_search(&word.as_str()).is_err() && !words.contains(&word) {
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

pub(crate) use super::text::check_text;

/// The checks every backend makes before storing: a scope with an id, a text with
/// something in it, metadata that is an object (`null` becomes `{}`).
pub(crate) fn check_new(scope: &Scope, text: &str, metadata: Value) -> Result<Value, MemoryError> {
    scope.checked()?;
    check_text(scope, text)?;
    check_metadata(scope, metadata)
}

pub(crate) fn check_metadata(scope: &Scope, metadata: Value) -> Result<Value, MemoryError> {
    match metadata {
        Value::Null => Ok(Value::Object(serde_json::Map::new())),
        // Kept as JSON text, read back only this deep (see `json_depth`).
        Value::Object(_) if !crate::json_depth::value_fits(&metadata, 0) => {
            Err(MemoryError::MetadataTooDeep {
                scope: scope.clone(),
                limit: crate::json_depth::MAX_DEPTH,
            })
        }
        Value::Object(map) => Ok(Value::Object(map)),
        other => Err(MemoryError::BadMetadata {
            scope: scope.clone(),
            found: json_kind(&other),
        }),
    }
}

/// `ids` without repeats, in the order they first come.
pub(crate) fn distinct(ids: &[MemoryId]) -> Vec<MemoryId> {
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    ids.iter().copied().filter(|id| seen.insert(*id)).collect()
}

/// Milliseconds since the Unix epoch, as the backends store times.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A stored time back as a `SystemTime`.
pub(crate) fn from_ms(ms: i64) -> SystemTime {
    crate::runtime::clock::from_unix_ms(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_words_survive() {
        assert_eq!(
            words(r#"How does "she" take her coffee? NEAR(x) AND -- ; DROP"#),
            ["take", "coffee", "near", "x", "drop"]
        );
        assert!(words("?!  ...").is_empty());
        assert_eq!(words("Café café"), ["café"]);
    }

    #[test]
    fn stop_words_are_sorted_lowercase_words() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(
            STOP_WORDS
                .iter()
                .all(|w| w.chars().all(|c| c.is_ascii_lowercase()))
        );
    }

    #[test]
    fn a_query_of_only_stop_words_has_no_words() {
        assert!(words("Who is she?").is_empty());
        assert!(words("more of the same, again").is_empty());
        assert_eq!(words("Who is Ada?"), ["ada"]);
    }

    #[test]
    fn combining_marks_stay_in_their_word() {
        // `İ` is `i`, as the backends lowercase it (not `i` + U+0307, which split it).
        assert_eq!(words("İstanbul"), ["istanbul"]);
        assert_eq!(words("İZMİR"), ["izmir"]);
        // An accent typed as its own code point is composed with its letter.
        assert_eq!(words("cafe\u{301} au lait"), ["café", "au", "lait"]);
        // A mark with no composed form stays in its word.
        assert_eq!(words("x\u{301}y q\u{323}"), ["x\u{301}y", "q\u{323}"]);
        // A virama inside a Hindi word.
        assert_eq!(words("हिन्दी"), ["हिन्दी"]);
    }

    #[test]
    fn the_cap_counts_words_that_are_not_stop_words() {
        let filler: Vec<String> = (0..MAX_WORDS - 1).map(|i| format!("w{i}")).collect();
        let query = format!("the {} and of peanuts w0 extra", filler.join(" a "));
        let found = words(&query);
        assert_eq!(found.len(), MAX_WORDS);
        assert_eq!(found.last().map(String::as_str), Some("peanuts"));
    }
}
