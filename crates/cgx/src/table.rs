//! Plain-text tables and a minimal JSON writer for the reports.

use std::fmt::Write;

/// A table with a header, printed with right-aligned numeric columns.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Table { header: header.iter().map(|s| s.to_string()).collect(), rows: Vec::new() }
    }

    /// Appends a row (as many cells as the header).
    pub fn row(&mut self, cells: Vec<String>) {
        debug_assert_eq!(cells.len(), self.header.len());
        self.rows.push(cells);
    }

    /// The table as text: numeric columns right-aligned, text columns left-aligned.
    pub fn render(&self) -> String {
        let numeric: Vec<bool> =
            (0..self.header.len()).map(|c| self.rows.iter().all(|r| r[c].trim().parse::<f64>().is_ok())).collect();
        let widths: Vec<usize> = (0..self.header.len())
            .map(|c| {
                self.rows
                    .iter()
                    .map(|r| r[c].chars().count())
                    .chain([self.header[c].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            for (c, cell) in cells.iter().enumerate() {
                let pad = widths[c] - cell.chars().count();
                let sep = if c == 0 { "" } else { "  " };
                if numeric[c] {
                    let _ = write!(out, "{sep}{}{cell}", " ".repeat(pad));
                } else {
                    let _ = write!(out, "{sep}{cell}{}", " ".repeat(pad));
                }
            }
            out.push('\n');
        };
        line(&mut out, &self.header);
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        line(&mut out, &rule);
        for r in &self.rows {
            line(&mut out, r);
        }
        out
    }
}

/// A JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number (non-finite values become `null`).
pub fn json_number(x: f64) -> String {
    if x.is_finite() { format!("{x}") } else { "null".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align() {
        let mut t = Table::new(&["phase", "ms"]);
        t.row(vec!["build".into(), "12.5".into()]);
        t.row(vec!["eval".into(), "3.0".into()]);
        assert_eq!(t.render(), "phase    ms\n-----  ----\nbuild  12.5\neval    3.0\n");
        let mut t = Table::new(&["a", "b"]);
        t.row(vec!["1".into(), "x".into()]);
        t.row(vec!["22".into(), "yyy".into()]);
        assert_eq!(t.render(), " a  b  \n--  ---\n 1  x  \n22  yyy\n");
    }

    #[test]
    fn json_escapes() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\u0001""#);
        assert_eq!(json_number(f64::NAN), "null");
        assert_eq!(json_number(1.5), "1.5");
    }
}
