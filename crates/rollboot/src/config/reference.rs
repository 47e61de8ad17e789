//! The configuration reference page (docs/reference/config.md), written from the config file's
//! JSON Schema ([`super::schema`]): one table per section, each key with its type, default and
//! description.
//!
//! Pure: a walk of the schema's JSON, from the root through every `$ref`, list item and map
//! value to the sections they lead to. A section shared by several keys (the four hook phases,
//! every `tokenFrom`) is written once, at its first key, and the others link to it. It must
//! never say anything of a key that its schema does not: the schema comes from the config
//! types, so the page and the parser cannot disagree.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

/// The Markdown page; `regenerate` names the command that writes it.
pub fn markdown(schema: &Value, regenerate: &str) -> String {
    let defs = schema["$defs"].as_object().cloned().unwrap_or_default();
    let mut page = Page {
        defs,
        first: BTreeMap::new(),
        shared: BTreeMap::new(),
        sections: Vec::new(),
    };
    page.collect(schema, "", 0);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Configuration reference\n\n\
         <!-- Generated from the config types (their JSON Schema) by {regenerate}; do not edit. -->\n\n\
         {}\n\n\
         Durations are written as {}\n\n\
         Sections and keys are in alphabetical order. A key whose default is *none* is unset \
         unless written; *required* keys must be \
         written when their section is. The JSON Schema of the file is \
         `config/rollboot.schema.json` (`rollboot config schema`); `rollboot check-config FILE` \
         also checks the values (cron expressions, time zones, selectors).\n",
        text(&schema["description"]),
        text(&page.defs.get("Duration").map_or(Value::Null, |d| d["description"].clone()))
            .trim_start_matches("A duration: "),
    );
    md.push_str("## Top-level keys\n\n");
    md.push_str(&page.table(schema, ""));
    for s in std::mem::take(&mut page.sections) {
        md.push_str(&page.section(&s));
    }
    md
}

/// A section to write: an object's keys, at `path`.
struct Section {
    path: String,
    depth: usize,
    /// The key's own description, then the object type's.
    descriptions: Vec<String>,
    object: Value,
    def: Option<String>,
}

struct Page {
    defs: serde_json::Map<String, Value>,
    /// Each shared definition's first path (its section).
    first: BTreeMap<String, String>,
    /// The other paths of each shared definition.
    shared: BTreeMap<String, Vec<String>>,
    sections: Vec<Section>,
}

