//! Each group of kured's flags as one section of the rollboot config, and the notes of what a
//! group does not carry over. Pure: no file, cluster or clock.
//!
//! A section is `None` when kured's flags leave rollboot's defaults as they are; the notes keep
//! the order in which the sections are taken ([`super::migrate`]).

use serde_json::{json, Map, Value};

use super::flags::{kind_of, shell_words, Flags};
use super::window::KuredWindow;
use super::{flag_err, MigrateError, Note};

/// The notes of a migration, in the order they were taken.
#[derive(Default)]
pub(super) struct Notes(Vec<Note>);

impl Notes {
    /// A note on `flag`: a kured flag is named with its dashes; what kured does without a flag
    /// (`drain`) is not.
    pub(super) fn add(&mut self, flag: &str, text: String) {
        self.0.push(Note {
            flag: if kind_of(flag).is_some() {
                format!("--{flag}")
            } else {
                flag.into()
            },
            note: text,
        })
    }

    pub(super) fn into_vec(self) -> Vec<Note> {
        self.0
    }
}

/// `windows`: kured's time window as one or two rollboot windows (none for every day, all day).
pub(super) fn windows(flags: &Flags, notes: &mut Notes) -> Result<Option<Value>, MigrateError> {
    let (windows, window_notes) = KuredWindow::of(flags)?.to_rollboot()?;
    for (flag, n) in window_notes {
        notes.add(flag, n);
    }
    Ok((!windows.is_empty()).then_some(Value::Array(windows)))
}

/// `concurrency`: `--concurrency` as `maxNodes`.
pub(super) fn concurrency(flags: &Flags) -> Result<Option<Value>, MigrateError> {
    match flags.int("concurrency")? {
        Some(n) if n < 1 => Err(flag_err("concurrency", format!("{n}: at least 1"))),
        Some(n) => Ok(Some(json!({"maxNodes": n}))),
        None => Ok(None),
    }
}

/// `drain`: what kured's drain does, its grace period, selector, timeout and settle.
pub(super) fn drain(flags: &Flags, notes: &mut Notes) -> Result<Option<Value>, MigrateError> {
    // kured drains as `kubectl drain --ignore-daemonsets --delete-emptydir-data --force`.
    let mut drain = Map::new();
    drain.insert("evictUnreplicated".into(), json!(true));
    drain.insert("deleteEmptyDirData".into(), json!(true));
    notes.add(
        "drain",
        "kured drains as kubectl drain --force --delete-emptydir-data: kept (evictUnreplicated, deleteEmptyDirData); set them false to have rollboot refuse such nodes instead of losing those pods".into(),
    );
    if let Some(g) = flags.int("drain-grace-period")? {
        if g >= 0 {
            drain.insert("gracePeriod".into(), json!(format!("{g}s")));
        }
    }
    if let Some(sel) = flags.str("drain-pod-selector").filter(|s| !s.is_empty()) {
        drain.insert("podSelector".into(), json!(sel));
    }
    match flags.millis("drain-timeout")? {
        Some(ms) if ms > 0 => {
            drain.insert(
                "timeout".into(),
                json!(crate::config::Duration::from_millis(ms).to_string()),
            );
        }
        _ => notes.add(
            "drain-timeout",
            "kured's drain has no time limit unless given one; rollboot's drain fails the node after drain.timeout (default 15m, kept), so a drain that cannot finish is said rather than waited on forever".into(),
        ),
    }
    if let Some(ms) = flags.millis("reboot-delay")?.filter(|ms| *ms > 0) {
        drain.insert(
            "settle".into(),
            json!(crate::config::Duration::from_millis(ms).to_string()),
        );
    }
    if flags.given("drain-delay") && flags.millis("drain-delay")?.unwrap_or(0) > 0 {
        notes.add(
            "drain-delay",
            "not carried over: rollboot has no fixed wait before a drain; a beforeDrain gate or blocking webhook (hooks) holds the drain until something is ready".into(),
        );
    }
    if flags.int("skip-wait-for-delete-timeout")?.unwrap_or(0) > 0 {
        notes.add(
            "skip-wait-for-delete-timeout",
            "not carried over: rollboot does not stop waiting for a pod stuck terminating; it names it as `stuck` after drain.stuckAfter (2m) and drain.whenBlocked.stuck decides (wait, fail or quarantine)".into(),
        );
    }
    if flags.bool("force-reboot")? {
        notes.add(
            "force-reboot",
            "not carried over: rollboot never reboots a node whose drain failed. drain.forceDeleteAfterTimeout deletes the pods a budget still protects at drain.timeout, if you must".into(),
        );
    }
    Ok(Some(Value::Object(drain)))
}

