//! The config file's strict validation: every rule names the key path, the line and what is allowed.

use rollboot::config::{self, parse_str, ConfigError, Problem};

fn problems(yaml: &str) -> Vec<Problem> {
    match parse_str(yaml) {
        Ok(_) => panic!("expected the config to be rejected:\n{yaml}"),
        Err(p) => p,
    }
}

/// Asserts exactly one problem, at `path`, whose message contains `needle`; returns it.
fn one_problem(yaml: &str, path: &str, needle: &str) -> Problem {
    let p = problems(yaml);
    assert_eq!(p.len(), 1, "expected one problem, got {p:#?}");
    assert_eq!(p[0].path, path, "{p:#?}");
    assert!(
        p[0].message.contains(needle),
        "message {:?} should contain {needle:?}",
        p[0].message
    );
    p[0].clone()
}

#[test]
fn an_empty_mapping_is_all_defaults() {
    let c = parse_str("{}").unwrap();
    assert!(c.windows.is_none());
    assert_eq!(c.concurrency.max_nodes, 1);
    assert_eq!(c.drain.eviction_retry_interval.as_millis(), 5_000);
    assert!(c.drain.ignore_daemon_sets);
    assert!(!c.drain.force_delete_after_timeout);
    // The host's /var/run/reboot-required, where the DaemonSet mounts the host's /var/run.
    assert_eq!(c.reboot.sentinel_file, "/host/var/run/reboot-required");
    assert_eq!(
        c.reboot.host_boot_id_file,
        "/proc/1/root/proc/sys/kernel/random/boot_id"
    );
    assert_eq!(c.failures.max_failures, 0);
    assert_eq!(c.leader.lease_duration.as_millis(), 15_000);
    assert_eq!(c.leader.renew_deadline.as_millis(), 10_000);
    assert_eq!(c.leader.retry_period.as_millis(), 2_000);
    assert_eq!(c.lock.name, "rollboot-lock");
    assert!(c.schedule().is_allowed(chrono::Utc::now()));
}

#[test]
fn the_reference_file_loads_and_states_the_real_defaults() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/config/rollboot.yaml");
    let reference = config::load_file(std::path::Path::new(path)).unwrap();
    let defaults = parse_str("{}").unwrap();
    // Every section but the example windows and blackouts must equal the built-in defaults,
    // so the reference cannot document a default that the code does not have.
    let as_json = |c: &config::Config| {
        let mut v = serde_json::to_value(c).unwrap();
        let m = v.as_object_mut().unwrap();
        m.remove("windows");
        m.remove("blackouts");
        v
    };
    assert_eq!(as_json(&reference), as_json(&defaults));
    assert_eq!(reference.windows.as_ref().unwrap().len(), 2);
}

#[test]
fn an_unknown_key_names_the_key_and_its_line() {
    let p = one_problem(
        "concurrency:\n  maxNode: 2\n",
        "concurrency.maxNode",
        "unknown field `maxNode`",
    );
    assert_eq!((p.line, p.column), (Some(2), Some(3)));
    assert!(p.message.contains("maxNodes"), "lists what is allowed");
}

#[test]
fn an_unknown_top_level_section_is_rejected() {
    one_problem(
        "reboots:\n  timeout: 5m\n",
        "reboots",
        "unknown field `reboots`",
    );
}

#[test]
fn a_wrong_type_names_the_key_and_the_expected_type() {
    let p = one_problem(
        "concurrency:\n  maxNodes: many\n",
        "concurrency.maxNodes",
        "invalid type",
    );
    assert_eq!(p.line, Some(2));
}

#[test]
fn a_duplicate_key_is_rejected() {
    let p = one_problem(
        "drain:\n  timeout: 5m\n  timeout: 6m\n",
        "drain.timeout",
        "duplicate field `timeout`",
    );
    // At the repeated key, not at its first occurrence.
    assert_eq!((p.line, p.column), (Some(3), Some(3)));
    // Also in a list item and with the first occurrence on the item's own line.
    let p = one_problem(
        "windows:\n  - schedule: \"0 2 * * *\"\n    duration: 1h\n    schedule: \"0 3 * * *\"\n",
        "windows[0].schedule",
        "duplicate field `schedule`",
    );
    assert_eq!((p.line, p.column), (Some(4), Some(5)));
}

