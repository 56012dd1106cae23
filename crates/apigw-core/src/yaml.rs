//! YAML, read and written one way everywhere: with serde-saphyr (the parser kube-client uses)
//! and the settings in [`options`].
//!
//! Untyped reads ([`documents`], [`value`]) go through [`Node`] rather than straight into
//! `serde_json::Value`, so that an integer too large for 64 bits is an error naming the field
//! and the number as written, not a float that silently lost digits.

use serde::de::{DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};
use serde_saphyr::Spanned;

/// How apigw reads YAML:
/// - booleans are YAML 1.2's `true`/`false` only: `yes`, `on`, `y` stay strings (as in JSON);
/// - untyped `0755` and `1_000` stay strings, as JSON-minded readers (and the earlier parser)
///   read them;
/// - a tag apigw does not know (`!foo`) is an error, not silently dropped;
/// - a duplicate key is an error (serde-saphyr's default: YAML requires unique keys);
/// - untyped `.inf`/`.nan` is an error (JSON cannot hold them);
/// - errors are one line ending in `at line L, column C` (no source snippet).
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        reject_unsupported_tags: true,
        with_snippet: false,
    }
}

/// A YAML input that could not be read; the message carries the line and column.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{source}{}", quote_line(.line.as_deref()))]
    Parse {
        source: Box<serde_saphyr::Error>,
        /// The input line the error points at, for context (typed reads lose field names).
        line: Option<String>,
    },
    #[error("{path}: integer {text} does not fit in 64 bits at line {line}, column {column}")]
    IntegerRange {
        path: String,
        text: String,
        line: u64,
        column: u64,
    },
    #[error("not UTF-8: {0}")]
    Utf8(#[from] std::str::Utf8Error),
    #[error("{count} YAML documents where one is expected")]
    MultipleDocuments { count: usize },
}

fn quote_line(line: Option<&str>) -> String {
    line.map(|l| format!(": {l:?}")).unwrap_or_default()
}

impl Error {
    /// Line and column (1-based) the error points at, when known.
    pub fn location(&self) -> Option<(usize, usize)> {
        let (line, column) = match self {
            Error::Parse { source, .. } => {
                let l = source.location()?;
                (l.line(), l.column())
            }
            Error::IntegerRange { line, column, .. } => (*line, *column),
            Error::Utf8(_) | Error::MultipleDocuments { .. } => return None,
        };
        Some((usize::try_from(line).ok()?, usize::try_from(column).ok()?))
    }

    fn parse(source: serde_saphyr::Error, text: &str) -> Self {
        let line = source
            .location()
            .and_then(|l| usize::try_from(l.line()).ok())
            .and_then(|n| text.lines().nth(n.checked_sub(1)?))
            .map(|l| l.trim().chars().take(80).collect::<String>())
            .filter(|l| !l.is_empty());
        Error::Parse {
            source: Box::new(source),
            line,
        }
    }
}

/// One document into a typed value. An empty input (or only comments) is read as no document:
/// ask for `Option<T>` to accept it.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, Error> {
    serde_saphyr::from_str_with_options(text, options()).map_err(|e| Error::parse(e, text))
}

