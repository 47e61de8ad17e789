//! The config file's JSON Schema as an editor uses it: `config/rollboot.schema.json` is what
//! `rollboot config schema` prints, a valid draft 2020-12 schema; the reference config and the
//! installed one validate against it; a wrong key or a wrong type fails against it, as it fails
//! in the parser; and `config/rollboot.yaml`'s first line points the YAML language server at it.
//!
//! `ROLLBOOT_BLESS=1 cargo test --test cli schema::` rewrites the committed schema.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::run as cli;

const SCHEMA: &str = "config/rollboot.schema.json";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The committed schema, as a validator.
fn validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(root().join(SCHEMA)).expect(SCHEMA);
    let schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    jsonschema::validator_for(&schema).expect("the schema compiles")
}

/// Why `yaml` fails against the schema (empty when it validates).
fn schema_errors(v: &jsonschema::Validator, yaml: &str) -> Vec<String> {
    let instance: Value = yaml_serde::from_str(yaml).expect("test YAML parses");
    v.iter_errors(&instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn the_committed_schema_is_what_config_schema_prints_and_a_valid_2020_12_schema() {
    let (code, printed, err) =
        cli::rollboot_blocking(Path::new("/nonexistent"), &["config", "schema"]);
    assert_eq!(code, 0, "{err}");
    let path = root().join(SCHEMA);
    if std::env::var_os("ROLLBOOT_BLESS").is_some() {
        std::fs::write(&path, &printed).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == printed,
        "{SCHEMA} differs from what `rollboot config schema` prints: regenerate it with \
         `cargo run -- config schema > {SCHEMA}` (or ROLLBOOT_BLESS=1 cargo test --test cli schema::)"
    );
    let schema: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    jsonschema::meta::validate(&schema).expect("a valid draft 2020-12 schema");
}

#[test]
fn the_reference_and_the_installed_configs_validate() {
    let v = validator();
    let reference = std::fs::read_to_string(root().join("config/rollboot.yaml")).unwrap();
    assert_eq!(schema_errors(&v, &reference), Vec::<String>::new());
    assert_eq!(schema_errors(&v, "{}"), Vec::<String>::new());
    // deploy/config.yaml: the ConfigMap's `rollboot.yaml`, once per namespace.
    let manifests = std::fs::read_to_string(root().join("deploy/config.yaml")).unwrap();
    let mut checked = 0;
    for doc in yaml_serde::Deserializer::from_str(&manifests) {
        let doc: Value = serde::Deserialize::deserialize(doc).unwrap();
        if let Some(text) = doc["data"]["rollboot.yaml"].as_str() {
            assert_eq!(schema_errors(&v, text), Vec::<String>::new());
            checked += 1;
        }
    }
    assert!(checked > 0, "no config in deploy/config.yaml");
}

#[test]
fn a_section_or_list_left_empty_validates_as_the_parser_reads_it_but_empty_windows_fail() {
    let v = validator();
    for yaml in [
        "silences:\n",
        "drain:\n  order:\n  whenBlocked:\n",
        "hooks: {beforeDrain: {labels: , webhooks: }}\n",
    ] {
        assert_eq!(schema_errors(&v, yaml), Vec::<String>::new(), "{yaml}");
        assert!(rollboot::config::parse_str(yaml).is_ok(), "{yaml}");
    }
    assert!(!schema_errors(&v, "windows:\n").is_empty());
    assert!(rollboot::config::parse_str("windows:\n").is_err());
}

#[test]
fn a_wrong_key_fails_against_the_schema_as_in_the_parser() {
    let v = validator();
    for (yaml, key) in [
        ("drian: {}\n", "drian"),
        ("drain:\n  timeoutt: 5m\n", "timeoutt"),
        ("drain:\n  when_blocked: {budget: wait}\n", "when_blocked"),
        ("windows:\n  - {schedule: '0 2 * * *', duration: 1h, zone: UTC}\n", "zone"),
        ("hooks:\n  beforeDrain:\n    webhooks:\n      - {name: a, url: 'http://x', retry: 2}\n", "retry"),
        ("notifications:\n  sinks:\n    - {name: a, type: slack, urlFrom: {env: A}, url: 'https://x'}\n", "url"),
        ("fleetlock: {listen: ':8086', groups: {a: {maxNode: 1}}}\n", "maxNode"),
    ] {
        let errors = schema_errors(&v, yaml);
        assert!(
            errors.iter().any(|e| e.contains(key)),
            "{yaml}: the schema let `{key}` pass: {errors:?}"
        );
        assert!(
            rollboot::config::parse_str(yaml).is_err(),
            "{yaml}: the parser let `{key}` pass"
        );
    }
}

#[test]
fn a_wrong_type_fails_against_the_schema_as_in_the_parser() {
    let v = validator();
    for (yaml, at) in [
        ("concurrency: {maxNodes: two}\n", "/concurrency/maxNodes"),
        ("concurrency: {maxNodes: -1}\n", "/concurrency/maxNodes"),
        ("drain: {timeout: soon}\n", "/drain/timeout"),
        (
            "drain: {ignoreDaemonSets: [yes]}\n",
            "/drain/ignoreDaemonSets",
        ),
        ("nodes: {order: newest-first}\n", "/nodes/order"),
        ("windows: []\n", "/windows"),
        ("windows:\n  - {duration: 1h}\n", "/windows/0"),
        (
            "blackouts: [{from: 2026-12-24T00:00:00Z, to: {}}]\n",
            "/blackouts/0/to",
        ),
        (
            "reboot: {sentinelCommand: needs-restarting}\n",
            "/reboot/sentinelCommand",
        ),
        (
            "notifications:\n  sinks:\n    - {name: a, type: email, urlFrom: {env: A}}\n",
            "/notifications/sinks/0/type",
        ),
        (
            "notifications:\n  sinks:\n    - {name: a, type: slack, urlFrom: {env: A, file: /x}}\n",
            "/notifications/sinks/0/urlFrom",
        ),
    ] {
        let errors = schema_errors(&v, yaml);
        assert!(
            errors.iter().any(|e| e.starts_with(&format!("{at}:"))),
            "{yaml}: nothing wrong at {at} for the schema: {errors:?}"
        );
        assert!(
            rollboot::config::parse_str(yaml).is_err(),
            "{yaml}: the parser took it"
        );
    }
}

#[test]
fn the_reference_config_names_the_committed_schema_on_its_first_line() {
    let path = root().join("config/rollboot.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    let first = text.lines().next().unwrap_or_default();
    let target = first
        .strip_prefix("# yaml-language-server: $schema=")
        .unwrap_or_else(|| panic!("config/rollboot.yaml starts with {first:?}"));
    // Relative to the file, as the language server resolves it.
    let resolved = path.parent().unwrap().join(target);
    assert_eq!(
        std::fs::canonicalize(&resolved).unwrap_or_else(|e| panic!("{target}: {e}")),
        std::fs::canonicalize(root().join(SCHEMA)).unwrap()
    );
}
