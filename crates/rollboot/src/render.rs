//! The one way rollboot's reports are rendered: text for a person and JSON for a program, both
//! from the same value.
//!
//! Owns [`Output`] (the `-o/--output` choice every reporting command takes) and [`Render`],
//! which a report implements with its text form; its JSON form is its `serde::Serialize`. A
//! command builds its report (a plain value), then [`render`]s it: it must never print parts
//! of one form and not the other, nor print anything itself. Also the pieces the text forms
//! share ([`instant`], [`table`]) and [`sorted_keys`], for the JSON forms printed sorted.

use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};

/// How a report is written out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// Human-readable text.
    #[default]
    Text,
    /// One JSON object (pretty-printed).
    Json,
}

/// A report with a text form; its JSON form is its serialization.
pub trait Render: Serialize {
    /// The text a person reads, ending with a newline.
    fn text(&self) -> String;
}

/// `report` written as `output` asks, ending with a newline.
pub fn render<R: Render + ?Sized>(report: &R, output: Output) -> String {
    match output {
        Output::Text => report.text(),
        Output::Json => {
            let mut s = serde_json::to_string_pretty(report).unwrap_or_else(|e| {
                serde_json::json!({"error": format!("the report cannot be written as JSON: {e}")})
                    .to_string()
            });
            s.push('\n');
            s
        }
    }
}

/// An instant as the text forms print it: RFC 3339 in UTC, whole seconds (`2026-03-01T02:00:00Z`).
pub fn instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Writes `rows` under `header` in columns two spaces apart, each line without trailing blanks.
pub fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut line = |cells: &[&str]| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = widths[i]);
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    line(header);
    for r in rows {
        line(&r.iter().map(String::as_str).collect::<Vec<_>>());
    }
}

/// Serializes `value` with the keys of every object in alphabetical order, for the reports
/// whose JSON has always been printed so (`check-config`, `simulate`: their objects were
/// built as `serde_json::Value`s, whose maps are sorted). For `#[serde(serialize_with)]`.
pub fn sorted_keys<T: Serialize, S: Serializer>(value: &T, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(value)
        .map_err(serde::ser::Error::custom)?
        .serialize(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Sample {
        n: u32,
    }

    impl Render for Sample {
        fn text(&self) -> String {
            format!("n is {}\n", self.n)
        }
    }

    #[test]
    fn a_table_pads_every_column_but_the_last_and_trims_each_line() {
        let mut out = String::new();
        table(
            &mut out,
            &["NAME", "STATE", "NOTE"],
            &[
                vec!["node-10".into(), "-".into(), "".into()],
                vec!["a".into(), "draining".into(), "in lock".into()],
            ],
        );
        assert_eq!(
            out,
            "NAME     STATE     NOTE\nnode-10  -\na        draining  in lock\n"
        );
    }

    #[test]
    fn sorted_keys_orders_every_object() {
        #[derive(serde::Serialize)]
        struct Outer {
            #[serde(serialize_with = "sorted_keys")]
            inner: Inner,
        }
        #[derive(serde::Serialize)]
        struct Inner {
            b: u8,
            a: u8,
        }
        let o = Outer {
            inner: Inner { b: 1, a: 2 },
        };
        assert_eq!(
            serde_json::to_string(&o).unwrap(),
            r#"{"inner":{"a":2,"b":1}}"#
        );
    }

    #[test]
    fn text_and_json_come_from_the_same_value() {
        let s = Sample { n: 3 };
        assert_eq!(render(&s, Output::Text), "n is 3\n");
        assert_eq!(render(&s, Output::Json), "{\n  \"n\": 3\n}\n");
    }
}
