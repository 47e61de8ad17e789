//! The optional monitoring of deploy/monitoring (Kustomize component) and the Helm chart
//! (`monitoring.enabled`): every metric, label and label value the Grafana dashboard's and the
//! PrometheusRule alerts' PromQL use is one the controller exports (parsed out of the JSON and
//! YAML, compared with `Metrics::render()` after exercising every family); the chart and the
//! component carry the same dashboard and rules; the component adds exactly its objects; and,
//! where promtool is installed, each alert fires in the situation it names (its own unit tests
//! in tests/monitoring/alerts-test.yaml).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use rollboot::metrics::{CyclePhase, Metrics, RolloutGauges};
use serde::Deserialize;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

fn yaml(text: &str, what: &str) -> Value {
    yaml_serde::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Exported series: metric name -> label -> values seen.
type Exported = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

/// Parses the text exposition's samples (not the comments).
fn exported(text: &str) -> Exported {
    let mut out = Exported::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let end = line.find(['{', ' ']).expect("a sample line");
        let labels = out.entry(line[..end].to_string()).or_default();
        if line[end..].starts_with('{') {
            let mut rest = &line[end + 1..];
            while !rest.starts_with('}') {
                let eq = rest.find("=\"").expect("label=\"value\"");
                let name = rest[..eq].to_string();
                let mut value = String::new();
                let mut chars = rest[eq + 2..].char_indices();
                let mut close = 0;
                while let Some((i, c)) = chars.next() {
                    match c {
                        '\\' => value.push(chars.next().unwrap().1),
                        '"' => {
                            close = eq + 2 + i;
                            break;
                        }
                        c => value.push(c),
                    }
                }
                labels.entry(name).or_default().insert(value);
                rest = rest[close + 1..].trim_start_matches(',');
            }
        }
    }
    out
}

/// A label matcher: label, operator, value.
type Matcher = (String, String, String);

/// What one PromQL expression uses.
#[derive(Debug, Default)]
struct Uses {
    /// Each selector: metric name and its matchers (label, operator, value).
    selectors: Vec<(String, Vec<Matcher>)>,
    /// Labels named in `by`, `without`, `on`, `ignoring`, `group_left`, `group_right`.
    grouping: BTreeSet<String>,
}

