//! A coordinator's reply read as a directive (`DONE: 42`, `FINISH`) or as a member's name and
//! its instruction (`researcher: find X`), past the Markdown a model writes around them.

use super::Member;

/// Splits `head: rest` (case-insensitive head), trimming both.
fn split_directive(text: &str) -> (String, String) {
    let text = text.trim();
    match text.split_once(':') {
        Some((head, rest)) => (head.trim().to_owned(), rest.trim().to_owned()),
        None => (text.to_owned(), String::new()),
    }
}

/// Splits `worker: instruction` as [`split_directive`] does, but for a member whose own name
/// holds a colon (`team:a: check it`): there the head is the whole name. The longest such
/// name the reply begins with wins, ignoring case and the quotes or markdown around it. A
/// first line that is a member's whole name (`team:a`) names it, the instruction on the
/// lines after.
pub(crate) fn split_at_member(text: &str, members: &[Member]) -> (String, String) {
    let text = text.trim();
    let quoted = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '*' | '_');
    let named_with_colon = |head: &str| {
        let head = head.trim_matches(quoted);
        (members.iter()).any(|m| m.name.contains(':') && m.name.eq_ignore_ascii_case(head))
    };
    let first_line = text.split('\n').next().unwrap_or_default();
    // A first line that is a member's whole name, colons and all: the name, and the lines
    // after it.
    let whole = first_line.trim().trim_matches(quoted);
    if let Some(member) = members.iter().find(|m| m.name.eq_ignore_ascii_case(whole)) {
        let rest = text.get(first_line.len()..).unwrap_or_default();
        return (member.name.clone(), past_blank_lines(rest).to_owned());
    }
    let longest =
        (first_line.match_indices(':').rev()).find(|&(at, _)| named_with_colon(&text[..at]));
    let (head, rest) = match longest {
        Some((at, _)) => (&text[..at], &text[at + 1..]),
        None => text.split_once(':').unwrap_or((text, "")),
    };
    let head = head.trim();
    if head.contains('\n') {
        return (head.to_owned(), rest.trim().to_owned());
    }
    // `**researcher: find X**`: the line's emphasis is not the instruction's.
    let (said, others) = rest.split_once('\n').unwrap_or((rest, ""));
    let said = unemphasised(first_line.trim(), head, said.trim());
    // The lines after it as written: blank lines and indentation are the instruction's.
    let rest = match (said.is_empty(), others.trim().is_empty()) {
        (_, true) => said.to_owned(),
        (true, false) => past_blank_lines(others).to_owned(),
        (false, false) => format!("{said}\n{}", others.trim_end()),
    };
    (head.to_owned(), rest)
}

/// `text` from its first line that is not blank, as written (its indentation kept), without
/// what trails it.
fn past_blank_lines(mut text: &str) -> &str {
    while let Some((line, rest)) = text.split_once('\n') {
        if !line.trim().is_empty() {
            break;
        }
        text = rest;
    }
    text.trim_end()
}

/// `line` without a list item's bullet or number (`- `, `* `, `+ `, `1. `, `2) `).
fn without_bullet(line: &str) -> &str {
    let line = line.trim_start();
    for bullet in ["- ", "* ", "+ "] {
        if let Some(item) = line.strip_prefix(bullet) {
            return item.trim_start();
        }
    }
    let numbered = line.trim_start_matches(|c: char| c.is_ascii_digit());
    let item = (numbered.len() < line.len())
        .then(|| (numbered.strip_prefix(". ")).or_else(|| numbered.strip_prefix(") ")))
        .flatten();
    item.map_or(line, str::trim_start)
}

/// What follows the colon of a line's directive or member name, `rest` (trimmed), without
/// the emphasis marks the line's markdown leaves there: `**DONE:** 42` and `**DONE: 42**`
/// both give `42`. Marks that open emphasis of the text's own (`DONE: *42* it is`) stay,
/// and so do a list bullet's (`* DONE: *42*`).
fn unemphasised<'a>(line: &str, head: &str, rest: &'a str) -> &'a str {
    // The line's opening marks, after a list item's bullet (`- **DONE:** 42`). Marks followed
    // by a space open a list item, not emphasis (`* DONE: the answer is *42*`).
    let line = without_bullet(line);
    let marks = line.trim_start_matches(['*', '_']);
    let opening = line.get(..line.len() - marks.len()).unwrap_or_default();
    let opens = !opening.is_empty() && !marks.starts_with(char::is_whitespace);
    // `**DONE:** 42` leaves the closing marks after the colon, followed by a space; without
    // marks opening the line, they are the text's own (`researcher: * find X`, a bullet).
    let after_marks = rest.trim_start_matches(['*', '_']);
    let closing_after_colon = opens
        && after_marks.len() < rest.len()
        && (after_marks.is_empty() || after_marks.starts_with(char::is_whitespace));
    let closed = closing_after_colon || head.trim_end().ends_with(['*', '_']);
    let mut rest = if closing_after_colon {
        after_marks.trim_start()
    } else {
        rest
    };
    // `**DONE: 42**`, the whole line emphasised: the closing emphasis (the opening marks
    // reversed) is the text's end.
    let emphasis = opens && !closed;
    if emphasis {
        let closing: String = opening.chars().rev().collect();
        rest = rest
            .strip_suffix(closing.as_str())
            .map_or(rest, str::trim_end);
    }
    rest
}

