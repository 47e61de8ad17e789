//! The metrics' tests: the exposition's samples, escaping and serving, the states' timeouts,
//! and the equivalence of today's exposition with the recording of the hand-written one it
//! replaced (`testdata/`, rendered from the scenarios of `scenarios.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::*;

mod scenarios;

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_phase_lands_in_every_bucket_at_or_above_it_with_sum_and_count() {
    let m = Metrics::default();
    m.phase(CyclePhase::Drain, 42.0);
    m.phase(CyclePhase::Drain, 0.5);
    let t = m.render();
    let b = |le: &str| {
        sample(
            &t,
            &format!("rollboot_phase_duration_seconds_bucket{{phase=\"drain\",le=\"{le}\"}}"),
        )
    };
    assert_eq!(b("1"), Some(1.0));
    assert_eq!(b("30"), Some(1.0));
    assert_eq!(b("60"), Some(2.0));
    assert_eq!(b("+Inf"), Some(2.0));
    assert_eq!(
        sample(&t, "rollboot_phase_duration_seconds_sum{phase=\"drain\"}"),
        Some(42.5)
    );
    assert_eq!(
        sample(&t, "rollboot_phase_duration_seconds_count{phase=\"drain\"}"),
        Some(2.0)
    );
    assert!(
        !t.contains("phase=\"reboot\""),
        "no series for a phase never seen"
    );
}

#[test]
fn a_replica_that_stops_leading_stops_exporting_the_rollout_and_labels_are_escaped() {
    let m = Metrics::default();
    m.set_leader(true);
    m.set_rollout(RolloutGauges {
        lock_holder: Some(("ops \"team\"\\x".into(), true)),
        halted: true,
        ..Default::default()
    });
    let t = m.render();
    assert_eq!(sample(&t, "rollboot_rollout_halted"), Some(1.0));
    assert_eq!(
        sample(&t, "rollboot_blockers_active{kind=\"lock_held\"}"),
        Some(0.0)
    );
    assert!(
        t.contains(r#"rollboot_lock_holder_info{holder="ops \"team\"\\x",foreign="true"} 1"#),
        "{t}"
    );
    m.set_leader(false);
    let t = m.render();
    assert_eq!(sample(&t, "rollboot_rollout_halted"), None);
    assert!(!t.contains("rollboot_lock_holder_info{"));
}

#[test]
fn a_state_s_timeout_counts_the_hooks_that_hold_the_node_in_it() {
    let c = crate::config::parse_str(
        "drain: {timeout: 10m, settle: 30s}\nhooks: {beforeDrain: {gates: [a.example.com/ok], timeout: 20m}, afterReboot: {gates: [a.example.com/ok], timeout: 5m}}",
    )
    .unwrap();
    assert_eq!(
        state_timeouts(&c),
        [
            ("cordoning", 1200.0),
            ("draining", 630.0),
            ("rebooting", 900.0),
            ("verifying", 900.0),
        ]
    );
    let plain = crate::config::parse_str("{}").unwrap();
    assert_eq!(state_timeouts(&plain)[0], ("cordoning", 0.0));
}

#[tokio::test]
async fn the_controllers_metrics_server_is_served_within_bounds() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_on(listener, Arc::new(Metrics::default())));
    let answer = crate::serve::test_client::answer(
        addr,
        b"GET /metrics HTTP/1.1\r\nhost: a\r\ncontent-length: 100000\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

/// One sample as a scraper of the text format reads it: its name, its labels (sorted, values
/// unescaped), its family's type and help, and its value's bits (value-exact).
type Series = (String, Vec<(String, String)>, String, String, u64);

/// A family as its header describes it: name, type, help.
type Family = (String, String, String);

/// What an exposition says: every family's header and every sample.
#[derive(Debug, PartialEq)]
struct Exposition {
    families: BTreeSet<Family>,
    samples: BTreeSet<Series>,
}

/// `\\`, `\"` and `\n` unescaped.
fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('n') => out.push('\n'),
                Some(c) => out.push(c),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// A sample line's name, labels and value.
fn sample_line(line: &str) -> (String, Vec<(String, String)>, f64) {
    let end = line.find(['{', ' ']).expect("a sample line");
    let name = line[..end].to_string();
    let mut labels = Vec::new();
    let mut rest = &line[end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut r = inner;
        while !r.starts_with('}') {
            let eq = r.find("=\"").expect("label=\"value\"");
            let value_start = eq + 2;
            let mut i = value_start;
            let bytes = r.as_bytes();
            while bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            labels.push((r[..eq].to_string(), unescape(&r[value_start..i])));
            r = r[i + 1..].trim_start_matches(',');
        }
        rest = &r[1..];
    }
    labels.sort();
    let value = rest
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{line}: {e}"));
    (name, labels, value)
}

/// The family a sample belongs to: its own name, or a histogram's name without its suffix.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    if types.contains_key(name) {
        return name;
    }
    ["_bucket", "_sum", "_count"]
        .iter()
        .filter_map(|s| name.strip_suffix(s))
        .find(|f| types.get(*f).is_some_and(|t| t == "histogram"))
        .unwrap_or_else(|| panic!("{name}: a sample of no family"))
}