/// `reboot`: the sentinel, the period, the method and command.
pub(super) fn reboot(flags: &Flags, notes: &mut Notes) -> Result<Option<Value>, MigrateError> {
    let mut reboot = Map::new();
    let period = flags.millis("period")?.unwrap_or(3_600_000);
    if period <= 0 {
        return Err(flag_err("period", "must be positive"));
    }
    reboot.insert(
        "checkPeriod".into(),
        json!(crate::config::Duration::from_millis(period).to_string()),
    );
    if let Some(f) = flags.str("reboot-sentinel") {
        // kured's sentinel is a path on the host; rollboot's agent sees the host's /var/run
        // (= /run) at /host/var/run, and any other host path through a command run in the
        // host's mount namespace.
        match host_run_path(f) {
            Some(seen) => {
                reboot.insert("sentinelFile".into(), json!(seen));
            }
            None => {
                reboot.insert("sentinelCommand".into(), json!(["test", "-e", f]));
                notes.add(
                    "reboot-sentinel",
                    format!("{f} is outside the host's /var/run, which the agent mounts: checked as `test -e {f}` in the host's mount namespace (reboot.sentinelCommand)"),
                );
            }
        }
    }
    if let Some(c) = flags
        .str("reboot-sentinel-command")
        .filter(|c| !c.is_empty())
    {
        let argv = shell_words(c)?;
        reboot.insert("sentinelCommand".into(), json!(argv));
    }
    match flags.str("reboot-method") {
        None | Some("command") => {}
        Some("signal") => {
            reboot.insert("method".into(), json!("signal"));
        }
        Some(m) => {
            return Err(flag_err(
                "reboot-method",
                format!("`{m}`: kured knows command and signal"),
            ))
        }
    }
    if let Some(s) = flags.int("reboot-signal")? {
        reboot.insert("signal".into(), json!(s));
    }
    if let Some(c) = flags.str("reboot-command") {
        let words = shell_words(c)?;
        if words.is_empty() {
            return Err(flag_err("reboot-command", "empty"));
        }
        if words != ["/bin/systemctl", "reboot"] {
            // kured runs it in PID 1's mount namespace, as rollboot's default command does.
            let mut argv: Vec<String> = ["/usr/bin/nsenter", "-m/proc/1/ns/mnt", "--"]
                .map(String::from)
                .to_vec();
            argv.extend(words);
            reboot.insert("command".into(), json!(argv));
        }
    }
    Ok(Some(Value::Object(reboot)))
}

/// `blockers`: the blocking pods and Prometheus alerts.
pub(super) fn blockers(flags: &Flags, notes: &mut Notes) -> Result<Option<Value>, MigrateError> {
    let mut blockers = Map::new();
    if let Some(sel) = flags.list("blocking-pod-selector") {
        blockers.insert("podSelectors".into(), json!(sel));
    }
    if let Some(url) = flags.str("prometheus-url").filter(|u| !u.is_empty()) {
        let mut p = Map::new();
        p.insert("url".into(), json!(url));
        if let Some(f) = flags.str("alert-filter-regexp").filter(|f| !f.is_empty()) {
            p.insert("alertFilter".into(), json!(f));
        }
        p.insert("firingOnly".into(), json!(flags.bool("alert-firing-only")?));
        blockers.insert("prometheus".into(), Value::Object(p));
        if flags.bool("alert-filter-match-only")? {
            notes.add(
                "alert-filter-match-only",
                "not carried over: rollboot blocks on every alert its filter does not ignore; to block only on some alerts, write a filter that ignores the others".into(),
            );
        }
    }
    Ok((!blockers.is_empty()).then_some(Value::Object(blockers)))
}

