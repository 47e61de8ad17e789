//! Reading a config file: bytes in, a [`Config`] or every [`Problem`] out.
//!
//! Structural problems (YAML syntax, an unknown key, a wrong type, a duplicate key) come from
//! the YAML deserializer, which stops at the first. Every other rule is checked afterwards on
//! the typed model ([`super::validate`], a validator per section), and all its problems are
//! reported together; each is located in the file by re-walking the document to the problem's
//! key path (see [`locate`]). It must never judge a value itself: that is the validators'.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Serialize;

use super::Config;

/// Largest config file accepted: a config is a few KiB; anything bigger is a mistake.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// One thing wrong in a config file, located where YAML allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// Key path such as `windows[1].timezone`; empty for the whole document.
    pub path: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (Some(l), Some(c)) = (self.line, self.column) {
            write!(f, "{l}:{c}: ")?;
        }
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all (missing, no permission...).
    #[error("{}: cannot read the config file: {cause}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The OS error.
        cause: std::io::Error,
    },
    /// A directory was given where a file was expected.
    #[error("{}: is a directory; give the path of a YAML config file", file.display())]
    IsDirectory {
        /// The path.
        file: PathBuf,
    },
    /// The file's content is not a valid config.
    #[error("{}", invalid(file.display(), problems))]
    Invalid {
        /// The file.
        file: PathBuf,
        /// Every problem found.
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// The problems, when the content was at fault (as opposed to reading it).
    pub fn problems(&self) -> &[Problem] {
        match self {
            ConfigError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

/// What is said of an invalid config: where it was read (a file's name, a ConfigMap and its
/// key), then each problem on a line of its own.
pub(crate) fn invalid(source: impl fmt::Display, problems: &[Problem]) -> String {
    let list = problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n");
    format!("{source}: invalid config:\n{list}")
}

/// Reads, parses and validates a config file.
pub fn load_file(file: &Path) -> Result<Config, ConfigError> {
    let read = |cause| ConfigError::Read {
        file: file.to_path_buf(),
        cause,
    };
    let meta = std::fs::metadata(file).map_err(read)?;
    if meta.is_dir() {
        return Err(ConfigError::IsDirectory {
            file: file.to_path_buf(),
        });
    }
    let whole = |message: String| ConfigError::Invalid {
        file: file.to_path_buf(),
        problems: vec![Problem {
            path: String::new(),
            line: None,
            column: None,
            message,
        }],
    };
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(whole(format!(
            "the file is {} bytes; a config file may be at most {} bytes (1 MiB)",
            meta.len(),
            MAX_CONFIG_BYTES
        )));
    }
    let bytes = std::fs::read(file).map_err(read)?;
    if bytes.contains(&0) {
        return Err(whole(
            "the file contains NUL bytes: it is binary, not a YAML text file".into(),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        whole(format!(
            "the file is not UTF-8 text (invalid byte at offset {}): it is not a YAML config",
            e.utf8_error().valid_up_to()
        ))
    })?;
    parse_str(&text).map_err(|problems| ConfigError::Invalid {
        file: file.to_path_buf(),
        problems,
    })
}

/// Parses and validates config text. On failure, every problem found.
pub fn parse_str(text: &str) -> Result<Config, Vec<Problem>> {
    if text.trim().is_empty()
        || text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Err(vec![Problem {
            path: String::new(),
            line: None,
            column: None,
            message:
                "the file is empty; write `{}` for all defaults, or start from config/rollboot.yaml"
                    .into(),
        }]);
    }
    let mut config: Config = yaml_serde::from_str(text).map_err(|e| vec![structural(text, e)])?;
    let mut problems = Vec::new();
    super::validate::validate(&mut config, &mut |path: String, message: String| {
        let (line, column) = locate(text, &path).unzip();
        problems.push(Problem {
            path,
            line,
            column,
            message,
        });
    });
    // Reported in file order, the way a person fixes them; unlocated ones last.
    problems.sort_by_key(|p| (p.line.is_none(), p.line, p.column));
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

/// Turns a deserializer error into a Problem, splitting off the key path and the location
/// that the YAML library folds into its message.
fn structural(text: &str, e: yaml_serde::Error) -> Problem {
    let loc = e.location();
    let mut message = e.to_string();
    if let Some(l) = &loc {
        for suffix in [
            format!(" at line {} column {}", l.line(), l.column()),
            format!(" at position {}", l.index()),
        ] {
            if let Some(m) = message.strip_suffix(&suffix) {
                message = m.to_string();
            }
        }
    }
    let mut path = String::new();
    if let Some((head, rest)) = message.split_once(": ") {
        // Serde's own messages ("invalid type: ...") contain spaces before the colon; a key path never does.
        if !head.contains(' ') {
            path = head.to_string();
            message = rest.to_string();
        }
    }
    if let Some(field) = ["unknown field `", "duplicate field `"]
        .iter()
        .find_map(|prefix| message.strip_prefix(prefix))
        .and_then(|m| m.split('`').next())
    {
        // Point the path at the offending key itself, not at the mapping that holds it.
        path = if path.is_empty() {
            field.to_string()
        } else {
            format!("{path}.{field}")
        };
    }
    if message.starts_with("unknown field") {
        message.push_str(" (keys are camelCase and checked strictly: see config/rollboot.yaml)");
    }
    let mut at = loc.as_ref().map(|l| (l.line(), l.column()));
    if let (Some(key), Some((line, _))) = (
        message
            .strip_prefix("duplicate field `")
            .and_then(|m| m.split('`').next()),
        at,
    ) {
        // The YAML library points at the mapping (or the key's first occurrence); the person
        // fixing the file wants the repeated key.
        if let Some(second) = repeated_key(text, line, key) {
            at = Some(second);
        }
    }
    Problem {
        path,
        line: at.map(|(l, _)| l),
        column: at.map(|(_, c)| c),
        message,
    }
}

/// Line and column (1-based) of the second `key:` at one indentation, searching from `line`.
fn repeated_key(text: &str, line: usize, key: &str) -> Option<(usize, usize)> {
    let mut first_indent = None;
    for (i, l) in text.lines().enumerate().skip(line.saturating_sub(1)) {
        let trimmed = l.trim_start();
        let mut indent = l.len() - trimmed.len();
        // A key on a list item's line (`- key: ...`) sits after the dash.
        let trimmed = match trimmed.strip_prefix("- ") {
            Some(rest) => {
                indent += 2 + rest.len() - rest.trim_start().len();
                rest.trim_start()
            }
            None => trimmed,
        };
        let is_key = trimmed
            .strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with(':'));
        if !is_key {
            continue;
        }
        match first_indent {
            None => first_indent = Some(indent),
            Some(f) if f == indent => return Some((i + 1, indent + 1)),
            Some(_) => {}
        }
    }
    None
}

/// The line and column (1-based) of the node at a key path like `windows[1].timezone`.
///
/// The YAML library does not expose node positions, but it does attach the position of the
/// node being read to any error raised while reading it; so the document is walked again and
/// a marker error is raised exactly at the path. A config file is a few KiB, and this runs
/// only for files that are already invalid.
pub(crate) fn locate(text: &str, path: &str) -> Option<(usize, usize)> {
    let segments = parse_path(path)?;
    let err = Probe {
        target: &segments,
        depth: 0,
    }
    .deserialize(yaml_serde::Deserializer::from_str(text))
    .err()?;
    if !err.to_string().contains(PROBE_HIT) {
        return None;
    }
    err.location().map(|l| (l.line(), l.column()))
}

const PROBE_HIT: &str = "\u{1}probe-hit";

/// Fails on whatever node it is asked to read.
struct Hit;

impl<'de> Visitor<'de> for Hit {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(PROBE_HIT))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(de::Error::custom(PROBE_HIT))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(PROBE_HIT))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(PROBE_HIT))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(PROBE_HIT))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(PROBE_HIT))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(PROBE_HIT))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(PROBE_HIT))
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Err(E::custom(PROBE_HIT))
    }
}