/// Where a key's value leads, once `null` and `$ref`s are seen through.
enum Shape<'a> {
    /// An object with keys (a section), and its definition's name when it has one.
    Object(&'a Value, Option<String>),
    /// A list of `items`.
    List(&'a Value),
    /// A map from names to `values`.
    Map(&'a Value),
    /// Anything else: a scalar, an enumeration.
    Leaf(&'a Value),
}

impl Page {
    /// `schema` resolved: a `$ref` to its definition (with the name), `anyOf [X, null]` to X.
    fn resolve<'a>(&'a self, schema: &'a Value) -> (&'a Value, Option<String>) {
        if let Some(r) = schema["$ref"].as_str() {
            let name = r.rsplit('/').next().unwrap_or(r).to_string();
            if let Some(def) = self.defs.get(&name) {
                return (def, Some(name));
            }
        }
        if let Some(any) = schema["anyOf"].as_array() {
            let not_null: Vec<&Value> = any.iter().filter(|s| s["type"] != "null").collect();
            if let [one] = not_null[..] {
                return self.resolve(one);
            }
        }
        (schema, None)
    }

    fn shape<'a>(&'a self, schema: &'a Value) -> Shape<'a> {
        let (s, name) = self.resolve(schema);
        if s.get("properties").is_some() {
            Shape::Object(s, name)
        } else if has_type(s, "array") {
            Shape::List(&s["items"])
        } else if has_type(s, "object") && s["additionalProperties"].is_object() {
            Shape::Map(&s["additionalProperties"])
        } else {
            Shape::Leaf(s)
        }
    }

    /// Finds every section under `object` at `path`, depth first, in key order.
    fn collect(&mut self, object: &Value, path: &str, depth: usize) {
        let Some(props) = object["properties"].as_object() else {
            return;
        };
        for (key, prop) in props {
            let path = join(path, key);
            let mut at = prop;
            let mut sub = path.clone();
            loop {
                match self.shape(at) {
                    Shape::List(items) => {
                        at = items;
                        sub.push_str("[]");
                    }
                    Shape::Map(values) => {
                        at = values;
                        sub.push_str(".<name>");
                    }
                    Shape::Object(o, def) => {
                        let o = o.clone();
                        if let Some(d) = &def {
                            if self.first.contains_key(d) {
                                self.shared.entry(d.clone()).or_default().push(sub);
                                break;
                            }
                            self.first.insert(d.clone(), sub.clone());
                        }
                        let descriptions = vec![
                            text(&prop["description"]),
                            own_words(&text(&o["description"])),
                        ];
                        self.sections.push(Section {
                            path: sub.clone(),
                            depth,
                            descriptions,
                            object: o.clone(),
                            def,
                        });
                        self.collect(&o, &sub, depth + 1);
                        break;
                    }
                    Shape::Leaf(_) => break,
                }
            }
        }
    }

    fn section(&self, s: &Section) -> String {
        let hashes = "#".repeat((2 + s.depth).min(4));
        let mut md = format!("\n{hashes} `{}`\n\n", s.path);
        for (i, d) in s.descriptions.iter().enumerate() {
            // One that another says again, and more, is left to the other.
            let said_by_other = s.descriptions.iter().enumerate().any(|(j, other)| {
                j != i
                    && other.starts_with(d.trim_end_matches('.'))
                    && (other.len() > d.len() || j < i)
            });
            if !d.is_empty() && !said_by_other {
                let _ = writeln!(md, "{d}\n");
            }
        }
        if let Some(others) = s.def.as_ref().and_then(|d| self.shared.get(d)) {
            let list: Vec<String> = others.iter().map(|p| format!("`{p}`")).collect();
            let _ = writeln!(md, "The same keys: {}.\n", list.join(", "));
        }
        md.push_str(&self.table(&s.object, &s.path));
        md
    }

    /// The table of `object`'s keys, at `path`.
    fn table(&self, object: &Value, path: &str) -> String {
        let mut md =
            String::from("| Key | Type | Default | Description |\n| --- | --- | --- | --- |\n");
        let required: Vec<&str> = object["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let Some(props) = object["properties"].as_object() else {
            return md;
        };
        for (key, prop) in props {
            let full = join(path, key);
            let (kind, values) = self.kind(prop, &full);
            let default = if required.contains(&key.as_str()) {
                "*required*".to_string()
            } else {
                match prop.get("default") {
                    // An object's defaults are in its own section's rows.
                    Some(_) if matches!(self.shape(prop), Shape::Object(..)) => String::new(),
                    Some(d) => code(&scalar(d)),
                    None => "*none*".to_string(),
                }
            };
            let mut description = text(&prop["description"]);
            if !values.is_empty() {
                let _ = write!(description, " Values: {}.", values.join("; "));
            }
            let _ = writeln!(
                md,
                "| `{key}` | {kind} | {default} | {} |",
                cell(&description)
            );
        }
        md
    }

    /// A key's type as written in the table, and its enumeration's values with their
    /// descriptions.
    fn kind(&self, prop: &Value, path: &str) -> (String, Vec<String>) {
        match self.shape(prop) {
            Shape::Object(_, def) => {
                let target = def
                    .and_then(|d| self.first.get(&d).cloned())
                    .unwrap_or_else(|| path.to_string());
                (
                    format!("object ([below](#{}))", anchor(&target)),
                    Vec::new(),
                )
            }
            Shape::List(items) => {
                let (inner, values) = self.kind(items, &format!("{path}[]"));
                (format!("list of {}", plural(&inner)), values)
            }
            Shape::Map(values) => {
                let (inner, v) = self.kind(values, &format!("{path}.<name>"));
                (format!("map of names to {}", plural(&inner)), v)
            }
            Shape::Leaf(s) => leaf(s, self.resolve(prop).1.as_deref()),
        }
    }
}

/// A scalar's or an enumeration's type.
fn leaf(s: &Value, def: Option<&str>) -> (String, Vec<String>) {
    if def == Some("Duration") {
        return ("duration".into(), Vec::new());
    }
    if let Some(variants) = s["oneOf"]
        .as_array()
        .filter(|v| v.iter().all(|v| v.get("const").is_some()))
    {
        let names: Vec<String> = variants
            .iter()
            .map(|v| code(&scalar(&v["const"])))
            .collect();
        let described = variants
            .iter()
            .filter(|v| v.get("description").is_some())
            .map(|v| {
                format!(
                    "{}: {}",
                    code(&scalar(&v["const"])),
                    lower_first(&text(&v["description"])).trim_end_matches('.')
                )
            })
            .collect();
        return (names.join(" \\| "), described);
    }
    if let Some(values) = s["enum"].as_array() {
        let names: Vec<String> = values.iter().map(|v| code(&scalar(v))).collect();
        return (names.join(" \\| "), Vec::new());
    }
    let types: Vec<&str> = match &s["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect(),
        _ => Vec::new(),
    };
    let kind = match (types.as_slice(), s["format"].as_str()) {
        (["string"], Some("date-time")) => "RFC 3339 instant".to_string(),
        (["array"], _) => format!("list of {}", leaf(&s["items"], None).0),
        ([t], _) => t.to_string(),
        _ => "any".to_string(),
    };
    (kind, Vec::new())
}

/// `object (below)` as `objects (below)`, `string` as `strings`; an enumeration as it is.
fn plural(kind: &str) -> String {
    match kind.split_once(' ') {
        _ if kind.starts_with('`') => kind.to_string(),
        Some((word, rest)) => format!("{word}s {rest}"),
        None => format!("{kind}s"),
    }
}

/// A type's description without the key it opens with (`` `drain.volumes`: the wait... ``),
/// which the section's heading says; empty when that is all it says.
fn own_words(description: &str) -> String {
    let Some(rest) = description.strip_prefix('`') else {
        return description.to_string();
    };
    let Some((key, after)) = rest.split_once('`') else {
        return description.to_string();
    };
    if key.contains(' ') {
        return description.to_string();
    }
    match after.strip_prefix(':') {
        Some(words) => upper_first(words.trim_start()),
        None if after == "." => String::new(),
        None => description.to_string(),
    }
}

fn upper_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn has_type(s: &Value, t: &str) -> bool {
    match &s["type"] {
        Value::String(x) => x == t,
        Value::Array(xs) => xs.iter().any(|x| x == t),
        _ => false,
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A description as one Markdown paragraph per paragraph.
fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().trim().to_string()
}

fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

/// A value as written in YAML: strings bare, everything else as JSON.
fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if s.is_empty() => "\"\"".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `text` as inline code, long enough a fence for any backtick inside.
fn code(text: &str) -> String {
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// A table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    text.replace("\n\n", " ")
        .replace('\n', " ")
        .replace('|', "\\|")
}

/// A heading's anchor as GitHub and mdbook make it from `` `path` ``: lower case, punctuation
/// dropped.
pub fn anchor(path: &str) -> String {
    path.chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> String {
        markdown(&crate::config::schema::schema(), "`make`")
    }

    #[test]
    fn every_key_of_the_schema_has_a_row_and_every_section_its_heading() {
        let md = page();
        for key in ["windows", "drain", "concurrency", "fleetlock"] {
            assert!(md.contains(&format!("| `{key}` |")), "{key}");
        }
        for heading in [
            "## `drain`",
            "### `drain.whenBlocked`",
            "## `windows[]`",
            "### `fleetlock.groups.<name>`",
            "### `hooks.afterDone`",
        ] {
            assert!(md.contains(&format!("\n{heading}\n")), "{heading}\n{md}");
        }
        // A section shared by several keys is written once, at the first in key order.
        assert!(!md.contains("`hooks.afterDrain`\n"), "{md}");
        assert!(
            md.contains(
                "The same keys: `hooks.afterDrain`, `hooks.afterReboot`, `hooks.beforeDrain`."
            ),
            "{md}"
        );
        assert!(md.contains("| `beforeDrain` | object ([below](#hooksafterdone)) |"));
    }

    #[test]
    fn types_defaults_and_values_are_the_schemas() {
        let md = page();
        let row = |key: &str| {
            md.lines()
                .find(|l| l.starts_with(&format!("| `{key}` |")))
                .unwrap_or_else(|| panic!("no row {key}"))
                .to_string()
        };
        assert!(
            row("concurrentEvictions").contains("| integer | `10` |"),
            "{}",
            row("concurrentEvictions")
        );
        assert!(row("evictionRetryInterval").contains("| duration | `5s` |"));
        assert!(row("schedule").contains("| string | *required* |"));
        assert!(
            md.contains("| `order` | `oldest-flag` \\| `name` | `oldest-flag` |"),
            "{md}"
        );
        assert!(row("groupBy").contains("*none*"));
        assert!(
            row("drain").contains("object ([below](#drain))"),
            "{}",
            row("drain")
        );
    }

    #[test]
    fn a_type_description_that_opens_with_its_key_loses_the_key() {
        assert_eq!(own_words("`drain.volumes`: the wait."), "The wait.");
        assert_eq!(own_words("`x`."), "");
        assert_eq!(own_words("`0s` turns it off."), "`0s` turns it off.");
        assert_eq!(own_words("Plain."), "Plain.");
        assert_eq!(plural("object ([below](#x))"), "objects ([below](#x))");
        assert_eq!(plural("`a` \\| `b`"), "`a` \\| `b`");
    }

    #[test]
    fn anchors_are_what_github_makes_of_a_code_heading() {
        assert_eq!(anchor("drain.whenBlocked"), "drainwhenblocked");
        assert_eq!(anchor("fleetlock.groups.<name>"), "fleetlockgroupsname");
        assert_eq!(
            anchor("notifications.sinks[].urlFrom"),
            "notificationssinksurlfrom"
        );
    }
}
