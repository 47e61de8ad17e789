//! How the controller's families become the text `/metrics` answers: a prometheus-client
//! registry assembled for each scrape from the module's collectors, written by
//! prometheus-client's Prometheus text format (version 0.0.4) encoder.
//!
//! Owns the prefix, the content type and the one helper every collector writes a family with.
//! It must never hold a metric's value or decide what a family contains (the collectors do),
//! and never write OpenMetrics.
//!
//! Why Prometheus text 0.0.4 and not OpenMetrics: 0.0.4 is what `/metrics` has always served,
//! and prometheus-client's OpenMetrics output differs from it in ways a scraper notices. For
//! the same families it writes counters' `# HELP`/`# TYPE` under the name without `_total`
//! (`# TYPE rollboot_nodes_started counter` over `rollboot_nodes_started_total 3`), histogram
//! bounds as floats (`le="1.0"`, where 0.0.4 has `le="1"`: a new series for Prometheus 2, which
//! keeps `le` as written), `# UNIT` lines for families registered with a unit, and a final
//! `# EOF`; its content type is `application/openmetrics-text`. Serving OpenMetrics only to a
//! scraper whose `Accept` asks for it would not keep things as they are: Prometheus asks for
//! OpenMetrics first by default, so every default scrape would switch. The 0.0.4 encoder writes
//! counters under their `_total` name, `le` as Go's client does (`1`, `7200`, `+Inf`), no
//! `# EOF` and no `# UNIT`; label values escaped (`\`, `"`, newline) and `# HELP` escaped
//! (`\`, newline) as 0.0.4 requires.
//!
//! What differs from the hand-written exposition it replaced, none of it a change to a series
//! a 0.0.4 scraper stores (metrics/tests.rs compares the recording of the old output with the
//! new, series by series): float samples are written by `dtoa` (`1767225600.0` and `3600.0`,
//! were `1767225600` and `3600`; `0.30000000000000007` for the sum of 0.1 and 0.2, which Rust
//! wrote `0.30000000000000004`: two spellings of the same double); the samples within a
//! labelled family come in the family's hash order (were sorted); the rollout's five families
//! are each written as one group (the old exposition wrote their five headers first and then
//! all their samples, which 0.0.4 does not allow); and the content type names the version
//! (`text/plain; version=0.0.4; charset=utf-8`, was `text/plain; charset=utf-8`, which
//! Prometheus reads as the same format).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeGaugeValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

/// The prefix of every family's name.
const PREFIX: &str = "rollboot";

/// The content type of `/metrics`.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The text exposition of `collectors`' families, in their order.
pub fn encode(collectors: Vec<Box<dyn Collector>>) -> String {
    let mut registry = Registry::with_prefix(PREFIX);
    for c in collectors {
        registry.register_collector(c);
    }
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)
        .expect("the collectors only write to a String, which cannot fail");
    text
}

/// Writes one family: `# HELP` with `help` as it is, `# TYPE`, then `metric`'s samples (none for
/// an empty label family: its header is written all the same, so that a family is described
/// before its first sample). `name` is without the prefix and, for a counter, without `_total`.
///
/// A collector writes each family itself, rather than registering it, because the registry
/// appends a period to every help text and skips the header of an empty family.
pub fn write(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> std::fmt::Result {
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

/// Writes a gauge family read at scrape time without labels: its header, and its sample when
/// there is one.
pub fn write_gauge<N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<N>,
) -> std::fmt::Result {
    let family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    match value {
        Some(v) => ConstGauge::new(v).encode(family),
        None => Ok(()),
    }
}

/// Writes a gauge family read at scrape time: its header, then one sample per label set, in
/// the order given.
pub fn write_gauges<S: EncodeLabelSet, N: EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (S, N)>,
) -> std::fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in samples {
        ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}
