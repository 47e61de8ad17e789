//! The `hooks` section: what rollboot does, asks and waits for at each phase of a node's cycle.
//!
//! Owns the schema of the four phases (`beforeDrain`, `afterDrain`, `afterReboot`,
//! `afterDone`), each with HTTP webhooks (blocking or fire-and-forget), gate annotations,
//! labels and taints to add and remove, and a hold timeout; the optional PreferNoSchedule
//! taint on flagged nodes; and the validation of all of it, naming the key of each problem. It
//! must never decide when a hook runs (that is [`crate::hooks::decide`]) nor send anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::notifications::SecretRef;
use super::Duration;
use super::ProblemSink;

/// Hooks at the phases of a node's cycle. Default: none; a phase with nothing configured
/// costs no write and no wait.
#[derive(Debug, Default, Deserialize, Serialize, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Hooks {
    /// The node is cordoned, nothing is evicted yet.
    #[serde(skip_serializing_if = "PhaseHooks::is_empty")]
    pub before_drain: PhaseHooks,
    /// The node is drained; its reboot is not asked for yet (`drain.settle` waits here too).
    #[serde(skip_serializing_if = "PhaseHooks::is_empty")]
    pub after_drain: PhaseHooks,
    /// The node is back with a new boot ID and Ready; still cordoned.
    #[serde(skip_serializing_if = "PhaseHooks::is_empty")]
    pub after_reboot: PhaseHooks,
    /// The node's cycle is done (uncordoned, healthy); its slot is freed after these.
    #[serde(skip_serializing_if = "PhaseHooks::is_empty")]
    pub after_done: PhaseHooks,
    /// A taint key: every flagged node that rollboot may reboot carries `KEY:PreferNoSchedule`
    /// while it is flagged (until its agent clears the flag once the host is back, or the
    /// cycle ends), so new pods land elsewhere first (kured's prefer-no-schedule-taint).
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefer_no_schedule_taint: Option<String>,
}

/// A phase of a node's cycle at which hooks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Phase {
    /// Cordoned, before the drain.
    BeforeDrain,
    /// Drained, before the reboot.
    AfterDrain,
    /// Back from the reboot, before the uncordon.
    AfterReboot,
    /// After the node is done.
    AfterDone,
}

impl Phase {
    /// Every phase, in the order of a cycle.
    pub const ALL: [Phase; 4] = [
        Phase::BeforeDrain,
        Phase::AfterDrain,
        Phase::AfterReboot,
        Phase::AfterDone,
    ];

    /// The config key (and the word in the webhook body, the Node's record and the `phase`
    /// label of `rollboot_hook_results_total`: one name for a phase everywhere).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::BeforeDrain => "beforeDrain",
            Phase::AfterDrain => "afterDrain",
            Phase::AfterReboot => "afterReboot",
            Phase::AfterDone => "afterDone",
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Hooks {
    /// The hooks of `phase`.
    pub fn phase(&self, phase: Phase) -> &PhaseHooks {
        match phase {
            Phase::BeforeDrain => &self.before_drain,
            Phase::AfterDrain => &self.after_drain,
            Phase::AfterReboot => &self.after_reboot,
            Phase::AfterDone => &self.after_done,
        }
    }

    /// Every gate annotation key of every phase: the controller's Node cache keeps them.
    pub fn gate_keys(&self) -> Vec<String> {
        let keys: BTreeSet<&String> = Phase::ALL
            .iter()
            .flat_map(|p| self.phase(*p).gates.iter())
            .collect();
        keys.into_iter().cloned().collect()
    }
}

/// What happens at one phase, in this order: labels and taints are written (with the phase's
/// record), fire-and-forget webhooks are sent, gate annotations are waited for, then each
/// blocking webhook is asked in turn until it says yes.
#[derive(Debug, Deserialize, Serialize, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PhaseHooks {
    /// HTTP webhooks called at this phase.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<Webhook>,
    /// Annotation keys that must be present on the Node (with any value but `false`) before
    /// the phase passes; rollboot removes them when it passes, so each cycle waits for a fresh
    /// yes. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<String>,
    /// Labels set on the Node when the phase starts. Default: none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Label keys removed from the Node when the phase starts. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove_labels: Vec<String>,
    /// Taints put on the Node when the phase starts. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<TaintSpec>,
    /// Taint keys removed from the Node (any effect) when the phase starts. Default: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remove_taints: Vec<String>,
    /// Longest the gates and the blocking webhooks of this phase may hold the node; then it
    /// fails (and is not rebooted). Default 30m.
    pub timeout: Duration,
}

