//! The config file's JSON Schema (draft 2020-12), for editors that check a file as it is typed
//! (the YAML language server reads it from a `# yaml-language-server: $schema=...` line).
//!
//! Pure: the schema is derived from the very types the loader deserializes ([`super::Config`]
//! and its sections, with schemars reading their serde attributes), so a key, a type, a
//! default or a description cannot differ between the parser and the schema. Keys are
//! camelCase and every section rejects unknown keys (`additionalProperties: false`), as the
//! parser does. What only the validator knows (cron syntax, time zones, label selectors, which
//! duration must be positive) is not in it: `rollboot check-config` stays the judge. It must
//! never describe a key by hand; a key's words are its field's doc comment.
//!
//! `config/rollboot.schema.json` is this schema as committed (a test checks it is current);
//! `docs/reference/config.md` is written from it by [`super::reference`].

use serde_json::Value;

use super::Config;

/// The schema's title.
const TITLE: &str = "rollboot configuration";

/// What the root says of the file (the `Config` type's own doc speaks to programmers).
const DESCRIPTION: &str = "The config file of rollboot's controller and agents \
(`rollboot check-config FILE` validates one). Every key is optional; an empty mapping `{}` \
is every default. Keys are camelCase and unknown keys are errors.";

/// The JSON Schema of a config file.
pub fn schema() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<Config>().to_value();
    if let Some(root) = schema.as_object_mut() {
        root.insert("title".into(), TITLE.into());
        root.insert("description".into(), DESCRIPTION.into());
    }
    unwrap_descriptions(&mut schema);
    if let Some(root) = schema.as_object_mut() {
        for (key, value) in root.iter_mut() {
            if key != "type" {
                admit_empty(value);
            }
        }
    }
    schema
}

/// The YAML reader takes a key with nothing after it (`silences:` whose lines are all
/// commented out) as an empty section or list, so the schema does too: every object and list
/// also admits `null`, except a list that must not be empty (`minItems`, as `windows`), where
/// the validator refuses it. The root stays an object: an empty file is refused.
fn admit_empty(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let must_have_items = map.get("minItems").and_then(Value::as_u64).unwrap_or(0) > 0;
            if let Some(t) = map.get_mut("type") {
                if (t == "object" || t == "array") && !must_have_items {
                    *t = serde_json::json!([t.clone(), "null"]);
                }
            }
            map.values_mut().for_each(admit_empty);
        }
        Value::Array(items) => items.iter_mut().for_each(admit_empty),
        _ => {}
    }
}

/// The schema as committed: pretty JSON with a final newline.
pub fn schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&schema()).expect("a JSON value serializes");
    text.push('\n');
    text
}

/// Doc comments are wrapped at 100 columns; an editor's hover wraps on its own. A line break
/// inside a paragraph becomes a space; paragraphs stay apart.
fn unwrap_descriptions(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                match value {
                    Value::String(s) if key == "description" => *s = unwrap(s),
                    other => unwrap_descriptions(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(unwrap_descriptions),
        _ => {}
    }
}

fn unwrap(text: &str) -> String {
    text.split("\n\n")
        .map(|p| p.split('\n').map(str::trim).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_section_rejects_unknown_keys_and_keys_are_camel_case() {
        let s = schema();
        assert_eq!(s["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(s["additionalProperties"], false);
        let defs = s["$defs"].as_object().unwrap();
        let mut objects = 0;
        for (name, def) in defs {
            if def.get("properties").is_some() {
                objects += 1;
                assert_eq!(def["additionalProperties"], false, "{name}");
                for key in def["properties"].as_object().unwrap().keys() {
                    assert!(
                        !key.contains('_') && !key.contains('-'),
                        "{name}.{key} is not camelCase"
                    );
                }
            }
        }
        assert!(objects > 20, "{objects} sections");
        assert_eq!(s["properties"]["drain"]["default"]["timeout"], "15m");
    }

    /// Every description, with where it is.
    fn descriptions(v: &Value, at: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    match x {
                        Value::String(s) if k == "description" => {
                            out.push((at.to_string(), s.clone()))
                        }
                        other => descriptions(other, &format!("{at}/{k}"), out),
                    }
                }
            }
            Value::Array(xs) => {
                for (i, x) in xs.iter().enumerate() {
                    descriptions(x, &format!("{at}/{i}"), out);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn descriptions_speak_to_the_user_not_to_rustdoc() {
        let mut all = Vec::new();
        descriptions(&schema(), "", &mut all);
        assert!(all.len() > 150, "{}", all.len());
        for (at, d) in all {
            assert!(
                !d.contains("[`") && !d.contains("Self"),
                "{at}: an intra-doc link or a Rust name in a user's description: {d}"
            );
        }
    }

    #[test]
    fn each_template_names_the_placeholders_of_its_event() {
        let s = schema();
        for event in crate::config::notifications::NotifyEvent::ALL {
            let d = s["$defs"]["Templates"]["properties"][event.as_str()]["description"]
                .as_str()
                .unwrap_or_else(|| panic!("no template {event:?}"));
            for p in event.placeholders() {
                assert!(d.contains(&format!("`{{{p}}}`")), "{event:?}: {p} in {d}");
            }
        }
    }

    #[test]
    fn sections_and_lists_admit_null_but_not_the_root_nor_windows() {
        let s = schema();
        assert_eq!(s["type"], "object");
        assert_eq!(
            s["$defs"]["Drain"]["type"],
            serde_json::json!(["object", "null"])
        );
        assert_eq!(
            s["properties"]["blackouts"]["type"],
            serde_json::json!(["array", "null"])
        );
        assert_eq!(s["properties"]["windows"]["type"], "array");
    }

    #[test]
    fn descriptions_are_unwrapped_paragraphs() {
        assert_eq!(unwrap("a\nb\n\nc\nd"), "a b\n\nc d");
    }
}