/// Reads a text exposition (format 0.0.4) as a scraper does. With `grouped`, also checks that
/// each family's samples follow its own header, with no other family's lines between.
fn parse(text: &str, grouped: bool) -> Exposition {
    let (mut helps, mut types) = (BTreeMap::new(), BTreeMap::new());
    for line in text.lines() {
        let mut words = line.splitn(4, ' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("#"), Some("HELP"), Some(name), help) => {
                helps.insert(name.to_string(), unescape(help.unwrap_or("")));
            }
            (Some("#"), Some("TYPE"), Some(name), Some(kind)) => {
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "{name}"
                );
            }
            _ => {}
        }
    }
    let mut samples = BTreeSet::new();
    let mut current = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap();
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let (name, labels, value) = sample_line(line);
        let family = family_of(&name, &types);
        assert!(
            !grouped || family == current,
            "{line}: after the header of {current}"
        );
        let (kind, help) = (types[family].clone(), helps[family].clone());
        samples.insert((name, labels, kind, help, value.to_bits()));
    }
    let families = types
        .into_iter()
        .map(|(name, kind)| {
            let help = helps
                .remove(&name)
                .unwrap_or_else(|| panic!("{name}: no HELP"));
            (name, kind, help)
        })
        .collect();
    assert!(helps.is_empty(), "HELP without TYPE: {helps:?}");
    Exposition { families, samples }
}

#[test]
fn every_series_of_the_recording_is_served_with_its_type_help_and_value() {
    for s in scenarios::all() {
        let path = scenarios::recording(s.name);
        let recorded = std::fs::read_to_string(&path).unwrap();
        let before = parse(&recorded, false);
        let now = parse(&s.metrics.render_at(s.now), true);
        let gone: Vec<_> = before.samples.difference(&now.samples).collect();
        let new: Vec<_> = now.samples.difference(&before.samples).collect();
        assert!(
            gone.is_empty() && new.is_empty(),
            "{}: recorded, not served: {gone:#?}\nserved, not recorded: {new:#?}",
            s.name
        );
        assert_eq!(before.families, now.families, "{}", s.name);
        assert!(!before.samples.is_empty(), "{}", s.name);
    }
}

#[tokio::test]
async fn metrics_are_served_as_prometheus_text_0_0_4() {
    let m = Arc::new(Metrics::default());
    m.started();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve_on(listener, m));
    let answer = crate::serve::test_client::answer(
        addr,
        b"GET /metrics HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("content-type: text/plain; version=0.0.4; charset=utf-8\r\n"),
        "{answer}"
    );
    // A counter's family is named with its `_total`; no OpenMetrics `# EOF` or `# UNIT`.
    assert!(
        answer.contains(
            "# TYPE rollboot_nodes_started_total counter\nrollboot_nodes_started_total 1\n"
        ),
        "{answer}"
    );
    assert!(
        !answer.contains("# EOF") && !answer.contains("# UNIT"),
        "{answer}"
    );
}