#[test]
fn a_bad_cron_expression_names_the_window() {
    let p = one_problem(
        "windows:\n  - schedule: \"61 2 * * *\"\n    duration: 1h\n",
        "windows[0].schedule",
        "61",
    );
    assert_eq!((p.line, p.column), (Some(2), Some(15)));
}

#[test]
fn a_six_field_cron_expression_is_rejected() {
    one_problem(
        "windows:\n  - schedule: \"0 0 2 * * *\"\n    duration: 1h\n",
        "windows[0].schedule",
        "5 fields",
    );
}

#[test]
fn an_unknown_time_zone_names_the_window_and_what_is_allowed() {
    let p = one_problem(
        "windows:\n  - schedule: \"0 2 * * *\"\n    duration: 1h\n  - schedule: \"0 3 * * *\"\n    duration: 1h\n    timezone: Europe/Berln\n",
        "windows[1].timezone",
        "IANA",
    );
    assert_eq!((p.line, p.column), (Some(6), Some(15)));
    assert!(p.message.contains("Europe/Berln"));
}

#[test]
fn zero_and_negative_durations_are_rejected_everywhere() {
    let p = problems(
        "windows:\n  - schedule: \"0 2 * * *\"\n    duration: 0s\ndrain:\n  timeout: -5m\nreboot:\n  checkPeriod: 0ms\n",
    );
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        ["windows[0].duration", "drain.timeout", "reboot.checkPeriod"]
    );
    assert!(p.iter().all(|p| p.message.contains("positive")));
}

#[test]
fn a_duration_without_a_unit_says_how_to_write_one() {
    one_problem("drain:\n  timeout: \"10\"\n", "drain.timeout", "unit");
    one_problem("drain:\n  timeout: 10\n", "drain.timeout", "duration");
}

#[test]
fn a_blackout_ending_before_it_starts_is_rejected() {
    let p = one_problem(
        "blackouts:\n  - from: 2026-12-24T00:00:00Z\n    to: 2026-12-23T00:00:00Z\n",
        "blackouts[0]",
        "must be before",
    );
    assert_eq!(p.line, Some(2));
}

#[test]
fn a_blackout_instant_must_be_rfc3339() {
    one_problem(
        "blackouts:\n  - from: christmas\n    to: 2026-12-23T00:00:00Z\n",
        "blackouts[0].from",
        "`christmas` is not an RFC 3339 instant such as 2026-12-24T00:00:00Z",
    );
    // A date alone: say what is missing, not chrono's "premature end of input" only.
    let p = one_problem(
        "blackouts:\n  - from: 2026-12-24\n    to: 2026-12-26T00:00:00Z\n",
        "blackouts[0].from",
        "a date alone has no time and no offset: write 2026-12-24T00:00:00Z for midnight UTC",
    );
    assert_eq!(p.line, Some(2));
}

#[test]
fn unparsable_selectors_are_rejected_with_their_path() {
    let p = problems(
        "nodes:\n  selector: \"zone in (a,b\"\ndrain:\n  podSelector: \"app=!x\"\nblockers:\n  podSelectors: [\"ok=yes\", \"bad key=1\"]\n",
    );
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "nodes.selector",
            "drain.podSelector",
            "blockers.podSelectors[1]"
        ]
    );
    assert!(p[0].message.contains("unclosed"));
}

#[test]
fn an_empty_windows_list_would_mean_never_and_is_rejected() {
    one_problem("windows: []\n", "windows", "never");
    one_problem("windows:\n", "windows", "remove the key");
}