impl Default for PhaseHooks {
    fn default() -> Self {
        PhaseHooks {
            webhooks: Vec::new(),
            gates: Vec::new(),
            labels: BTreeMap::new(),
            remove_labels: Vec::new(),
            taints: Vec::new(),
            remove_taints: Vec::new(),
            timeout: DEFAULT_PHASE_TIMEOUT,
        }
    }
}

/// Default of a phase's `timeout`.
const DEFAULT_PHASE_TIMEOUT: Duration = Duration::from_mins(30);

impl PhaseHooks {
    /// The phase's webhook named `name`, if the config still has it.
    pub fn webhook(&self, name: &str) -> Option<&Webhook> {
        self.webhooks.iter().find(|w| w.name == name)
    }

    /// Nothing configured: the phase costs nothing.
    pub fn is_empty(&self) -> bool {
        self.webhooks.is_empty()
            && self.gates.is_empty()
            && self.labels.is_empty()
            && self.remove_labels.is_empty()
            && self.taints.is_empty()
            && self.remove_taints.is_empty()
            && self.timeout == DEFAULT_PHASE_TIMEOUT
    }

    /// Anything to do at this phase (the timeout alone is nothing).
    pub fn configured(&self) -> bool {
        !(self.webhooks.is_empty()
            && self.gates.is_empty()
            && self.labels.is_empty()
            && self.remove_labels.is_empty()
            && self.taints.is_empty()
            && self.remove_taints.is_empty())
    }
}

/// One HTTP webhook: a JSON POST (docs/hooks-and-notifications.md gives the body).
#[derive(Debug, Deserialize, Serialize, Clone, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Webhook {
    /// A name, unique within the phase: the key of its record on the Node and in logs.
    pub name: String,
    /// `http://` or `https://` URL the body is POSTed to.
    pub url: String,
    /// Where a bearer token is read from, sent as `Authorization: Bearer ...`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_from: Option<SecretRef>,
    /// The node waits for a 2xx answer; anything else (or no answer) holds it, asked again
    /// with backoff, until the phase's `timeout` fails it. Default false: fire and forget.
    #[serde(default)]
    pub blocking: bool,
    /// Longest one request may take. Default 10s.
    #[serde(default = "default_request_timeout")]
    pub request_timeout: Duration,
    /// Fire-and-forget webhooks: tries after the first when one fails. Default 3.
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// Wait before the second try, doubled for each next one (at most 1m). Default 2s.
    #[serde(default = "default_backoff")]
    pub backoff: Duration,
}

fn default_request_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_retries() -> u32 {
    3
}

fn default_backoff() -> Duration {
    Duration::from_secs(2)
}

/// Longest wait between two tries of a webhook.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

impl Webhook {
    /// The wait after try `attempt` (1-based) before the next one.
    pub fn backoff_after(&self, attempt: u32) -> Duration {
        let factor = 1i64 << attempt.saturating_sub(1).min(20);
        Duration::from_millis(
            self.backoff
                .as_millis()
                .saturating_mul(factor)
                .min(MAX_BACKOFF.as_millis()),
        )
    }
}

/// A taint to put on the Node.
#[derive(Debug, Deserialize, Serialize, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaintSpec {
    /// The taint's key.
    pub key: String,
    /// Its value. Default empty.
    #[serde(default)]
    pub value: String,
    /// `NoSchedule` or `PreferNoSchedule`.
    pub effect: String,
}

/// Most fire-and-forget tries that may be asked for (a bound on a hook nobody waits for).
const MAX_RETRIES: u32 = 10;

/// Whether `s` is a Kubernetes qualified name (a label or annotation key): an optional DNS
/// subdomain prefix and `/`, then a name of at most 63 characters, alphanumeric at both ends,
/// `-`, `_` and `.` inside. `Err` says what is wrong.
pub fn check_qualified_name(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if p.is_empty() || p.len() > 253 || !p.split('.').all(label_ok) {
            return Err(format!(
                "the prefix `{p}` is not a DNS subdomain (lowercase letters, digits, `-` and `.`)"
            ));
        }
    }
    check_name_part(name, "name")
}

