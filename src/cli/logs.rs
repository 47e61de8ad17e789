//! The binary's logs: text for a person, JSON lines for a collector (`--log-format json`), on
//! standard error, filtered by `RUST_LOG`.
//!
//! Owns the subscriber and the shape of a JSON line. A log call inside a span (each step, drain,
//! gate and hook task of the controller, each agent: `node` is a field of theirs) does not
//! repeat the span's fields; a JSON line carries them in its `fields` all the same, as tracing's
//! own `span`/`spans` do, so a collector filters on `fields.node` for every line about a node.
//! It must never be used by the library: logging is the binary's choice.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use super::LogFormat;

pub(super) fn init(format: LogFormat, default_level: &str) {
    // kube's client logs every 5xx answer at ERROR from its HTTP layer; rollboot handles and
    // logs each answer itself (a 500 from overlapping budgets is retried, a 503 from an API
    // server restart is waited out), so by default those duplicate lines are off. RUST_LOG,
    // when set, decides alone.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!(
            "{default_level},kube_client::client::builder=off"
        ))
    });
    // Colour codes only for a person at a terminal, never into a log file or a collector, and
    // not for one who asked for none (NO_COLOR, https://no-color.org: set and not empty).
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .event_format(SpanFieldsInEvent(format::json()))
            .try_init(),
    };
}

/// tracing's JSON line, with the fields of the spans the event is in copied into its `fields`
/// (the innermost span's first; the event's own fields win).
struct SpanFieldsInEvent(Format<Json>);

impl<S, N> FormatEvent<S, N> for SpanFieldsInEvent
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match with_span_fields(&line) {
            Some(merged) => writeln!(writer, "{merged}"),
            None => writer.write_str(&line),
        }
    }
}

/// `line` with its spans' fields in its `fields`; `None` when it has no span or is no JSON
/// object (then it is written as it is).
fn with_span_fields(line: &str) -> Option<String> {
    let mut v: serde_json::Value = serde_json::from_str(line).ok()?;
    let spans = v.get("spans")?.as_array()?.clone();
    let fields = v.get_mut("fields")?.as_object_mut()?;
    for span in spans.iter().rev().filter_map(|s| s.as_object()) {
        for (k, value) in span.iter().filter(|(k, _)| k.as_str() != "name") {
            fields.entry(k.clone()).or_insert_with(|| value.clone());
        }
    }
    serde_json::to_string(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spans_fields_join_the_events_fields_and_the_events_own_win() {
        let line = r#"{"timestamp":"t","level":"INFO","fields":{"message":"m","reason":"r"},"target":"x","span":{"node":"n1","name":"step"},"spans":[{"node":"outer","reason":"outer","name":"agent"},{"node":"n1","name":"step"}]}"#;
        let v: serde_json::Value = serde_json::from_str(&with_span_fields(line).unwrap()).unwrap();
        assert_eq!(v["fields"]["node"], "n1");
        assert_eq!(v["fields"]["reason"], "r");
        assert_eq!(v["fields"]["message"], "m");
        assert_eq!(v["span"]["node"], "n1");
    }

    #[test]
    fn a_line_outside_any_span_is_left_as_it_is() {
        let line = r#"{"level":"INFO","fields":{"message":"m"},"target":"x"}"#;
        assert_eq!(with_span_fields(line), None);
    }
}
