//! The one way rollboot's reports are rendered: text for a person and JSON for a program, both
//! from the same value.
//!
//! Owns [`Output`] (the `-o/--output` choice every reporting command takes) and [`Render`],
//! which a report implements with its text form; its JSON form is its `serde::Serialize`. A
//! command builds its report (a plain value), then [`render`]s it: it must never print parts
//! of one form and not the other, nor print anything itself.

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
pub trait Render: serde::Serialize {
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
    fn text_and_json_come_from_the_same_value() {
        let s = Sample { n: 3 };
        assert_eq!(render(&s, Output::Text), "n is 3\n");
        assert_eq!(render(&s, Output::Json), "{\n  \"n\": 3\n}\n");
    }
}