/// The PromQL functions and aggregations the files may use (a name not listed is a typo or a
/// new function to add here).
const FUNCTIONS: &[&str] = &[
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "irate",
    "delta",
    "histogram_quantile",
    "time",
    "vector",
    "absent",
    "clamp_min",
    "topk",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const OPERATORS: &[&str] = &["and", "or", "unless", "bool", "offset"];

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Reads the metric names, matchers and grouping labels out of a PromQL expression (as the
/// files use it: selectors, functions, aggregations, binary operators, ranges, Grafana's
/// `$variables`).
fn promql(expr: &str) -> Result<Uses, String> {
    let s: Vec<char> = expr.chars().collect();
    let mut uses = Uses::default();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < s.len() && s[*i].is_whitespace() {
            *i += 1;
        }
    };
    let ident = |i: &mut usize| {
        let start = *i;
        while *i < s.len() && is_ident(s[*i]) {
            *i += 1;
        }
        s[start..*i].iter().collect::<String>()
    };
    while i < s.len() {
        let c = s[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '[' {
            // A range or subquery: durations and Grafana variables, no metric.
            i = s[i..]
                .iter()
                .position(|&c| c == ']')
                .map(|p| i + p + 1)
                .ok_or("unclosed [")?;
        } else if c == '"' || c == '\'' {
            return Err(format!("a string outside a selector at {i}"));
        } else if c.is_ascii_digit() || (c == '.' && s.get(i + 1).is_some_and(char::is_ascii_digit))
        {
            while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == '.') {
                i += 1;
            }
        } else if c == '$' {
            i += 1;
            ident(&mut i);
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let name = ident(&mut i);
            skip_ws(&mut i);
            let next = s.get(i).copied();
            if GROUPING.contains(&name.as_str()) {
                if next == Some('(') {
                    let close = s[i..].iter().position(|&c| c == ')').ok_or("unclosed (")? + i;
                    for l in s[i + 1..close].iter().collect::<String>().split(',') {
                        if !l.trim().is_empty() {
                            uses.grouping.insert(l.trim().to_string());
                        }
                    }
                    i = close + 1;
                }
            } else if OPERATORS.contains(&name.as_str()) {
            } else if FUNCTIONS.contains(&name.as_str()) {
                // A function, or an aggregation with its grouping first (`max by (x) (...)`).
            } else if next == Some('(') {
                return Err(format!("unknown function `{name}`"));
            } else {
                let mut matchers = Vec::new();
                if next == Some('{') {
                    i += 1;
                    loop {
                        skip_ws(&mut i);
                        match s.get(i) {
                            Some('}') => {
                                i += 1;
                                break;
                            }
                            Some(',') => i += 1,
                            Some(_) => {
                                let label = ident(&mut i);
                                skip_ws(&mut i);
                                let op: String = s[i..]
                                    .iter()
                                    .take_while(|c| matches!(c, '=' | '!' | '~'))
                                    .collect();
                                i += op.len();
                                skip_ws(&mut i);
                                let q = s.get(i).copied().ok_or("matcher without a value")?;
                                let end = s[i + 1..]
                                    .iter()
                                    .position(|&c| c == q)
                                    .ok_or("unclosed string")?
                                    + i
                                    + 1;
                                let value: String = s[i + 1..end].iter().collect();
                                i = end + 1;
                                if label.is_empty()
                                    || !["=", "!=", "=~", "!~"].contains(&op.as_str())
                                {
                                    return Err(format!("bad matcher `{label}{op}` in {name}"));
                                }
                                matchers.push((label, op, value));
                            }
                            None => return Err("unclosed {".into()),
                        }
                    }
                }
                uses.selectors.push((name, matchers));
            }
        } else {
            i += 1;
        }
    }
    Ok(uses)
}

/// Checks one expression against the exported series; returns the labels its result can carry.
fn check(what: &str, expr: &str, exp: &Exported) -> BTreeSet<String> {
    let uses = promql(expr).unwrap_or_else(|e| panic!("{what}: `{expr}`: {e}"));
    assert!(!uses.selectors.is_empty(), "{what}: no metric in `{expr}`");
    let mut labels = BTreeSet::new();
    for (metric, matchers) in &uses.selectors {
        let Some(have) = exp.get(metric) else {
            panic!("{what}: `{metric}` is not exported by the controller (in `{expr}`)");
        };
        labels.extend(have.keys().cloned());
        for (label, op, value) in matchers {
            let values = have.get(label).unwrap_or_else(|| {
                panic!(
                    "{what}: `{metric}` has no label `{label}` (it has {:?})",
                    have.keys()
                )
            });
            if op == "=" || op == "!=" {
                assert!(
                    values.contains(value),
                    "{what}: `{metric}{{{label}=\"{value}\"}}`: the controller exports {label} values {values:?}"
                );
            }
        }
    }
    for g in &uses.grouping {
        assert!(
            labels.contains(g),
            "{what}: grouping label `{g}` is on none of {:?} (in `{expr}`)",
            uses.selectors.iter().map(|s| &s.0).collect::<Vec<_>>()
        );
    }
    labels
}

/// Every family exercised, as a leader sees a rollout with a node draining, a foreign lock
/// holder and a halt, with notifications and hooks reported.
fn rendered() -> String {
    let config = rollboot::config::parse_str(
        "windows: [{schedule: \"0 2 * * *\", duration: 3h, timezone: Europe/Berlin}]",
    )
    .unwrap();
    let m = Metrics::default();
    m.replica("controller-0", Arc::new(config));
    m.set_leader(true);
    m.set_in_flight(1);
    m.started();
    m.done();
    m.failed();
    m.evicted(3);
    m.error("drain");
    for p in [
        CyclePhase::Drain,
        CyclePhase::Reboot,
        CyclePhase::HealthGate,
        CyclePhase::Cycle,
    ] {
        m.phase(p, 42.0);
    }
    m.eviction_refused("budget");
    m.eviction_refused("server_error");
    for outcome in ["sent", "failed", "timeout", "dropped"] {
        m.notification("ops-slack", "nodeDone", outcome);
    }
    m.hook_result("beforeDrain", "allowed");
    let mut g = RolloutGauges::default();
    g.node_state_since
        .insert("node-1".into(), ("draining", 1_767_225_600.0));
    g.lock_holder = Some(("ops-team".into(), true));
    g.halted = true;
    m.set_rollout(g);
    m.render()
}

#[test]
fn every_metric_and_label_the_dashboard_and_alerts_use_is_exported() {
    let exp = exported(&rendered());
    // The rules.
    let rule = yaml(
        &read("deploy/monitoring/prometheus-rule.yaml"),
        "prometheus-rule.yaml",
    );
    let rules = rule["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().clone())
        .collect::<Vec<_>>();
    let names: BTreeSet<&str> = rules.iter().filter_map(|r| r["alert"].as_str()).collect();
    for a in [
        "RollbootRolloutHalted",
        "RollbootNodeStuck",
        "RollbootDrainBlockedByBudget",
        "RollbootNoLeader",
        "RollbootLockHeldByForeignHolder",
    ] {
        assert!(names.contains(a), "alert {a} missing: {names:?}");
    }
    for r in &rules {
        let name = r["alert"].as_str().unwrap();
        let expr = r["expr"].as_str().unwrap();
        let labels = check(name, expr, &exp);
        // Each `$labels.X` of the annotations is a label the expression's result carries.
        for text in r["annotations"].as_object().unwrap().values() {
            let text = text.as_str().unwrap();
            for part in text.split("$labels.").skip(1) {
                let l: String = part.chars().take_while(|c| is_ident(*c)).collect();
                assert!(
                    labels.contains(&l),
                    "{name}: the annotation uses $labels.{l}, which `{expr}` does not carry"
                );
            }
        }
    }
    // The dashboard.
    let dash: Value = serde_json::from_str(&read("deploy/monitoring/rollboot-dashboard.json"))
        .expect("dashboard JSON");
    let mut seen = 0;
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            let title = p["title"].as_str().unwrap();
            let labels = check(title, expr, &exp);
            // A legend's `{{label}}` is one the expression's result carries.
            if let Some(legend) = t["legendFormat"].as_str() {
                for part in legend.split("{{").skip(1) {
                    let l = part.split("}}").next().unwrap().trim();
                    assert!(
                        labels.contains(l),
                        "{title}: legend {{{{{l}}}}} is not a label of `{expr}`"
                    );
                }
            }
            seen += 1;
        }
    }
    assert!(seen >= 15, "{seen} dashboard queries");
}