fn check_name_part(name: &str, what: &str) -> Result<(), String> {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    if name.is_empty() || name.len() > 63 {
        return Err(format!("the {what} part must be 1 to 63 characters"));
    }
    if !name.starts_with(alnum)
        || !name.ends_with(alnum)
        || !name
            .chars()
            .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
    {
        return Err(format!(
            "the {what} part `{name}` must be letters, digits, `-`, `_` and `.`, beginning and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// Whether `v` is a valid label (or taint) value: empty, or a name part.
pub fn check_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() {
        Ok(())
    } else {
        check_name_part(v, "value")
    }
}

/// rollboot's own prefix, which no hook may write or wait for (the Node protocol is rollboot's).
const OWN: &str = crate::node::PREFIX;
/// The taints Kubernetes itself manages.
const KUBERNETES_TAINTS: &str = "node.kubernetes.io/";

/// Checks the section, phase by phase; `report` gets each problem with its key path.
pub(super) fn validate(h: &Hooks, report: &mut ProblemSink) {
    for phase in Phase::ALL {
        validate_phase(phase, h.phase(phase), report);
    }
    if let Some(k) = &h.prefer_no_schedule_taint {
        taint_key("hooks.preferNoScheduleTaint".into(), k, report);
    }
}

/// One phase: its timeout, webhooks, gates, labels and taints.
fn validate_phase(phase: Phase, p: &PhaseHooks, report: &mut ProblemSink) {
    let base = format!("hooks.{}", phase.as_str());
    if !p.timeout.is_positive() {
        report(
            format!("{base}.timeout"),
            format!("must be a positive duration, got `{}`", p.timeout),
        );
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, w) in p.webhooks.iter().enumerate() {
        webhook(phase, &base, i, w, &mut names, report);
    }
    if phase == Phase::AfterDone && !p.gates.is_empty() {
        report(
            format!("{base}.gates"),
            "afterDone cannot hold a node that is already done: gates belong to beforeDrain, afterDrain or afterReboot".into(),
        );
    }
    for (i, g) in p.gates.iter().enumerate() {
        own_key(format!("{base}.gates[{i}]"), g, "annotation key", report);
    }
    labels(&base, p, report);
    taints(&base, p, report);
}

/// `webhooks[i]` of a phase: a unique name (`names`: those of the phase so far), an http(s)
/// URL, one token source, blocking only where a node can be held, positive timings.
fn webhook<'a>(
    phase: Phase,
    base: &str,
    i: usize,
    w: &'a Webhook,
    names: &mut BTreeMap<&'a str, usize>,
    report: &mut ProblemSink,
) {
    let at = |k: &str| format!("{base}.webhooks[{i}].{k}");
    let good_name = !w.name.is_empty()
        && w.name.len() <= 40
        && w.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !w.name.starts_with('-')
        && !w.name.ends_with('-');
    if !good_name {
        report(
            at("name"),
            format!(
                "`{}` is not a webhook name: 1 to 40 lowercase letters, digits and `-` (it keys the webhook's record on the Node)",
                w.name
            ),
        );
    }
    if let Some(first) = names.insert(&w.name, i) {
        report(
            at("name"),
            format!(
                "`{}` is already the name of {base}.webhooks[{first}]: names must be unique within a phase",
                w.name
            ),
        );
    }
    match w.url.parse::<http::Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some() => {}
        _ => report(
            at("url"),
            format!("`{}` is not an http:// or https:// URL with a host", w.url),
        ),
    }
    if let Some(t) = &w.token_from {
        if t.env.is_some() == t.file.is_some() {
            report(
                at("tokenFrom"),
                "give exactly one of `env` and `file`".into(),
            );
        }
    }
    if w.blocking && phase == Phase::AfterDone {
        report(
            at("blocking"),
            "afterDone cannot hold a node that is already done: blocking webhooks belong to beforeDrain, afterDrain or afterReboot".into(),
        );
    }
    if !w.request_timeout.is_positive() {
        report(
            at("requestTimeout"),
            format!("must be a positive duration, got `{}`", w.request_timeout),
        );
    }
    if !w.backoff.is_positive() {
        report(
            at("backoff"),
            format!("must be a positive duration, got `{}`", w.backoff),
        );
    }
    if w.retries > MAX_RETRIES {
        report(
            at("retries"),
            format!("at most {MAX_RETRIES}, got {}", w.retries),
        );
    }
}

/// `labels` and `removeLabels` of a phase: valid keys outside rollboot's own prefix, valid
/// values, no key both set and removed.
fn labels(base: &str, p: &PhaseHooks, report: &mut ProblemSink) {
    // A label key holds dots and slashes, so the path stops at the map (which has a
    // line) and the message names the key.
    for (k, v) in &p.labels {
        own_key(format!("{base}.labels"), k, "label key", report);
        if let Err(e) = check_label_value(v) {
            report(
                format!("{base}.labels"),
                format!("label `{k}`: `{v}` is not a valid label value: {e}"),
            );
        }
    }
    for (i, k) in p.remove_labels.iter().enumerate() {
        own_key(format!("{base}.removeLabels[{i}]"), k, "label key", report);
        if p.labels.contains_key(k) {
            report(
                format!("{base}.removeLabels[{i}]"),
                format!("`{k}` is both set (labels) and removed at this phase"),
            );
        }
    }
}

/// `taints` and `removeTaints` of a phase: valid keys outside Kubernetes' own, valid values,
/// an effect that never evicts, one taint per key and effect, no key both put and removed.
fn taints(base: &str, p: &PhaseHooks, report: &mut ProblemSink) {
    let mut seen = BTreeSet::new();
    for (i, t) in p.taints.iter().enumerate() {
        let at = format!("{base}.taints[{i}]");
        taint_key(format!("{at}.key"), &t.key, report);
        if let Err(e) = check_label_value(&t.value) {
            report(
                format!("{at}.value"),
                format!("`{}` is not a valid taint value: {e}", t.value),
            );
        }
        match t.effect.as_str() {
            "NoSchedule" | "PreferNoSchedule" => {}
            "NoExecute" => report(
                format!("{at}.effect"),
                "NoExecute would evict pods around their PodDisruptionBudgets (rollboot drains through the Eviction API): use NoSchedule or PreferNoSchedule".into(),
            ),
            other => report(
                format!("{at}.effect"),
                format!("`{other}` is not a taint effect: NoSchedule or PreferNoSchedule"),
            ),
        }
        if !seen.insert((&t.key, &t.effect)) {
            report(
                at,
                format!(
                    "a second taint `{}` with effect {} (a Node holds one per key and effect)",
                    t.key, t.effect
                ),
            );
        }
    }
    for (i, k) in p.remove_taints.iter().enumerate() {
        taint_key(format!("{base}.removeTaints[{i}]"), k, report);
        if p.taints.iter().any(|t| t.key == *k) {
            report(
                format!("{base}.removeTaints[{i}]"),
                format!("`{k}` is both put (taints) and removed at this phase"),
            );
        }
    }
}

/// An annotation or label key a hook may write or wait for: a qualified name outside
/// rollboot's own prefix.
fn own_key(path: String, k: &str, what: &str, report: &mut ProblemSink) {
    if let Err(e) = check_qualified_name(k) {
        report(path.clone(), format!("`{k}` is not a valid {what}: {e}"));
    } else if k.starts_with(OWN) {
        report(
            path,
            format!(
                "`{k}` is under {OWN}, which is rollboot's own Node protocol: use another prefix"
            ),
        );
    }
}

/// A taint key a hook may write: a qualified name outside the taints Kubernetes manages
/// (rollboot's own prefix is allowed: taints are no part of the Node protocol).
fn taint_key(path: String, k: &str, report: &mut ProblemSink) {
    if let Err(e) = check_qualified_name(k) {
        report(path, format!("`{k}` is not a valid taint key: {e}"));
    } else if k.starts_with(KUBERNETES_TAINTS) {
        report(
            path,
            format!("`{k}` is under {KUBERNETES_TAINTS}, whose taints Kubernetes manages"),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse_str;

    /// The problems of `yaml` as `line: path: message`.
    fn problems(yaml: &str) -> Vec<String> {
        match parse_str(yaml) {
            Ok(_) => Vec::new(),
            Err(ps) => ps
                .iter()
                .map(|p| format!("{}: {}: {}", p.line.unwrap_or(0), p.path, p.message))
                .collect(),
        }
    }

    #[test]
    fn a_full_hooks_section_loads() {
        let c = parse_str(
            "
drain: {settle: 30s}
hooks:
  preferNoScheduleTaint: rollboot.dev/reboot-pending
  beforeDrain:
    timeout: 1h
    gates: [storage.example.com/ok-to-drain]
    labels: {example.com/maintenance: in-progress}
    taints: [{key: example.com/maintenance, effect: NoSchedule}]
    webhooks:
      - {name: change-ticket, url: 'https://tickets.example.com/rollboot', blocking: true, requestTimeout: 5s, backoff: 10s}
      - {name: chat, url: 'http://chat.example.com/hook', retries: 1}
  afterReboot:
    removeTaints: [example.com/maintenance]
    removeLabels: [example.com/maintenance]
  afterDone:
    webhooks: [{name: close-ticket, url: 'https://tickets.example.com/close'}]
",
        )
        .unwrap();
        let w = &c.hooks.before_drain.webhooks;
        assert!(w[0].blocking && !w[1].blocking);
        assert_eq!((w[1].retries, w[0].retries), (1, 3));
        assert_eq!(c.hooks.gate_keys(), ["storage.example.com/ok-to-drain"]);
        assert_eq!(c.drain.settle, Some(crate::config::Duration::from_secs(30)));
    }

    #[test]
    fn bad_hooks_are_named_by_key_and_line() {
        let p = problems(
            "hooks:
  beforeDrain:
    timeout: 0s
    gates: [rollboot.dev/ok, 'bad key!']
    labels: {example.com/m: 'not a value'}
    taints:
      - {key: example.com/m, effect: NoExecute}
      - {key: node.kubernetes.io/x, effect: Sometimes}
    webhooks:
      - {name: Ticket, url: 'ftp://x'}
      - {name: Ticket, url: 'http://x', requestTimeout: -1s, retries: 99}
  afterDone:
    gates: [example.com/ok]
    webhooks: [{name: late, url: 'http://x', blocking: true}]
drain: {settle: 0s}
",
        );
        let want = [
            "3: hooks.beforeDrain.timeout: must be a positive duration",
            "4: hooks.beforeDrain.gates[0]: `rollboot.dev/ok` is under rollboot.dev/",
            "4: hooks.beforeDrain.gates[1]: `bad key!` is not a valid annotation key",
            "5: hooks.beforeDrain.labels: label `example.com/m`: `not a value` is not a valid label value",
            "7: hooks.beforeDrain.taints[0].effect: NoExecute would evict pods",
            "8: hooks.beforeDrain.taints[1].key: `node.kubernetes.io/x` is under node.kubernetes.io/",
            "8: hooks.beforeDrain.taints[1].effect: `Sometimes` is not a taint effect",
            "10: hooks.beforeDrain.webhooks[0].name: `Ticket` is not a webhook name",
            "10: hooks.beforeDrain.webhooks[0].url: `ftp://x` is not an http:// or https:// URL",
            "11: hooks.beforeDrain.webhooks[1].name: `Ticket` is already the name of hooks.beforeDrain.webhooks[0]",
            "11: hooks.beforeDrain.webhooks[1].requestTimeout: must be a positive duration",
            "11: hooks.beforeDrain.webhooks[1].retries: at most 10, got 99",
            "13: hooks.afterDone.gates: afterDone cannot hold a node",
            "14: hooks.afterDone.webhooks[0].blocking: afterDone cannot hold a node",
            "15: drain.settle: must be a positive duration",
        ];
        for w in want {
            assert!(
                p.iter().any(|x| x.starts_with(w)),
                "missing `{w}` in:\n{}",
                p.join("\n")
            );
        }
    }

    #[test]
    fn an_unknown_hooks_key_names_it() {
        let p = problems("hooks:\n  beforeDrain:\n    webhook: []\n");
        assert!(
            p[0].starts_with("3: hooks.beforeDrain.webhook: unknown field `webhook`"),
            "{p:?}"
        );
        let p = problems("hooks:\n  beforeReboot: {}\n");
        assert!(
            p[0].starts_with("2: hooks.beforeReboot: unknown field `beforeReboot`"),
            "{p:?}"
        );
    }
}
