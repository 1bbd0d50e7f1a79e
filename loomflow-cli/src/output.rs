//! Printing: aligned tables for people, JSON for scripts.

use loomflow::runtime::{RunRecord, Utc};
use serde::Serialize;

/// How results are printed.
pub(crate) struct Output {
    pub(crate) json: bool,
}

impl Output {
    /// Prints `value` as pretty JSON.
    pub(crate) fn json(&self, value: &impl Serialize) {
        match serde_json::to_string_pretty(value) {
            Ok(text) => println!("{text}"),
            Err(error) => eprintln!("loomflow: cannot print JSON: {error}"),
        }
    }

    /// Prints a one-line confirmation, or `value` as JSON.
    pub(crate) fn done(&self, message: &str, value: &impl Serialize) {
        if self.json {
            self.json(value);
        } else {
            println!("{message}");
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
        println!("{}", padded.join("  ").trim_end());
    };
    line(header.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
