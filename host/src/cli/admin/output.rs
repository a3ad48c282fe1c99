//! How admin commands print: `-o table` (the default: aligned columns for people, every
//! value a machine, an attestor or the host supplied escaped) or `-o json` (the API's answer,
//! for scripts; `--json` is the same).
//!
//! Tables are plain aligned columns rather than a table crate's boxes: the output stays
//! greppable and `cut`-able, every cell passes through [`escape`] first, and the build takes
//! no new dependency for it.

use std::io::Write;
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::Serialize;

/// `-o`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(in crate::cli) enum Format {
    /// Aligned columns (lists) or labelled lines (one object), for people.
    #[default]
    Table,
    /// The API's JSON answer.
    Json,
}

/// The output flags every admin command takes.
#[derive(Debug, Clone, Copy, Args)]
pub(in crate::cli) struct OutputArgs {
    /// How to print: `table` for people, `json` for scripts.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    output: Format,
    /// The same as `-o json`.
    #[arg(long)]
    json: bool,
}

impl OutputArgs {
    /// Whether to print JSON.
    pub(in crate::cli) fn json(self) -> bool {
        self.json || self.output == Format::Json
    }

    /// Prints `value`: the API's JSON with `-o json`, else what `human` writes of it.
    pub(in crate::cli) fn print<T: Serialize + ?Sized>(
        self,
        out: &mut (dyn Write + Send),
        value: &T,
        human: impl FnOnce(&mut (dyn Write + Send), &T) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        if self.json() {
            write_json(out, value)
        } else {
            human(out, value)
        }
    }
}

/// Aligned columns: a header and rows of cells, each column as wide as its widest cell, the
/// last one unpadded.
#[derive(Debug)]
pub(in crate::cli) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column headers.
    pub(in crate::cli) fn new(header: &[&str]) -> Self {
        Self {
            rows: vec![header.iter().map(|h| (*h).to_owned()).collect()],
        }
    }

    /// Appends a row; its cells must already be escaped ([`cell`], [`time`]).
    pub(in crate::cli) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Writes the table.
    pub(in crate::cli) fn write(&self, out: &mut (dyn Write + Send)) -> anyhow::Result<()> {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &self.rows {
            let mut line = String::new();
            for (c, value) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(value);
                } else {
                    let pad = widths[c].saturating_sub(value.chars().count());
                    line.push_str(value);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
    }
}

/// Writes `value` as pretty JSON.
pub(in crate::cli) fn write_json<T: Serialize + ?Sized>(
    out: &mut (dyn Write + Send),
    value: &T,
) -> anyhow::Result<()> {
    writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
    Ok(())
}

/// Writes labelled lines (`label  value`), labels padded to the longest.
pub(in crate::cli) fn write_fields(
    out: &mut (dyn Write + Send),
    fields: &[(&str, String)],
) -> anyhow::Result<()> {
    let width = fields.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
    for (label, value) in fields {
        writeln!(out, "{label:<width$}  {value}")?;
    }
    Ok(())
}

/// An optional text for a terminal: escaped, `-` when absent.
pub(in crate::cli) fn cell(v: Option<&str>) -> String {
    v.map_or_else(|| "-".to_owned(), escape)
}

/// `s` with every character that could steer a terminal or hide text (C0 and C1 controls, DEL,
/// bidirectional overrides) written as `\u{..}`, and `\` doubled so the escapes are
/// unambiguous.
pub(in crate::cli) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let steers = c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if c == '\\' {
            out.push_str("\\\\");
        } else if steers {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// A database time (ms since the Unix epoch) as RFC 3339, or `-`.
pub(in crate::cli) fn time(ms: Option<i64>) -> String {
    match ms.and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) => {
            humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms))
                .to_string()
        }
        None => "-".to_owned(),
    }
}

/// `n things`, singular for one.
pub(in crate::cli) fn count(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_do_not_pad_the_last_column() {
        let mut t = Table::new(&["ID", "STATE"]);
        t.row(vec!["node_1".into(), "active".into()]);
        t.row(vec!["n".into(), "-".into()]);
        let mut out = Vec::new();
        t.write(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "ID      STATE\nnode_1  active\nn       -\n"
        );
    }

    #[test]
    fn steering_characters_are_escaped() {
        assert_eq!(escape("a\u{1b}[31mb\\"), "a\\u{1b}[31mb\\\\");
        assert_eq!(escape("\u{202e}x"), "\\u{202e}x");
        assert_eq!(cell(None), "-");
        assert_eq!(time(Some(1_700_000_000_000)), "2023-11-14T22:13:20Z");
        assert_eq!(time(None), "-");
    }
}