#[test]
fn the_checker_catches_an_unknown_metric_label_value_and_grouping() {
    let exp = exported(&rendered());
    let fails = |expr: &str| {
        let expr = expr.to_string();
        let exp = exp.clone();
        std::panic::catch_unwind(move || check("probe", &expr, &exp)).is_err()
    };
    assert!(!fails(
        "max by (state) (rollboot_nodes{state=\"draining\"})"
    ));
    assert!(fails("max(rollboot_nodes_halted)"), "unknown metric");
    assert!(fails("max(rollboot_nodes{phase=\"x\"})"), "unknown label");
    assert!(
        fails("max(rollboot_nodes{state=\"drained\"})"),
        "unknown value"
    );
    assert!(fails("max by (node) (rollboot_nodes)"), "grouping label");
    assert!(fails("maxx(rollboot_nodes)"), "unknown function");
}

/// The objects of `kubectl kustomize` on an overlay of the base plus the component; `None`
/// when kubectl cannot run.
fn kustomize_with_component() -> Option<Vec<Value>> {
    // Inside the crate: kustomize refuses absolute resource paths and a root inside deploy/.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = root().join(format!(".monitoring-test-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("kustomization.yaml"),
        "resources: [../deploy]\ncomponents: [../deploy/monitoring]\n",
    )
    .unwrap();
    let out = Command::new("kubectl").arg("kustomize").arg(&dir).output();
    std::fs::remove_dir_all(&dir).unwrap();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); the component was not rendered");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        yaml_serde::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .collect(),
    )
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn the_component_adds_the_service_monitor_the_rules_and_the_dashboard_to_the_base() {
    let Some(objects) = kustomize_with_component() else {
        return;
    };
    let base = Command::new("kubectl")
        .args(["kustomize", "deploy/"])
        .current_dir(root())
        .output()
        .unwrap();
    let base_count = yaml_serde::Deserializer::from_str(&String::from_utf8_lossy(&base.stdout))
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .count();
    assert_eq!(objects.len(), base_count + 3);
    let sm = find(&objects, "ServiceMonitor", "rollboot-controller");
    let svc = find(&objects, "Service", "rollboot-controller-metrics");
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(
            &svc["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
    assert_eq!(
        sm["spec"]["endpoints"][0]["port"],
        svc["spec"]["ports"][0]["name"]
    );
    let cm = find(&objects, "ConfigMap", "rollboot-dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        cm["data"]["rollboot-dashboard.json"].as_str().unwrap(),
        read("deploy/monitoring/rollboot-dashboard.json")
    );
    let rule = find(&objects, "PrometheusRule", "rollboot");
    assert_eq!(
        rule["spec"],
        yaml(&read("deploy/monitoring/prometheus-rule.yaml"), "rule")["spec"]
    );
}

#[test]
fn the_helm_chart_renders_the_components_dashboard_and_rules() {
    // The chart's copies of the files (Helm reads only files inside the chart).
    assert_eq!(
        read("deploy/helm/rollboot/files/rollboot-dashboard.json"),
        read("deploy/monitoring/rollboot-dashboard.json"),
        "copy deploy/monitoring/rollboot-dashboard.json into the chart's files/"
    );
    assert_eq!(
        yaml(
            &read("deploy/helm/rollboot/files/prometheus-rules.yaml"),
            "chart rules"
        ),
        yaml(&read("deploy/monitoring/prometheus-rule.yaml"), "rule")["spec"],
        "the chart's files/prometheus-rules.yaml must hold the component's rule groups"
    );
    let probe = Command::new("python3")
        .args(["-c", "import helm_python"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("helm-python-sdk not installed; the chart's monitoring was not rendered");
        return;
    }
    let render = |values: &str| {
        let out = Command::new("python3")
            .args(["deploy/helm/render.py", "--values", values])
            .current_dir(root())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        yaml_serde::Deserializer::from_str(&String::from_utf8_lossy(&out.stdout))
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .collect::<Vec<Value>>()
    };
    let objects = render(r#"{"monitoring": {"enabled": true}}"#);
    let cm = find(&objects, "ConfigMap", "rollboot-dashboard");
    let dash: Value = serde_json::from_str(cm["data"]["rollboot-dashboard.json"].as_str().unwrap())
        .expect("the rendered dashboard is JSON");
    let file: Value =
        serde_json::from_str(&read("deploy/monitoring/rollboot-dashboard.json")).unwrap();
    assert_eq!(dash, file);
    assert_eq!(
        find(&objects, "PrometheusRule", "rollboot")["spec"],
        yaml(&read("deploy/monitoring/prometheus-rule.yaml"), "rule")["spec"]
    );
    if let Some(component) = kustomize_with_component() {
        assert_eq!(
            find(&objects, "ServiceMonitor", "rollboot-controller")["spec"],
            find(&component, "ServiceMonitor", "rollboot-controller")["spec"]
        );
    }
    // Off by default: the default render has none of them.
    let default = render("{}");
    assert!(default
        .iter()
        .all(|o| o["kind"] != "PrometheusRule" && o["kind"] != "ServiceMonitor"));
}

/// The alerts' own unit tests (tests/monitoring/alerts-test.yaml): each fires on the series the
/// controller exports in the situation it names, with its labels and texts, and not before its
/// `for`. Run with promtool (Debian package `prometheus`) where installed, skipped with a note
/// where not; `promtool check rules` also checks the PromQL and templates parse.
#[test]
fn promtool_checks_the_rules_and_each_alert_fires_in_its_situation() {
    let rules = "deploy/helm/rollboot/files/prometheus-rules.yaml";
    let check = match Command::new("promtool")
        .args(["check", "rules", rules])
        .current_dir(root())
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("promtool not runnable ({e}); the alerts' unit tests were not run");
            return;
        }
    };
    assert!(
        check.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let test = Command::new("promtool")
        .args(["test", "rules", "alerts-test.yaml"])
        .current_dir(root().join("tests/monitoring"))
        .output()
        .unwrap();
    assert!(
        test.status.success(),
        "promtool test rules: {}{}",
        String::from_utf8_lossy(&test.stdout),
        String::from_utf8_lossy(&test.stderr)
    );
}