/// Reads a coordinator's directive `word` (`DONE`, `FINISH`, `ACCEPT`): the reply's first
/// line is the word, or starts with `word:`, ignoring case and the punctuation or markdown
/// around the word (`Done.`, `**DONE**: 42`). Returns what follows it (the rest of that line
/// after the colon, then the other lines), trimmed; `None` when the reply is not the
/// directive.
pub(crate) fn directive(reply: &str, word: &str) -> Option<String> {
    let reply = reply.trim();
    let (first, others) = reply.split_once('\n').unwrap_or((reply, ""));
    let (head, rest) = split_directive(first);
    let word_alone = head.trim_matches(|c: char| !c.is_alphanumeric());
    if !word_alone.eq_ignore_ascii_case(word) {
        return None;
    }
    let rest = unemphasised(first.trim_end(), &head, &rest);
    let others = others.trim();
    Some(match (rest.is_empty(), others.is_empty()) {
        (_, true) => rest.to_owned(),
        (true, false) => others.to_owned(),
        (false, false) => format!("{rest}\n{others}"),
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::members;
    use super::{directive, split_at_member};

    #[test]
    fn a_directive_is_the_first_word_of_the_first_line() {
        assert_eq!(directive("DONE", "done").as_deref(), Some(""));
        assert_eq!(directive("Done.", "done").as_deref(), Some(""));
        assert_eq!(directive("**DONE**: 42", "done").as_deref(), Some("42"));
        assert_eq!(directive("**DONE:** 42", "done").as_deref(), Some("42"));
        // The whole line emphasised: the closing marks are not the answer's.
        assert_eq!(directive("**DONE: 42**", "done").as_deref(), Some("42"));
        assert_eq!(directive("_DONE: 42_", "done").as_deref(), Some("42"));
        assert_eq!(directive("*_DONE: 42_*", "done").as_deref(), Some("42"));
        // A list item is no emphasis: the answer's own closing mark stays.
        assert_eq!(
            directive("* DONE: the answer is *42*", "done").as_deref(),
            Some("the answer is *42*")
        );
        assert_eq!(
            directive("**FINISH: The answer is 42.**\nmore", "finish").as_deref(),
            Some("The answer is 42.\nmore")
        );
        // An answer that ends in emphasis of its own keeps it.
        assert_eq!(
            directive("DONE: a **b**", "done").as_deref(),
            Some("a **b**")
        );
        assert_eq!(
            directive("**DONE**: a **b**", "done").as_deref(),
            Some("a **b**")
        );
        assert_eq!(directive("done: a\nb", "done").as_deref(), Some("a\nb"));
        assert_eq!(
            directive("DONE\nthe answer", "done").as_deref(),
            Some("the answer")
        );
        assert_eq!(directive("Done. Now check the totals", "done"), None);
        assert_eq!(directive("check it\nDONE: x", "done"), None);
        // An answer that starts with emphasis of its own keeps it.
        assert_eq!(directive("DONE: **42**", "done").as_deref(), Some("**42**"));
        assert_eq!(
            directive("DONE: _really_ done", "done").as_deref(),
            Some("_really_ done")
        );
        assert_eq!(directive("**DONE:**", "done").as_deref(), Some(""));
        assert_eq!(
            directive("- **FINISH:** 42", "finish").as_deref(),
            Some("42")
        );
        assert_eq!(directive("* **DONE: 42**", "done").as_deref(), Some("42"));
    }

    #[test]
    fn a_worker_named_in_an_emphasised_line_gets_the_instruction_without_its_marks() {
        let team = members(&["researcher", "team:a"]);
        let split = |text: &str| split_at_member(text, &team);
        let said = |head: &str, rest: &str| (head.to_owned(), rest.to_owned());
        assert_eq!(
            split("**researcher: find X**"),
            said("**researcher", "find X")
        );
        assert_eq!(
            split("**researcher:** find X\nthen Y"),
            said("**researcher", "find X\nthen Y")
        );
        assert_eq!(split("__team:a: check it__"), said("__team:a", "check it"));
        // The instruction's own emphasis stays.
        assert_eq!(
            split("researcher: find *all* of X"),
            said("researcher", "find *all* of X")
        );
        assert_eq!(
            split("researcher: **X** first"),
            said("researcher", "**X** first")
        );
        assert_eq!(
            split("* researcher: find *X*"),
            said("* researcher", "find *X*")
        );
        assert_eq!(
            split("researcher: * find X\n* find Y"),
            said("researcher", "* find X\n* find Y")
        );
        // The lines after the first are the instruction's as written.
        assert_eq!(
            split("researcher: find X\n\nthen Y"),
            said("researcher", "find X\n\nthen Y")
        );
        assert_eq!(
            split("coder: write\n    def f():\n        pass"),
            said("coder", "write\n    def f():\n        pass")
        );
        assert_eq!(
            split("coder:\n\n    def f():\n        pass"),
            said("coder", "    def f():\n        pass")
        );
        // A list item's bullet or number is not emphasis.
        for line in ["- **researcher:** find X", "1. **researcher: find X**"] {
            assert_eq!(split(line).1, "find X", "{line}");
        }
    }
}
