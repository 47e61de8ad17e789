//! The rules of a config that its types cannot express, one validator per section, and the
//! compiled forms of its string fields (schedule, selectors).
//!
//! Owns what is checked after the YAML is read into a [`Config`]: each validator hands every
//! problem it finds, with its key path, to `report`, and goes on, so that all problems are
//! reported together. It must never stop at the first problem, never read the file (the
//! loader locates each problem by its key path: see [`super::load`]), and never reorder the
//! checks: problems the loader cannot locate are listed in the order they are found here.

use std::str::FromStr;
use std::sync::Arc;

use super::{
    BlackoutConfig, Concurrency, Config, Drain, Duration, ProblemSink, Prometheus, Reboot,
    RebootMethod, WindowConfig,
};
use crate::selector::Selector;
use crate::url::{is_dns_label, is_dns_subdomain};
use crate::windows::{Blackout, Schedule, Window};

/// Checks every rule the types cannot express and compiles the string fields. `report` gets
/// each problem with its key path; checking goes on after a problem so all are reported.
pub(super) fn validate(config: &mut Config, report: &mut ProblemSink) {
    let windows = windows(config.windows.as_deref(), report);
    let blackouts = blackouts(&config.blackouts, report);
    concurrency(&config.concurrency, report);
    if let Some(f) = &config.fleetlock {
        fleetlock(f, &config.concurrency, report);
    }
    compile_selectors(config, report);
    drain(&config.drain, report);
    reboot(&config.reboot, report);
    positive("healthGate.timeout", config.health_gate.timeout, report);
    if let Some(d) = config.nodes.min_reboot_interval {
        positive("nodes.minRebootInterval", d, report);
    }
    if let Some(p) = &config.blockers.prometheus {
        prometheus(p, report);
    }
    if let Some(a) = &config.blockers.alertmanager {
        alertmanager(
            "blockers.alertmanager",
            &a.url,
            a.token_from.as_ref(),
            report,
        );
        matchers("blockers.alertmanager.filter", &a.filter, report);
    }
    if let Some(s) = &config.silences.alertmanager {
        alertmanager(
            "silences.alertmanager",
            &s.url,
            s.token_from.as_ref(),
            report,
        );
        if s.matchers.is_empty() {
            report(
                "silences.alertmanager.matchers".into(),
                "a silence needs at least one matcher (default: node=\"{{node}}\")".into(),
            );
        }
        matchers("silences.alertmanager.matchers", &s.matchers, report);
        positive("silences.alertmanager.extra", s.extra, report);
    }
    leases(config, report);
    super::notifications::validate(&config.notifications, report);
    super::hooks::validate(&config.hooks, report);
    // Checked last, after the sections above (the order unlocated problems are listed in).
    if let Some(s) = config.drain.settle {
        positive("drain.settle", s, report);
    }

    // With an invalid window the list may be empty; the config is rejected then, so no schedule.
    config.compiled.schedule = match &config.windows {
        None => Some(Schedule::always_open(blackouts)),
        Some(_) => Schedule::try_new(windows, blackouts).ok(),
    }
    .map(Arc::new);
}

/// A duration that must be above zero.
fn positive(path: &str, d: Duration, report: &mut ProblemSink) {
    if !d.is_positive() {
        report(
            path.to_string(),
            format!("must be a positive duration, got `{d}`"),
        );
    }
}

/// `windows`: each window's zone, length and cron start; the valid ones, compiled.
fn windows(list: Option<&[WindowConfig]>, report: &mut ProblemSink) -> Vec<Window> {
    let mut windows = Vec::new();
    let Some(list) = list else {
        return windows;
    };
    if list.is_empty() {
        report(
            "windows".into(),
            "is an empty list, which would mean maintenance never happens: list at least one window, or remove the key to allow maintenance at any time".into(),
        );
    }
    for (i, w) in list.iter().enumerate() {
        let tz = match chrono_tz::Tz::from_str(&w.timezone) {
            Ok(tz) => Some(tz),
            Err(_) => {
                report(
                    format!("windows[{i}].timezone"),
                    format!(
                        "unknown time zone `{}`: expected an IANA name such as `UTC`, `Europe/Berlin` or `America/New_York`",
                        w.timezone
                    ),
                );
                None
            }
        };
        positive(&format!("windows[{i}].duration"), w.duration, report);
        // The cron expression is checked even when the zone is wrong, so both are reported.
        match Window::new(
            &w.schedule,
            w.duration
                .to_chrono()
                .max(chrono::Duration::milliseconds(1)),
            tz.unwrap_or(chrono_tz::UTC),
        ) {
            Ok(win) if tz.is_some() && w.duration.is_positive() => windows.push(win),
            Ok(_) => {}
            Err(e) => report(format!("windows[{i}].schedule"), e.to_string()),
        }
    }
    windows
}