#[derive(Debug, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

fn parse_path(path: &str) -> Option<Vec<Segment>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Segment::Key(key.to_string()));
        }
        while let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            out.push(Segment::Index(r[..end].parse().ok()?));
            rest = &r[end + 1..];
        }
    }
    Some(out)
}

struct Probe<'a> {
    target: &'a [Segment],
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.depth == self.target.len() {
            // Raised from inside the node's own visit, so the error carries that node's position.
            return d.deserialize_any(Hit);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<yaml_serde::Value>()? {
            let hit =
                matches!(&self.target[self.depth], Segment::Key(k) if key.as_str() == Some(k));
            if hit {
                map.next_value_seed(Probe {
                    target: self.target,
                    depth: self.depth + 1,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let hit = matches!(self.target[self.depth], Segment::Index(n) if n == i);
            let more = if hit {
                seq.next_element_seed(Probe {
                    target: self.target,
                    depth: self.depth + 1,
                })?
                .is_some()
            } else {
                seq.next_element::<IgnoredAny>()?.is_some()
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locate_finds_nested_keys_and_list_items() {
        let text = "windows:\n  - schedule: \"0 2 * * *\"\n    duration: 1h\n  - schedule: x\n    timezone: Mars/Base\n";
        assert_eq!(locate(text, "windows[1].timezone"), Some((5, 15)));
        assert_eq!(locate(text, "windows[0].duration"), Some((3, 15)));
        assert_eq!(locate(text, "windows[1].schedule"), Some((4, 15)));
        assert_eq!(locate(text, "windows[1]"), Some((4, 5)));
        assert_eq!(locate(text, "windows[7]"), None);
        assert_eq!(locate(text, "nothere"), None);
    }
}
