//! Printing: aligned tables for people, JSON for scripts.

use std::io::Write;

use loomflow::runtime::{RunRecord, Utc};
use serde::Serialize;

/// Prints to standard output, as `print!` does, but a reader that went away
/// (`loomflow runs | head -1`) ends the process quietly with 0, as a command read by `head`
/// should, instead of a panic; any other failure to write ends it with 1.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_out(format_args!($($arg)*)) };
}

/// [`out!`] and a new line.
macro_rules! outln {
    () => { $crate::output::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {out, outln};

pub(crate) fn write_out(text: std::fmt::Arguments<'_>) {
    let text = text.to_string();
    let text = shown(&text);
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("loomflow: cannot write the output: {error}");
        std::process::exit(1);
    }
}

/// `text` with its control characters (but line ends and tabs) and the marks that reorder
/// bidirectional text escaped as JSON escapes them, `\u001b`: what the command prints comes
/// from callers, tools and models (an approver's name, an error), and an escape sequence
/// printed as it is would drive the operator's terminal (a bidi override, make the text
/// read otherwise than it is). In `--json` output serde_json has escaped those below U+0020
/// already; the rest (DEL, U+0080 to U+009F, the bidi marks) become escapes JSON reads back
/// as they were.
pub(crate) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    escaped(text, |c| {
        c.is_control() && c != '\n' && c != '\t' || is_bidi_mark(c)
    })
}

/// A table's cell, as [`shown`] but with its line ends and tabs escaped too: a cell that
/// broke its line would print rows of its own (a thread named `x\nord_7  refund
/// completed`, an approver's name that fakes an audit entry).
pub(crate) fn cell(text: &str) -> std::borrow::Cow<'_, str> {
    escaped(text, |c| c.is_control() || is_bidi_mark(c))
}

/// The invisible marks that reorder the bidirectional text after them (the embeddings and
/// overrides, U+202A to U+202E, and the isolates, U+2066 to U+2069). The plain direction
/// marks right-to-left text carries (U+200E, U+200F, U+061C) are shown as they are.
fn is_bidi_mark(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escaped(text: &str, escape: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(&escape) {
        return text.into();
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match escape(c) {
            true => escaped.push_str(&format!("\\u{:04x}", u32::from(c))),
            false => escaped.push(c),
        }
    }
    escaped.into()
}

/// How results are printed.
pub(crate) struct Output {
    pub(crate) json: bool,
}

impl Output {
    /// Prints `value` as pretty JSON.
    pub(crate) fn json(&self, value: &impl Serialize) {
        match serde_json::to_string_pretty(value) {
            Ok(text) => outln!("{text}"),
            Err(error) => eprintln!("loomflow: cannot print JSON: {error}"),
        }
    }

    /// Prints a one-line confirmation, or `value` as JSON.
    pub(crate) fn done(&self, message: &str, value: &impl Serialize) {
        if self.json {
            self.json(value);
        } else {
            outln!("{message}");
        }
    }
}

/// A time in milliseconds since the epoch, for people.
pub(crate) fn time(ms: u64) -> String {
    Utc::from_ms(ms).to_string()
}

/// What a run waits for, in a few words: `review until 2026-…`, `until 2026-…`, or `-`.
pub(crate) fn waits(record: &RunRecord) -> String {
    let names = record.waiting_on.join(", ");
    match (names.is_empty(), record.wake_at_ms) {
        (true, None) => "-".to_owned(),
        (true, Some(at)) => format!("until {}", time(at)),
        (false, None) => names,
        (false, Some(at)) => format!("{names} until {}", time(at)),
    }
}

/// Prints rows as columns padded to their widest cell.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) {
    // Escaped before they are measured, so that the columns line up as printed.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|text| cell(text).into_owned()).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        outln!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::{cell, shown};

    #[test]
    fn control_characters_are_escaped_but_line_ends_and_tabs() {
        assert_eq!(shown("a\tb\n"), "a\tb\n");
        assert_eq!(
            shown("x\u{1b}]52;c;AAAA\u{7}y"),
            "x\\u001b]52;c;AAAA\\u0007y"
        );
        assert_eq!(shown("tab\r\u{9b}\u{7f}"), "tab\\u000d\\u009b\\u007f");
        // In `--json` output: an escape that reads back as the character it was.
        let json = serde_json::to_string(&"by \u{9b}31m\u{7f}").unwrap();
        let read: String = serde_json::from_str(&shown(&json)).unwrap();
        assert_eq!(read, "by \u{9b}31m\u{7f}");
        // A right-to-left override would show `exe.txt` for `txt.exe`; a plain direction
        // mark in right-to-left text is shown as it is.
        assert_eq!(shown("\u{202e}txt.exe"), "\\u202etxt.exe");
        assert_eq!(shown("\u{5e9}\u{200f}1"), "\u{5e9}\u{200f}1");
    }

    #[test]
    fn a_cell_keeps_to_its_line() {
        assert_eq!(cell("ada\n 99  decision"), "ada\\u000a 99  decision");
        assert_eq!(cell("a\tb\r"), "a\\u0009b\\u000d");
        assert_eq!(cell("ord_1"), "ord_1");
    }
}