/// `blackouts`: each must end after it starts; the valid ones, in UTC.
fn blackouts(list: &[BlackoutConfig], report: &mut ProblemSink) -> Vec<Blackout> {
    let mut blackouts = Vec::new();
    for (i, b) in list.iter().enumerate() {
        if b.from >= b.to {
            report(
                format!("blackouts[{i}]"),
                format!(
                    "`from` ({}) must be before `to` ({})",
                    b.from.to_rfc3339(),
                    b.to.to_rfc3339()
                ),
            );
        } else {
            blackouts.push(Blackout {
                from: b.from.to_utc(),
                to: b.to.to_utc(),
            });
        }
    }
    blackouts
}

/// `concurrency`: at least one node at once; a per-group limit only with a valid `groupBy`.
/// `fleetlock`: an address to listen on, groups named as the protocol allows, each with
/// exactly one meaning.
fn fleetlock(f: &super::FleetLock, c: &Concurrency, report: &mut ProblemSink) {
    if let Err(e) = f.listen.parse::<std::net::SocketAddr>() {
        report(
            "fleetlock.listen".into(),
            format!(
                "`{}` is not an address to listen on such as 0.0.0.0:8086: {e}",
                f.listen
            ),
        );
    }
    for (i, c) in f.trusted_proxies.iter().enumerate() {
        if let Err(e) = crate::fleetlock::caller::Cidr::parse(c) {
            report(
                format!("fleetlock.trustedProxies[{i}]"),
                format!("`{c}` is not a CIDR block such as 10.0.0.0/16: {e}"),
            );
        }
    }
    for (name, g) in &f.groups {
        let key = format!("fleetlock.groups.{name}");
        if !crate::fleetlock::protocol::group_ok(name) {
            report(
                key.clone(),
                "a FleetLock group is letters, digits, `.` and `-` only (^[a-zA-Z0-9.-]+$)".into(),
            );
        }
        match (&g.group_by, g.max_nodes) {
            (Some(_), Some(_)) | (None, None) => report(
                key,
                "give exactly one of `groupBy` (a value of concurrency.groupBy's label) and `maxNodes`".into(),
            ),
            (Some(_), None) if c.group_by.is_none() => report(
                format!("{key}.groupBy"),
                "needs `concurrency.groupBy`: the label key whose value the host's Node must have".into(),
            ),
            (None, Some(0)) => report(format!("{key}.maxNodes"), "must be at least 1".into()),
            _ => {}
        }
    }
}

fn concurrency(c: &Concurrency, report: &mut ProblemSink) {
    if c.pass_over_for.as_millis() < 0 {
        report(
            "concurrency.passOverFor".into(),
            format!(
                "must be a duration of 0s or more (0s takes nodes in order only), got `{}`",
                c.pass_over_for
            ),
        );
    }
    if c.max_nodes == 0 {
        report(
            "concurrency.maxNodes".into(),
            "must be at least 1 (to pause rollboot, take the lock instead)".into(),
        );
    }
    match (&c.group_by, c.max_nodes_per_group) {
        (None, Some(_)) => report(
            "concurrency.maxNodesPerGroup".into(),
            "needs `groupBy`: the label key whose values form the groups".into(),
        ),
        (Some(_), Some(0)) => report(
            "concurrency.maxNodesPerGroup".into(),
            "must be at least 1".into(),
        ),
        (Some(key), _) => {
            if let Err(e) = Selector::parse(key) {
                report(
                    "concurrency.groupBy".into(),
                    format!("not a label key: {e}"),
                );
            }
        }
        _ => {}
    }
}

