//! Field validation worded as kube-apiserver's apimachinery words it: field errors (Required,
//! Invalid, Forbidden, Too long) and the checks every object's metadata goes through (name and
//! generateName by the kind's rule, namespace, labels, annotations), plus the string formats
//! other validators reuse (DNS-1123 subdomain and label, qualified name, label value).
//!
//! Owns the wording and the order of the errors (the order of the real validators, because a
//! 422 lists one cause per error in that order). It names no other module of the simulator,
//! which all build on it: the 422 answer a list of field errors becomes is `errors::check`'s.
//! It must never decide which rule a kind follows (see [`super::kinds::Kind::name_rule`]) nor
//! touch the store.

use serde_json::Value;

/// The kind of a field error, as `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    /// `FieldValueRequired`: "Required value"
    Required,
    /// `FieldValueInvalid`: "Invalid value"
    Invalid,
    /// `FieldValueForbidden`: "Forbidden"
    Forbidden,
    /// `FieldValueTooLong`: "Too long"
    TooLong,
    /// `FieldValueNotSupported`: "Unsupported value"
    NotSupported,
    /// `FieldValueDuplicate`: "Duplicate value"
    Duplicate,
}

impl ErrorType {
    /// The Status cause `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Duplicate => "FieldValueDuplicate",
        }
    }

    fn text(self) -> &'static str {
        match self {
            ErrorType::Required => "Required value",
            ErrorType::Invalid => "Invalid value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Duplicate => "Duplicate value",
        }
    }
}

/// The rejected value, printed as `field.Error` prints its `BadValue`.
#[derive(Clone, Debug, PartialEq)]
pub enum BadValue {
    /// Not printed (Required, Forbidden, Too long).
    Omitted,
    /// A Go string: printed quoted (`%q`).
    Str(String),
    /// A Go integer: printed plainly.
    Int(i64),
    /// Anything else: printed as Go's `json.Marshal` renders it (given already rendered).
    Json(String),
}

/// One field error.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    /// What is wrong.
    pub typ: ErrorType,
    /// The field path (`metadata.name`, `series.count`).
    pub field: String,
    /// The rejected value.
    pub value: BadValue,
    /// The explanation after the value.
    pub detail: String,
}

/// `field.Required`.
pub fn required(field: &str, detail: &str) -> FieldError {
    FieldError {
        typ: ErrorType::Required,
        field: field.into(),
        value: BadValue::Omitted,
        detail: detail.into(),
    }
}

/// `field.Invalid` with a string value.
pub fn invalid(field: &str, value: &str, detail: impl Into<String>) -> FieldError {
    invalid_value(field, BadValue::Str(value.into()), detail)
}

/// `field.Invalid` with any value.
pub fn invalid_value(field: &str, value: BadValue, detail: impl Into<String>) -> FieldError {
    FieldError {
        typ: ErrorType::Invalid,
        field: field.into(),
        value,
        detail: detail.into(),
    }
}

/// `field.Forbidden`.
pub fn forbidden(field: &str, detail: &str) -> FieldError {
    FieldError {
        typ: ErrorType::Forbidden,
        field: field.into(),
        value: BadValue::Omitted,
        detail: detail.into(),
    }
}

/// `field.NotSupported`: the value, then the supported values quoted.
pub fn not_supported(field: &str, value: BadValue, supported: &[&str]) -> FieldError {
    let quoted: Vec<String> = supported.iter().map(|v| go_quote(v)).collect();
    FieldError {
        typ: ErrorType::NotSupported,
        field: field.into(),
        value,
        detail: if quoted.is_empty() {
            String::new()
        } else {
            format!("supported values: {}", quoted.join(", "))
        },
    }
}

/// `field.TooLong` (the value is never printed).
pub fn too_long(field: &str, max_bytes: usize) -> FieldError {
    FieldError {
        typ: ErrorType::TooLong,
        field: field.into(),
        value: BadValue::Omitted,
        detail: format!(
            "may not be more than {max_bytes} {}",
            if max_bytes == 1 { "byte" } else { "bytes" }
        ),
    }
}

impl FieldError {
    /// The message without the field (`ErrorBody`), as in a Status cause.
    pub fn body(&self) -> String {
        let mut s = match (&self.value, self.typ) {
            (_, ErrorType::Required | ErrorType::Forbidden | ErrorType::TooLong)
            | (BadValue::Omitted, _) => self.typ.text().to_string(),
            (BadValue::Str(v), t) => format!("{}: {}", t.text(), go_quote(v)),
            (BadValue::Int(v), t) => format!("{}: {v}", t.text()),
            (BadValue::Json(v), t) => format!("{}: {v}", t.text()),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

/// Go's `%q` of a string: double quotes, with `"`, `\` and control characters escaped.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// How a kind's object names are validated (the `ValidateNameFunc` its strategy passes to
/// `ValidateObjectMeta`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain` (most kinds).
    DnsSubdomain,
    /// `NameIsDNSLabel` (Namespaces, StatefulSets, Services with RelaxedServiceNameValidation).
    DnsLabel,
    /// Only the generic path-segment check (kinds whose strategy does not validate metadata,
    /// RBAC objects, core/v1 Events).
    PathSegment,
}

impl NameRule {
    /// The messages for `name`; `prefix` for a generateName (a trailing dash is allowed).
    pub fn check(self, name: &str, prefix: bool) -> Vec<String> {
        match self {
            NameRule::DnsSubdomain => dns1123_subdomain(&mask_trailing_dash(name, prefix)),
            NameRule::DnsLabel => dns1123_label(&mask_trailing_dash(name, prefix)),
            NameRule::PathSegment if prefix => path_segment_prefix(name),
            NameRule::PathSegment => path_segment_name(name),
        }
    }
}

/// apimachinery's `maskTrailingDash`: a generateName may end with `-` because a random suffix
/// follows. It replaces the last two characters by `a`, as the real one does.
fn mask_trailing_dash(name: &str, prefix: bool) -> String {
    if prefix && name.len() > 1 && name.ends_with('-') {
        let cut = name.len() - 2;
        if name.is_char_boundary(cut) {
            return format!("{}a", &name[..cut]);
        }
    }
    name.to_string()
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_label(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|c| alnum(*c) || *c == b'-')
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

/// `IsDNS1123Subdomain`.
pub fn dns1123_subdomain(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !is_subdomain(v) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
            &["example.com"],
        ));
    }
    errs
}

