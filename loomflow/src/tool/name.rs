//! Tool names as model providers accept them.

/// Whether providers accept `name` as a tool's name: 1 to 64 of `[a-zA-Z0-9_-]`.
pub(crate) fn is_callable(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `prefix` + `name`, with every character outside `[a-zA-Z0-9_-]` turned into `_` and cut
/// to 64 characters, as model providers require of a tool's name (`files.read` becomes
/// `files_read`). Whoever makes such a name keeps the way back to what it names.
pub(crate) fn callable_name(prefix: &str, name: &str) -> String {
    prefix
        .chars()
        .chain(name.chars())
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect()
}