/// Every non-empty document of a stream (`---` separated), in order. Empty documents (`---`
/// alone, comments only, `~`, `null`) are skipped.
pub fn documents(text: &str) -> Result<Vec<Value>, Error> {
    let nodes: Vec<Spanned<Node>> = serde_saphyr::from_multiple_with_options(text, options())
        .map_err(|e| Error::parse(e, text))?;
    let mut out = Vec::with_capacity(nodes.len());
    for node in nodes {
        let mut path = String::new();
        let value = into_value(node, text, &mut path)?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// At most one document, untyped (`Null` when there is none).
pub fn value(text: &str) -> Result<Value, Error> {
    let mut docs = documents(text)?;
    match docs.len() {
        0 => Ok(Value::Null),
        1 => Ok(docs.remove(0)),
        count => Err(Error::MultipleDocuments { count }),
    }
}

/// [`value`] of UTF-8 bytes.
pub fn value_from_slice(bytes: &[u8]) -> Result<Value, Error> {
    value(std::str::from_utf8(bytes)?)
}

/// One document as YAML text. Long strings (base64 data) stay on one line, as kubectl writes
/// them; strings YAML 1.1 would read as something else (`yes`, `0755`) are quoted.
pub fn to_string<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string_with_options(
        value,
        serde_saphyr::ser_options! { prefer_block_scalars: false },
    )
}

/// An untyped YAML value whose children keep where they were written.
enum Node {
    Null,
    Bool(bool),
    Int(Number),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Node>>),
    Map(Vec<(String, Spanned<Node>)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_none<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Node, D::Error> {
        Node::deserialize(d)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Int(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Seq(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(entry) = map.next_entry()? {
            entries.push(entry);
        }
        Ok(Node::Map(entries))
    }
}

/// True for an integer as YAML writes one (decimal, `0x`, `0o`, `0b`, optionally signed).
fn is_integer_literal(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (digits, radix) = match digits.get(..2) {
        Some("0x") => (&digits[2..], 16),
        Some("0o") => (&digits[2..], 8),
        Some("0b") => (&digits[2..], 2),
        _ => (digits, 10),
    };
    !digits.is_empty() && digits.chars().all(|c| c.is_digit(radix))
}

/// The JSON value of `node`, refusing an integer literal that does not fit in 64 bits
/// (serde-saphyr hands those over as a rounded float). `path` names the value in errors.
fn into_value(node: Spanned<Node>, text: &str, path: &mut String) -> Result<Value, Error> {
    Ok(match node.value {
        Node::Null => Value::Null,
        Node::Bool(b) => Value::Bool(b),
        Node::Int(n) => Value::Number(n),
        Node::Float(f) => {
            let span = node.defined.span();
            let written = span
                .byte_offset()
                .zip(span.byte_len())
                .and_then(|(at, len)| {
                    let at = usize::try_from(at).ok()?;
                    text.get(at..at.checked_add(usize::try_from(len).ok()?)?)
                })
                .map(str::trim);
            if let Some(written) = written.filter(|w| is_integer_literal(w)) {
                return Err(Error::IntegerRange {
                    path: path.clone(),
                    text: written.to_string(),
                    line: node.defined.line(),
                    column: node.defined.column(),
                });
            }
            // Non-finite floats were refused by the parser (the default policy).
            Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        Node::Str(s) => Value::String(s),
        Node::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.into_iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                out.push(into_value(item, text, path)?);
                path.truncate(len);
            }
            Value::Array(out)
        }
        Node::Map(entries) => {
            let mut out = Map::new();
            for (key, item) in entries {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(&key);
                let value = into_value(item, text, path)?;
                path.truncate(len);
                out.insert(key, value);
            }
            Value::Object(out)
        }
    })
}

/// Whether `path` names a manifest file: `*.yaml`, `*.yml` or `*.json`, not hidden.
fn is_manifest(path: &std::path::Path) -> bool {
    let hidden = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_none_or(|n| n.starts_with('.'));
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    !hidden && matches!(ext, "yaml" | "yml" | "json")
}

/// The manifest files in `dir`: `*.yaml`, `*.yml`, `*.json`, not hidden, sorted. What the
/// registry, the doctor and the flow-control configuration read from a directory.
pub fn manifest_files(dir: &std::path::Path) -> std::io::Result<Vec<std::path::PathBuf>> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_manifest(p) && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn streams_skip_empty_documents() {
        let docs =
            documents("a: 1\n---\n---\n# nothing\n---\n~\n---\nnull\n---\nb: [x]\n").expect("docs");
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": ["x"]})]);
        assert!(documents("").expect("empty").is_empty());
        assert!(documents("# only a comment\n").expect("comment").is_empty());
    }

    #[test]
    fn scalars_read_as_json_would() {
        let v = value(
            "b: [true, false, yes, no, on, off, y]\nn: [0x1F, 0o17, 12, -3, 1.5, 1e3]\ns: [0755, -007, 1_000, '1', !!str 12]\nz: [~, null, ]\n",
        )
        .expect("value");
        assert_eq!(
            v,
            json!({
                "b": [true, false, "yes", "no", "on", "off", "y"],
                "n": [31, 15, 12, -3, 1.5, 1000.0],
                "s": ["0755", "-007", "1_000", "1", "12"],
                "z": [null, null],
            })
        );
        assert_eq!(value("").expect("empty"), Value::Null);
    }

    #[test]
    fn integers_past_64_bits_are_errors_naming_field_and_text() {
        let e = documents("spec:\n  items:\n  - port: 99999999999999999999\n").expect_err("range");
        assert_eq!(
            e.to_string(),
            "spec.items[0].port: integer 99999999999999999999 does not fit in 64 bits at line 3, column 11"
        );
        assert_eq!(e.location(), Some((3, 11)));
        let e = documents("a: -9223372036854775809\n").expect_err("range");
        assert!(
            e.to_string()
                .starts_with("a: integer -9223372036854775809 "),
            "{e}"
        );
        // The ends of the 64-bit ranges, and floats, are numbers.
        let v = value("a: 18446744073709551615\nb: -9223372036854775808\nc: 1.5e300\n")
            .expect("in range");
        assert_eq!(v["a"], json!(u64::MAX));
        assert_eq!(v["b"], json!(i64::MIN));
        assert_eq!(v["c"], json!(1.5e300));
        // Where it is found by bytes, after multi-byte characters.
        let e = documents("名前: é\nb: 99999999999999999999\n").expect_err("utf-8");
        assert!(
            e.to_string().starts_with("b: integer 99999999999999999999"),
            "{e}"
        );
        // Through an anchor: the number as defined.
        let e = documents("a: &x 99999999999999999999\nb: *x\n").expect_err("alias");
        assert!(
            e.to_string().starts_with("a: integer 99999999999999999999"),
            "{e}"
        );
    }

    #[test]
    fn refuses_duplicates_unknown_tags_and_non_finite_numbers() {
        for (text, want) in [
            ("a: 1\na: 2\n", "duplicate mapping key: a"),
            (
                "metadata: {name: x, name: y}\n",
                "duplicate mapping key: name",
            ),
            ("a: !foo bar\n", "unsupported tag `!foo`"),
            ("a: .inf\n", "non-finite float"),
            ("spec: {group: [\n", "unclosed bracket"),
        ] {
            let e = documents(text).expect_err(text);
            let msg = e.to_string();
            assert!(
                msg.contains(want) && msg.contains("at line "),
                "{text}: {msg}"
            );
        }
        assert!(matches!(
            value("a: 1\n---\nb: 2\n"),
            Err(Error::MultipleDocuments { count: 2 })
        ));
        assert!(matches!(
            value_from_slice(b"a: \xff\n"),
            Err(Error::Utf8(_))
        ));
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Typed {
        port: Option<u16>,
        flag: Option<bool>,
    }

    #[test]
    fn typed_errors_carry_location_and_the_line() {
        let e = from_str::<Typed>("port: 1\nbogus: 2\n").expect_err("unknown");
        let msg = e.to_string();
        assert!(
            msg.starts_with("unknown field `bogus`")
                && msg.ends_with("at line 2, column 1: \"bogus: 2\""),
            "{msg}"
        );
        let e = from_str::<Typed>("port: 70000\n").expect_err("range");
        assert_eq!(e.location(), Some((1, 7)));
        assert!(e.to_string().ends_with(": \"port: 70000\""), "{e}");
        assert!(from_str::<Typed>("flag: yes\n").is_err());
        assert_eq!(
            from_str::<Option<Typed>>("# nothing\n").expect("empty"),
            None
        );
    }

    #[test]
    fn writes_yaml_that_reads_back() {
        let long = "QUJD".repeat(100);
        let doc = json!({"data": long, "s": ["yes", "0755", "", "a: b", "x\ny"], "n": 1, "e": {}});
        let text = to_string(&doc).expect("yaml");
        assert!(text.contains(&format!("data: {long}\n")), "{text}");
        assert_eq!(value(&text).expect("read back"), doc);
    }
}