/// `IsDNS1123Label`.
pub fn dns1123_label(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_label(v) {
        if is_subdomain(v) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsPathSegmentName`.
pub fn path_segment_name(v: &str) -> Vec<String> {
    if v == "." || v == ".." {
        return vec![format!("may not be '{v}'")];
    }
    path_segment_prefix(v)
}

/// `IsPathSegmentPrefix`.
pub fn path_segment_prefix(v: &str) -> Vec<String> {
    ["/", "%"]
        .iter()
        .filter(|c| v.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

fn is_label_key_name(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    !b.is_empty()
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter()
            .all(|c| alnum(*c) || matches!(*c, b'-' | b'_' | b'.'))
}

/// `IsQualifiedName` (a label key: optional DNS-subdomain prefix and `/`, then a name part).
pub fn qualified_name(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_label_key_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
pub fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !v.is_empty() && !is_label_key_name(v) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            &format!("({LABEL_KEY_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Total bytes of annotation keys and values a server accepts (`TotalAnnotationSizeLimitB`).
const ANNOTATIONS_LIMIT: usize = 256 * 1024;

/// `ValidateObjectMeta` on create, with the kind's name rule: generateName, name, namespace,
/// labels and annotations, in that order (owner references, finalizers and managedFields are
/// not checked).
pub fn object_meta(meta: &Value, namespaced: bool, rule: NameRule) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let s = |k: &str| meta[k].as_str().unwrap_or("");
    let generate = s("generateName");
    if !generate.is_empty() {
        for m in rule.check(generate, true) {
            errs.push(invalid("metadata.generateName", generate, m));
        }
    }
    let name = s("name");
    if name.is_empty() {
        errs.push(required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for m in rule.check(name, false) {
            errs.push(invalid("metadata.name", name, m));
        }
    }
    let ns = s("namespace");
    if namespaced {
        if ns.is_empty() {
            errs.push(required("metadata.namespace", ""));
        } else {
            for m in dns1123_label(ns) {
                errs.push(invalid("metadata.namespace", ns, m));
            }
        }
    } else if !ns.is_empty() {
        errs.push(forbidden("metadata.namespace", "not allowed on this type"));
    }
    errs.extend(labels_and_annotations(meta));
    errs
}

/// The label and annotation checks of `ValidateObjectMeta` (keys in sorted order; the real
/// server walks a Go map, so its order among several bad labels varies).
pub fn labels_and_annotations(meta: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(labels) = meta["labels"].as_object() {
        for (k, v) in labels {
            for m in qualified_name(k) {
                errs.push(invalid("metadata.labels", k, m));
            }
            let v = v.as_str().unwrap_or("");
            for m in label_value(v) {
                errs.push(invalid("metadata.labels", v, m));
            }
        }
    }
    if let Some(ann) = meta["annotations"].as_object() {
        let mut total = 0;
        for (k, v) in ann {
            for m in qualified_name(&k.to_lowercase()) {
                errs.push(invalid("metadata.annotations", k, m));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > ANNOTATIONS_LIMIT {
            errs.push(too_long("metadata.annotations", ANNOTATIONS_LIMIT));
        }
    }
    errs
}

/// The name a generateName gives: the prefix cut to 58 bytes, then 5 random characters
/// (`names.SimpleNameGenerator`).
pub fn generated_name(prefix: &str, suffix: &str) -> String {
    let mut cut = prefix.len().min(58);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}{suffix}", &prefix[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generate_name_may_end_with_a_dash_but_not_with_a_dot() {
        assert!(NameRule::DnsSubdomain.check("node-2-", true).is_empty());
        assert_eq!(NameRule::DnsSubdomain.check("node-2.", true).len(), 1);
        assert_eq!(NameRule::DnsSubdomain.check("node-2-", false).len(), 1);
        assert!(NameRule::PathSegment.check("node-2.", true).is_empty());
    }

    #[test]
    fn qualified_names_are_worded_as_the_real_validator() {
        assert!(qualified_name("rollboot.dev/controller").is_empty());
        assert_eq!(
            qualified_name(""),
            vec![
                "name part must be non-empty".to_string(),
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string(),
            ]
        );
        assert_eq!(qualified_name("a/b/c").len(), 1);
        assert_eq!(qualified_name("Bad_/x").len(), 1);
    }

    #[test]
    fn error_bodies_print_values_as_go_does() {
        assert_eq!(
            invalid("type", "", "has invalid value: ").body(),
            "Invalid value: \"\": has invalid value: "
        );
        assert_eq!(required("eventTime", "").body(), "Required value");
        assert_eq!(
            invalid_value("count", BadValue::Int(3), "field is immutable").body(),
            "Invalid value: 3: field is immutable"
        );
        assert_eq!(
            too_long("metadata.annotations", 262144).body(),
            "Too long: may not be more than 262144 bytes"
        );
    }

    #[test]
    fn generated_names_cut_long_prefixes() {
        let p = "a".repeat(70);
        assert_eq!(generated_name(&p, "xyz12").len(), 63);
    }
}