#[test]
fn all_semantic_problems_are_reported_together_in_file_order() {
    let p = problems(
        "windows:\n  - schedule: \"0 2 * * *\"\n    duration: 1h\n    timezone: Nowhere/City\nconcurrency:\n  maxNodes: 0\nleader:\n  renewDeadline: 20s\n",
    );
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "windows[0].timezone",
            "concurrency.maxNodes",
            "leader.renewDeadline"
        ]
    );
    assert_eq!(p[2].line, Some(8));
}

#[test]
fn per_group_limit_needs_a_group_key() {
    one_problem(
        "concurrency:\n  maxNodesPerGroup: 2\n",
        "concurrency.maxNodesPerGroup",
        "groupBy",
    );
    let c = parse_str("concurrency:\n  groupBy: topology.kubernetes.io/zone\n").unwrap();
    assert_eq!(c.group_limit(), Some(("topology.kubernetes.io/zone", 1)));
}

#[test]
fn the_reboot_command_must_not_be_empty() {
    one_problem("reboot:\n  command: []\n", "reboot.command", "non-empty");
    one_problem(
        "reboot:\n  method: reboot-now\n",
        "reboot.method",
        "unknown variant",
    );
}

#[test]
fn prometheus_needs_a_url_and_a_valid_filter() {
    let p = problems(
        "blockers:\n  prometheus:\n    url: prometheus:9090\n    alertFilter: \"(unclosed\"\n",
    );
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        ["blockers.prometheus.url", "blockers.prometheus.alertFilter"]
    );
}

#[test]
fn the_lock_and_the_leader_must_be_different_leases() {
    one_problem(
        "lock:\n  name: rollboot-leader\n",
        "lock.name",
        "must differ",
    );
}

#[test]
fn yaml_syntax_errors_are_located() {
    let p = problems("drain:\n  timeout: 5m\n bad indent: x\n");
    assert_eq!(p.len(), 1);
    assert!(p[0].line.is_some(), "{p:?}");
}

#[test]
fn an_empty_file_is_an_error_not_all_defaults() {
    one_problem("", "", "empty");
    one_problem("# only a comment\n\n", "", "empty");
}

fn write_temp(bytes: &[u8]) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f
}

#[test]
fn a_missing_file_is_a_read_error_naming_it() {
    let e = config::load_file(std::path::Path::new("/nonexistent/rollboot.yaml")).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(e.to_string().contains("/nonexistent/rollboot.yaml"));
}

#[test]
fn a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let e = config::load_file(dir.path()).unwrap_err();
    assert!(matches!(e, ConfigError::IsDirectory { .. }), "{e}");
}

#[test]
fn a_binary_file_is_refused() {
    let f = write_temp(&[0x7f, b'E', b'L', b'F', 0, 1, 2, 3]);
    let e = config::load_file(f.path()).unwrap_err();
    assert!(e.problems()[0].message.contains("binary"), "{e}");
    let f = write_temp(&[b'a', 0xff, 0xfe, b'\n']);
    let e = config::load_file(f.path()).unwrap_err();
    assert!(e.problems()[0].message.contains("UTF-8"), "{e}");
}

#[test]
fn a_file_over_one_mebibyte_is_refused_before_parsing() {
    let mut text = b"# padding\n".repeat(110_000);
    text.extend_from_slice(b"{}\n");
    let f = write_temp(&text);
    let e = config::load_file(f.path()).unwrap_err();
    assert!(e.problems()[0].message.contains("1 MiB"), "{e}");
}