/// `nodes.selector`, `drain.podSelector` and `blockers.podSelectors`, compiled (an invalid one
/// as "everything": the config is rejected then anyway).
fn compile_selectors(config: &mut Config, report: &mut ProblemSink) {
    let selector = |path: &str, text: &str, report: &mut ProblemSink| {
        Selector::parse(text).unwrap_or_else(|e| {
            report(path.to_string(), e.to_string());
            Selector::everything()
        })
    };
    config.compiled.node_selector = selector("nodes.selector", &config.nodes.selector, report);
    config.compiled.pod_selector =
        selector("drain.podSelector", &config.drain.pod_selector, report);
    config.compiled.blocking_pod_selectors = config
        .blockers
        .pod_selectors
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let path = format!("blockers.podSelectors[{i}]");
            let sel = selector(&path, s, report);
            if s.trim().is_empty() {
                report(
                    path,
                    "an empty selector matches every pod and would block forever".into(),
                );
            }
            sel
        })
        .collect();
    for (i, rule) in config.drain.order.iter_mut().enumerate() {
        if let Err((key, why)) = rule.compile() {
            report(format!("drain.order[{i}].{key}"), why);
        }
    }
}

/// `drain` (but `settle`, checked last by [`validate`]).
fn drain(d: &Drain, report: &mut ProblemSink) {
    positive("drain.timeout", d.timeout, report);
    positive(
        "drain.evictionRetryInterval",
        d.eviction_retry_interval,
        report,
    );
    if d.concurrent_evictions == 0 {
        report(
            "drain.concurrentEvictions".into(),
            "must be at least 1".into(),
        );
    }
    if let Some(g) = d.grace_period {
        if g.as_millis() < 0 {
            report(
                "drain.gracePeriod".into(),
                format!("must not be negative, got `{g}`"),
            );
        }
    }
    for (i, rule) in d.order.iter().enumerate() {
        if let (Some(min), Some(max)) = (rule.min_priority, rule.max_priority) {
            if min > max {
                report(
                    format!("drain.order[{i}].minPriority"),
                    format!("{min} is above maxPriority {max}: the rule would match no pod"),
                );
            }
        }
    }
    positive(
        "drain.volumes.detachTimeout",
        d.volumes.detach_timeout,
        report,
    );
    positive(
        "drain.volumes.reattachTimeout",
        d.volumes.reattach_timeout,
        report,
    );
}

/// `reboot`: its timings, the sentinel, the host's files, and the reboot method.
fn reboot(r: &Reboot, report: &mut ProblemSink) {
    positive("reboot.timeout", r.timeout, report);
    positive("reboot.checkPeriod", r.check_period, report);
    sentinel(r, report);
    for (key, path) in [
        ("reboot.hostBootIdFile", &r.host_boot_id_file),
        ("reboot.hostMachineIdFile", &r.host_machine_id_file),
        ("reboot.hostMountNamespace", &r.host_mount_namespace),
    ] {
        let may_be_empty = key != "reboot.hostBootIdFile";
        if (path.is_empty() && !may_be_empty) || (!path.is_empty() && !path.starts_with('/')) {
            report(
                key.into(),
                format!(
                    "`{path}` is not an absolute path{}",
                    if may_be_empty { " (or empty)" } else { "" }
                ),
            );
        }
    }
    if r.method == RebootMethod::Command && (r.command.is_empty() || r.command[0].is_empty()) {
        report(
            "reboot.command".into(),
            "must be a non-empty argv list when `method` is `command`".into(),
        );
    }
    if !(1..=64).contains(&r.signal) {
        report(
            "reboot.signal".into(),
            format!("must be a signal number from 1 to 64, got {}", r.signal),
        );
    }
}

/// The sentinel of `reboot`: a file or a command, and what the command's exit codes mean.
fn sentinel(r: &Reboot, report: &mut ProblemSink) {
    if r.sentinel_file.is_empty() && r.sentinel_command.is_none() {
        report(
            "reboot.sentinelFile".into(),
            "is empty and no `sentinelCommand` is set: the agent could never notice a needed reboot".into(),
        );
    }
    if let Some(cmd) = &r.sentinel_command {
        if cmd.is_empty() || cmd[0].is_empty() {
            report(
                "reboot.sentinelCommand".into(),
                "must be a non-empty argv list such as [\"/usr/bin/needs-restarting\", \"-r\"]"
                    .into(),
            );
        }
    }
    if r.sentinel_reboot_exit_codes.is_empty() {
        report(
            "reboot.sentinelRebootExitCodes".into(),
            "is empty: the sentinel command could never say a reboot is needed".into(),
        );
    }
    let no_reboot = r.sentinel_no_reboot_codes();
    for (key, codes) in [
        (
            "reboot.sentinelRebootExitCodes",
            &r.sentinel_reboot_exit_codes,
        ),
        ("reboot.sentinelNoRebootExitCodes", &no_reboot),
    ] {
        if let Some(c) = codes.iter().find(|c| !(0..=255).contains(*c)) {
            report(key.into(), format!("{c} is not an exit code (0 to 255)"));
        }
    }
    if let Some(c) = no_reboot
        .iter()
        .find(|c| r.sentinel_reboot_exit_codes.contains(c))
    {
        report(
            "reboot.sentinelNoRebootExitCodes".into(),
            format!("{c} is also in sentinelRebootExitCodes: an exit code cannot mean both"),
        );
    }
    if r.sentinel_command.is_some() && no_reboot.is_empty() {
        report(
            "reboot.sentinelNoRebootExitCodes".into(),
            "is empty: the sentinel command could never say no reboot is needed".into(),
        );
    }
}