/// `hooks`: the node labels before and after, and the PreferNoSchedule taint.
pub(super) fn hooks(flags: &Flags) -> Result<Option<Value>, MigrateError> {
    let mut hooks = Map::new();
    if let Some(t) = flags
        .str("prefer-no-schedule-taint")
        .filter(|t| !t.is_empty())
    {
        hooks.insert("preferNoScheduleTaint".into(), json!(t));
    }
    for (flag, phase) in [
        ("pre-reboot-node-labels", "beforeDrain"),
        ("post-reboot-node-labels", "afterDone"),
    ] {
        if let Some(items) = flags.list(flag).filter(|l| !l.is_empty()) {
            let labels: Map<String, Value> = items
                .iter()
                .map(|i| label(flag, i).map(|(k, v)| (k, Value::String(v))))
                .collect::<Result<_, _>>()?;
            hooks.insert(phase.into(), json!({"labels": labels}));
        }
    }
    Ok((!hooks.is_empty()).then_some(Value::Object(hooks)))
}

/// `notifications`: a sink where a type fits; the URL stays a secret.
pub(super) fn notifications(flags: &Flags, notes: &mut Notes) -> Option<Value> {
    let mut sinks = Vec::new();
    if let Some(u) = flags.str("slack-hook-url").filter(|u| !u.is_empty()) {
        sinks.push(
            json!({"name": "slack", "type": "slack", "urlFrom": {"env": "SLACK_WEBHOOK_URL"}}),
        );
        notes.add(
            "slack-hook-url",
            format!("carried as the sink `slack`, whose URL is read from the environment variable SLACK_WEBHOOK_URL (a Secret): put {} there; a URL is never written into rollboot's config", redact(u)),
        );
    }
    if let Some(u) = flags.str("notify-url").filter(|u| !u.is_empty()) {
        let scheme = u.split("://").next().unwrap_or_default();
        let (ty, env) = match scheme {
            "slack" => (Some("slack"), "SLACK_WEBHOOK_URL"),
            "teams" => (Some("teams"), "TEAMS_WEBHOOK_URL"),
            "generic" | "generic+https" | "generic+http" => (Some("webhook"), "WEBHOOK_URL"),
            _ => (None, ""),
        };
        match ty {
            Some(ty) if !sinks.iter().any(|s| s["type"] == ty) => {
                sinks.push(json!({"name": ty, "type": ty, "urlFrom": {"env": env}}));
                notes.add(
                    "notify-url",
                    format!("carried as the sink `{ty}`: rollboot posts to the service's own incoming-webhook URL (https://...), not a shoutrrr `{scheme}://` URL; put that URL in the environment variable {env} (a Secret)"),
                );
            }
            Some(_) => {}
            None => notes.add(
                "notify-url",
                format!("not carried over: rollboot's sinks are Slack, Teams and a JSON webhook; shoutrrr's `{scheme}://` has no equivalent"),
            ),
        }
    }
    let mut templates = Map::new();
    if let Some(t) = flags.str("message-template-uncordon") {
        templates.insert("nodeDone".into(), json!(template(t)));
    }
    for flag in ["message-template-drain", "message-template-reboot"] {
        if flags.given(flag) {
            notes.add(
                flag,
                "not carried over: rollboot tells of a node when its cycle is done or failed, not at its drain or reboot (events rolloutStarted, nodeDone, nodeFailed, rolloutHalted, blocked, windowOpened)".into(),
            );
        }
    }
    let section = if !sinks.is_empty() {
        let mut n = Map::new();
        n.insert("sinks".into(), Value::Array(sinks));
        if !templates.is_empty() {
            n.insert("templates".into(), Value::Object(templates));
        }
        Some(Value::Object(n))
    } else {
        if !templates.is_empty() {
            notes.add(
                "message-template-uncordon",
                "not carried over: no notification sink was configured".into(),
            );
        }
        None
    };
    for flag in ["slack-username", "slack-channel"] {
        if flags.given(flag) {
            notes.add(
                flag,
                "not carried over: a Slack incoming webhook posts as the name and into the channel it was created for".into(),
            );
        }
    }
    section
}

