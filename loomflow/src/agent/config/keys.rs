//! Where things are in the file: positions, every unknown key, the key a serde error is
//! about; and the small value parsers the file needs.

use std::ops::Range;
use std::time::Duration;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::error::{ConfigProblem, ConfigProblemKind};
use super::file::{self, BudgetTable, ContextTable, File, PRICE_FIELDS, PermissionsTable};

/// The line and column (both from 1; the column in characters) of byte `offset` of `text`.
pub(super) fn position(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = text.get(..offset).unwrap_or_default();
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    let column = before.get(line_start..).unwrap_or_default().chars().count();
    (before.matches('\n').count() + 1, column + 1)
}

/// Removes from `doc` every key the file's types do not have, reporting each one, so that
/// all of them are reported at once (serde would stop at the first).
///
/// Returns the spans of the prices that lost a key: a price missing `output` there may just
/// be `ouput` misspelled, already reported.
pub(super) fn remove_unknown(
    doc: &mut DeTable<'_>,
    text: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Vec<Range<usize>> {
    let mut emptied = Vec::new();
    let budget = file::fields_of::<BudgetTable>();
    let permissions = file::fields_of::<PermissionsTable>();
    // A top-level key that belongs in a table is pointed there (`budget.max_cost_usd = ..`
    // is valid TOML at the top level).
    let context = file::fields_of::<ContextTable>();
    let elsewhere = [
        ("budget", budget),
        ("permissions", permissions),
        ("context", context),
    ];
    check(
        doc,
        "",
        file::fields_of::<File>(),
        &elsewhere,
        text,
        problems,
    );
    if let Some(DeValue::Table(table)) = doc.get_mut("budget").map(Spanned::get_mut) {
        check(table, "budget", budget, &[], text, problems);
        if let Some(price) = table.get_mut("prices_per_million") {
            let span = price.span();
            if let DeValue::Table(price) = price.get_mut()
                && check(
                    price,
                    "budget.prices_per_million",
                    PRICE_FIELDS,
                    &[],
                    text,
                    problems,
                )
            {
                emptied.push(span);
            }
        }
    }
    if let Some(DeValue::Table(table)) = doc.get_mut("permissions").map(Spanned::get_mut) {
        check(table, "permissions", permissions, &[], text, problems);
    }
    if let Some(DeValue::Table(table)) = doc.get_mut("context").map(Spanned::get_mut) {
        check(table, "context", context, &[], text, problems);
    }
    if let Some(DeValue::Table(prices)) = doc.get_mut("prices").map(Spanned::get_mut) {
        for (model, price) in prices.iter_mut() {
            let span = price.span();
            if let DeValue::Table(price) = price.get_mut() {
                let path = format!("prices.{}", quoted(model.get_ref()));
                if check(price, &path, PRICE_FIELDS, &[], text, problems) {
                    emptied.push(span);
                }
            }
        }
    }
    emptied
}

/// Reports and removes the keys of `table` (at `path`) that are not in `known`; returns
/// whether there were any.
fn check(
    table: &mut DeTable<'_>,
    path: &str,
    known: &[&str],
    elsewhere: &[(&str, &[&str])],
    text: &str,
    problems: &mut Vec<ConfigProblem>,
) -> bool {
    let unknown: Vec<(String, usize)> = table
        .keys()
        .filter(|key| !known.contains(&key.get_ref().as_ref()))
        .map(|key| (key.get_ref().to_string(), key.span().start))
        .collect();
    let found = !unknown.is_empty();
    for (key, offset) in unknown {
        table.remove(key.as_str());
        let suggestion = elsewhere
            .iter()
            .find(|(_, fields)| fields.contains(&key.as_str()))
            .map(|(table, _)| format!("{table}.{key}"))
            .or_else(|| closest(&key, known).map(str::to_owned));
        let kind = ConfigProblemKind::UnknownKey {
            table: path.to_owned(),
            key,
            suggestion,
        };
        problems.push(ConfigProblem::new(kind, Some(position(text, offset))));
    }
    found
}

/// The dotted path of the deepest key whose value (or name) covers byte `offset`.
pub(super) fn key_at(table: &DeTable<'_>, offset: usize) -> Option<String> {
    table.iter().find_map(|(key, value)| {
        let name = quoted(key.get_ref());
        if let DeValue::Table(inner) = value.get_ref()
            && let Some(rest) = key_at(inner, offset)
        {
            return Some(format!("{name}.{rest}"));
        }
        (value.span().contains(&offset) || key.span().contains(&offset)).then_some(name)
    })
}

/// A key as it is written in a dotted path: bare when it can be, quoted otherwise.
pub(super) fn quoted(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        key.to_owned()
    } else {
        format!("{key:?}")
    }
}

/// The known key closest to `key`, when it is close: a few edits away (a third of its
/// length, at least one), or else the start or the whole of a known key (`max_cost` for
/// `max_cost_usd`).
pub(super) fn closest<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = (key.chars().count() / 3).max(1);
    let near = |candidate: &str| {
        edit_distance(key, candidate) <= limit
            || (key.len() >= 4 && (candidate.starts_with(key) || key.starts_with(candidate)))
    };
    known
        .iter()
        .copied()
        .filter(|candidate| near(candidate))
        .min_by_key(|candidate| edit_distance(key, candidate))
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// A duration written as number-unit pairs: `"30s"`, `"2m"`, `"1h"`, `"500ms"`, `"1m30s"`,
/// `"1.5s"`. `None` when it is not one.
pub(super) fn parse_duration(text: &str) -> Option<Duration> {
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut seconds = 0.0;
    while !rest.is_empty() {
        let split = rest.find(|c: char| !is_number(c)).unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        let number: f64 = number.parse().ok()?;
        let split = tail.find(is_number).unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(split);
        seconds += number
            * match unit {
                "ms" => 0.001,
                "s" => 1.0,
                "m" | "min" => 60.0,
                "h" => 3600.0,
                _ => return None,
            };
        rest = tail;
    }
    Duration::try_from_secs_f64(seconds).ok()
}
