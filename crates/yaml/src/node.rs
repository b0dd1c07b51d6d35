//! The located tree and the loader. saphyr gives a tree where each node knows its line and column;
//! we copy it into our own owned tree so that readers do not depend on saphyr's representation.

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};

use crate::error::{Error, Errors};

/// A YAML value and where it starts (1-based line and column).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub line: usize,
    pub col: usize,
    pub val: Val,
}

/// A YAML value. Tags are dropped (the tagged value is kept).
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    /// Keys are kept as nodes, in file order, so errors about a key point at the key.
    Map(Vec<(Node, Node)>),
}

impl Node {
    /// What the value is, for messages: "expected a string, found a list".
    pub fn kind(&self) -> &'static str {
        match self.val {
            Val::Null => "nothing (null)",
            Val::Bool(_) => "a boolean",
            Val::Int(_) => "an integer",
            Val::Float(_) => "a number",
            Val::Str(_) => "a string",
            Val::Seq(_) => "a list",
            Val::Map(_) => "a mapping",
        }
    }

    /// A scalar as the user wrote it (for unit parsing and messages); `None` for null, lists, mappings.
    pub fn scalar_text(&self) -> Option<String> {
        match &self.val {
            Val::Bool(b) => Some(b.to_string()),
            Val::Int(i) => Some(i.to_string()),
            Val::Float(f) => Some(f.to_string()),
            Val::Str(s) => Some(s.clone()),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.val, Val::Null)
    }

    /// The string, when the value is one (numbers are not converted: see [`Node::scalar_text`]).
    pub fn as_str(&self) -> Option<&str> {
        match &self.val {
            Val::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.val {
            Val::Seq(items) => Some(items),
            _ => None,
        }
    }

    /// The key/value pairs, in file order, when the value is a mapping.
    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.val {
            Val::Map(pairs) => Some(pairs),
            _ => None,
        }
    }

    /// The value of the first string key `key`, when the value is a mapping (null values included).
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.as_map()?.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
    }
}

/// What kind of document a file holds, for the messages about the whole file.
#[derive(Debug, Clone, Copy)]
pub struct DocKind<'a> {
    /// One of them, as in "put one spec per file".
    pub noun: &'a str,
    /// Said after "the file is empty; ", e.g. "a spec starts with `apiVersion: rtslice/v1`".
    pub empty_hint: &'a str,
}

/// Loads the first YAML document of `text` into a located tree. An empty file, a second document,
/// invalid YAML and unresolvable values are errors; `file` names the file in them. Aliases are
/// resolved: an alias is located where it is used, the values inside it where they are written.
pub fn load(text: &str, file: &str, doc: DocKind<'_>) -> Result<Node, Errors> {
    let docs = MarkedYaml::load_from_str(text).map_err(|e| {
        Errors(vec![Error {
            file: file.into(),
            line: e.marker().line(),
            column: e.marker().col() + 1,
            path: String::new(),
            reason: format!("not valid YAML: {}", e.info()),
        }])
    })?;
    let mut errors = Vec::new();
    if docs.len() > 1 {
        let second = &docs[1];
        errors.push(Error {
            file: file.into(),
            line: second.span.start.line(),
            column: second.span.start.col() + 1,
            path: String::new(),
            reason: format!("more than one YAML document; put one {} per file", doc.noun),
        });
    }
    let Some(first) = docs.into_iter().next() else {
        return Err(Errors(vec![Error {
            file: file.into(),
            line: 1,
            column: 1,
            path: String::new(),
            reason: format!("the file is empty; {}", doc.empty_hint),
        }]));
    };
    let node = convert(&first, file, &mut errors);
    if errors.is_empty() {
        Ok(node)
    } else {
        Err(Errors(errors))
    }
}

fn convert(y: &MarkedYaml<'_>, file: &str, errors: &mut Vec<Error>) -> Node {
    let line = y.span.start.line();
    let col = y.span.start.col() + 1;
    let val = match &y.data {
        YamlData::Value(Scalar::Null) => Val::Null,
        YamlData::Value(Scalar::Boolean(b)) => Val::Bool(*b),
        YamlData::Value(Scalar::Integer(i)) => Val::Int(*i),
        YamlData::Value(Scalar::FloatingPoint(f)) => Val::Float(f.into_inner()),
        YamlData::Value(Scalar::String(s)) => Val::Str(s.to_string()),
        YamlData::Representation(s, _, _) => Val::Str(s.to_string()),
        YamlData::Sequence(items) => Val::Seq(items.iter().map(|i| convert(i, file, errors)).collect()),
        YamlData::Mapping(map) => {
            Val::Map(map.iter().map(|(k, v)| (convert(k, file, errors), convert(v, file, errors))).collect())
        }
        // saphyr leaves the inner node of a tagged value without a position: point at the tag.
        YamlData::Tagged(_, inner) => convert(inner, file, errors).val,
        // saphyr resolves aliases while loading (the anchored value is copied, and its billion-laughs
        // budget bounds the copies); these remain only for
        // values it could not resolve.
        YamlData::Alias(_) | YamlData::BadValue => {
            errors.push(Error {
                file: file.into(),
                line,
                column: col,
                path: String::new(),
                reason: "unsupported or invalid YAML value (an unresolved alias or a bad tag)".into(),
            });
            Val::Null
        }
    };
    Node { line, col, val }
}