#[test]
fn bad_drain_order_rules_and_volume_timeouts_are_named_by_key_and_line() {
    let p = one_problem(
        "drain:\n  order:\n    - {podSelector: app=osd, order: 10}\n    - {podSelector: app=job, behavior: whenever}\n",
        "drain.order[1].behavior",
        "unknown variant `whenever`",
    );
    assert_eq!(p.line, Some(4), "{p:?}");
    assert!(p.message.contains("waitCompleted"), "{p:?}");
    let p = one_problem(
        "drain:\n  order:\n    - podSelector: app=osd\n    - podSelector: 'app in (a'\n      order: 2\n",
        "drain.order[1].podSelector",
        "app in (a",
    );
    assert_eq!(p.line, Some(4), "{p:?}");
    let p = one_problem(
        "drain:\n  order:\n    - namespaceSelector: '!!'\n",
        "drain.order[0].namespaceSelector",
        "",
    );
    assert_eq!(p.line, Some(3), "{p:?}");
    let p = one_problem(
        "drain:\n  order:\n    - {minPriority: 10, maxPriority: 1}\n",
        "drain.order[0].minPriority",
        "above maxPriority 1",
    );
    assert_eq!(p.line, Some(3), "{p:?}");
    let p = one_problem(
        "drain:\n  volumes:\n    detachTimeout: 0s\n",
        "drain.volumes.detachTimeout",
        "must be a positive duration",
    );
    assert_eq!(p.line, Some(3), "{p:?}");
    let p = one_problem(
        "silences:\n  alertmanager:\n    url: http://am:9093\n    matchers: ['node=\"{{node}}\"', 'no operator']\n",
        "silences.alertmanager.matchers[1]",
        "is not a matcher",
    );
    assert_eq!(p.line, Some(4), "{p:?}");
    one_problem(
        "blockers:\n  alertmanager: {url: 'am:9093'}\n",
        "blockers.alertmanager.url",
        "not an http:// or https:// URL",
    );
    let p = one_problem(
        "nodes:\n  minRebootInterval: 0s\n",
        "nodes.minRebootInterval",
        "must be a positive duration",
    );
    assert_eq!(p.line, Some(2), "{p:?}");
    let p = one_problem(
        "drain:\n  volumes:\n    waitForReattach: true\n    reattachTimeout: 0s\n",
        "drain.volumes.reattachTimeout",
        "must be a positive duration",
    );
    assert_eq!(p.line, Some(4), "{p:?}");
    one_problem(
        "drain:\n  volumes: {waitForDettach: false}\n",
        "drain.volumes.waitForDettach",
        "unknown field",
    );
}

#[test]
fn drain_order_rules_and_volumes_load() {
    let c = parse_str(
        "drain:\n  order:\n    - {podSelector: app=osd, namespaceSelector: 'tier in (storage)', minPriority: 0, order: 100}\n    - {podSelector: app=job, behavior: waitCompleted}\n  volumes: {waitForDetach: false, detachTimeout: 90s, waitForReattach: true, reattachTimeout: 2m}\n",
    )
    .unwrap();
    assert!(c.drain.volumes.wait_for_reattach);
    assert_eq!(c.drain.volumes.reattach_timeout.as_millis(), 120_000);
    assert_eq!(c.drain.order.len(), 2);
    assert_eq!(c.drain.order[1].behavior, config::Behavior::WaitCompleted);
    assert!(!c.drain.volumes.wait_for_detach);
    assert_eq!(c.drain.volumes.detach_timeout.as_millis(), 90_000);
    let d = parse_str("{}").unwrap();
    assert!(d.drain.order.is_empty() && d.drain.volumes.wait_for_detach);
    assert_eq!(d.drain.volumes.detach_timeout.as_millis(), 300_000);
    assert!(!d.drain.volumes.wait_for_reattach);
    assert_eq!(d.drain.volumes.reattach_timeout.as_millis(), 90_000);
}

#[test]
fn a_fleetlock_trusted_proxy_must_be_a_cidr_block_named_by_its_index() {
    let p = one_problem(
        "fleetlock: {listen: '0.0.0.0:8086', trustedProxies: ['10.0.0.0/8', '10.0.0.0/40']}",
        "fleetlock.trustedProxies[1]",
        "/40",
    );
    assert!(p.message.contains("CIDR"), "{p:?}");
    let c = rollboot::config::parse_str(
        "fleetlock: {listen: '0.0.0.0:8086', trustedProxies: ['10.0.0.0/8', 'fd00::/64']}",
    )
    .unwrap();
    let f = c.fleetlock.unwrap();
    assert!(f.verify_client_address, "on unless turned off");
    assert_eq!(f.trusted_proxies().len(), 2);
}