/// `blockers.prometheus`: an http(s) URL and a valid alert filter.
fn prometheus(p: &Prometheus, report: &mut ProblemSink) {
    if !(p.url.starts_with("http://") || p.url.starts_with("https://")) {
        report(
            "blockers.prometheus.url".into(),
            format!(
                "`{}` is not an http:// or https:// URL of a Prometheus server",
                p.url
            ),
        );
    }
    if let Some(f) = &p.alert_filter {
        if let Err(e) = regex::Regex::new(f) {
            report(
                "blockers.prometheus.alertFilter".into(),
                format!("not a valid regular expression: {e}"),
            );
        }
    }
}

/// An Alertmanager's `url` (http or https) and `tokenFrom` under `key`.
fn alertmanager(
    key: &str,
    url: &str,
    token: Option<&crate::config::notifications::SecretRef>,
    report: &mut ProblemSink,
) {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        report(
            format!("{key}.url"),
            format!("`{url}` is not an http:// or https:// URL of an Alertmanager"),
        );
    }
    if let Some(t) = token {
        super::notifications::check_secret_ref(&format!("{key}.tokenFrom"), t, report);
    }
}

/// Alertmanager matchers, each `name="value"` (`=`, `!=`, `=~`, `!~`).
fn matchers(key: &str, list: &[String], report: &mut ProblemSink) {
    for (i, m) in list.iter().enumerate() {
        match crate::silences::Matcher::parse(m) {
            Err(why) => report(format!("{key}[{i}]"), why),
            Ok(m) if m.is_regex => {
                if let Err(e) = regex::Regex::new(&m.value.replace("{{node}}", "node")) {
                    report(
                        format!("{key}[{i}]"),
                        format!("not a valid regular expression: {e}"),
                    );
                }
            }
            Ok(_) => {}
        }
    }
}

/// `lock` and `leader`: valid Lease names, two distinct Leases, and leader timings that fence
/// a deposed leader by time.
fn leases(config: &Config, report: &mut ProblemSink) {
    for (section, ns, name) in [
        ("lock", &config.lock.namespace, &config.lock.name),
        ("leader", &config.leader.namespace, &config.leader.name),
    ] {
        if !is_dns_label(ns) {
            report(format!("{section}.namespace"), format!("`{ns}` is not a valid namespace name (lowercase letters, digits and `-`, at most 63)"));
        }
        if !is_dns_subdomain(name) {
            report(format!("{section}.name"), format!("`{name}` is not a valid Lease name (lowercase letters, digits, `-` and `.`, at most 253)"));
        }
    }
    if config.lock.namespace == config.leader.namespace && config.lock.name == config.leader.name {
        report(
            "lock.name".into(),
            "must differ from `leader.name`: the lock and leader election are two Leases".into(),
        );
    }
    let l = &config.leader;
    positive("leader.leaseDuration", l.lease_duration, report);
    positive("leader.renewDeadline", l.renew_deadline, report);
    positive("leader.retryPeriod", l.retry_period, report);
    if l.renew_deadline >= l.lease_duration {
        report(
            "leader.renewDeadline".into(),
            format!(
                "must be shorter than `leaseDuration` ({}), so a leader that cannot renew stops acting before another can take over",
                l.lease_duration
            ),
        );
    }
    if l.retry_period >= l.renew_deadline {
        report(
            "leader.retryPeriod".into(),
            format!(
                "must be shorter than `renewDeadline` ({}), so a leader gets more than one try to renew",
                l.renew_deadline
            ),
        );
    }
}