/// The settings rollboot does not need, each noted with why.
pub(super) fn not_needed(flags: &Flags, notes: &mut Notes) {
    let not_needed: &[(&str, &str)] = &[
        ("lock-ttl", "not needed: rollboot's lock is a Lease listing the nodes in flight; a new leader resumes each from what its Node says, so no lock is left held by a dead node and none needs to expire (an expiring lock could let a second node start while the first is still down)"),
        ("lock-release-delay", "not needed: rollboot frees a node's slot only once its health gate passed (its evicted pods' budgets healthy and their controllers' replicas Ready, healthGate.timeout), a measured wait rather than a fixed delay"),
        ("ds-name", "not needed: rollboot's lock is the Lease lock.namespace/lock.name, not an annotation on the DaemonSet"),
        ("ds-namespace", "not needed: rollboot's lock is the Lease lock.namespace/lock.name, not an annotation on the DaemonSet"),
        ("lock-annotation", "not needed: rollboot's lock is the Lease lock.namespace/lock.name, not an annotation on the DaemonSet"),
        ("annotate-nodes", "not needed: rollboot always records a node's state and last reboot on it (rollboot.dev/state, rollboot.dev/last-reboot)"),
        ("log-format", "a command-line option of rollboot, not config: --log-format json (or ROLLBOOT_LOG_FORMAT=json)"),
        ("metrics-host", "a command-line option of rollboot, not config: the controller's --metrics-addr, the agent's --metrics-addr"),
        ("metrics-port", "a command-line option of rollboot, not config: the controller's --metrics-addr, the agent's --metrics-addr"),
        ("node-id", "a command-line option of rollboot's agent, not config: --node-name (or NODE_NAME from spec.nodeName, as deploy/agent.yaml does)"),
    ];
    for (flag, why) in not_needed {
        if flags.given(flag) {
            notes.add(flag, (*why).into());
        }
    }
}

/// Where the agent sees the host's file `path`, when it is under the host's `/var/run` (or
/// `/run`, which `/var/run` leads to on every systemd host): under `/host/var/run`, where the
/// agent's DaemonSet mounts it.
pub(super) fn host_run_path(path: &str) -> Option<String> {
    let rest = path
        .strip_prefix("/var/run/")
        .or_else(|| path.strip_prefix("/run/"))?;
    (!rest.is_empty() && !rest.split('/').any(|p| p == ".."))
        .then(|| format!("/host/var/run/{rest}"))
}

/// The label `k=v` of a `--pre-/--post-reboot-node-labels` item.
fn label(flag: &str, item: &str) -> Result<(String, String), MigrateError> {
    item.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| flag_err(flag, format!("`{item}` is not KEY=VALUE")))
}

/// kured's `%s` (the node) as rollboot's `{node}`.
fn template(text: &str) -> String {
    text.replacen("%s", "{node}", 1).replace("%s", "")
}

/// A URL without its path and query (those carry the token): scheme and host only.
fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!(
            "the URL of {scheme}://{}/...",
            rest.split('/').next().unwrap_or_default()
        ),
        None => "the URL".into(),
    }
}
