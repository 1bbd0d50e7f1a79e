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

/// `text` with its control characters (but line ends and tabs) escaped as JSON escapes
/// them, `\u001b`: what the command prints comes from callers, tools and models (an
/// approver's name, an error), and an escape sequence printed as it is would drive the
/// operator's terminal. In `--json` output serde_json has escaped those below U+0020
/// already; the rest (DEL, U+0080 to U+009F) become escapes JSON reads back as they were.
pub(crate) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    let control = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(control) {
        return text.into();
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match control(c) {
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
        .map(|row| row.iter().map(|cell| shown(cell).into_owned()).collect())
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
    use super::shown;

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
    }
}
