//! The error collector and the mapping view used to decode a document field by field.

use crate::error::{Error, Errors};
use crate::node::{Node, Val};
use crate::suggest::suggest;

/// `path.key` (or `key` at the top).
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// `path[i]`.
pub fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Walks a located tree and collects every error on the way, so that one pass reports them all.
/// Accessors return `None` after recording an error: callers go on with the next field.
pub struct Reader<'f> {
    file: &'f str,
    /// The document, as "the spec" in "the spec must be a mapping".
    noun: &'f str,
    errors: Vec<Error>,
}

impl<'f> Reader<'f> {
    /// `file` names the file in errors; `noun` names the document ("spec", "experiment file").
    pub fn new(file: &'f str, noun: &'f str) -> Self {
        Reader { file, noun, errors: Vec::new() }
    }

    pub fn file(&self) -> &'f str {
        self.file
    }

    /// Records an error at `at`.
    pub fn err(&mut self, at: &Node, path: &str, reason: impl Into<String>) {
        self.errors.push(Error { file: self.file.into(), line: at.line, column: at.col, path: path.into(), reason: reason.into() });
    }

    /// How many errors so far: compare before and after a part to know whether that part was clean.
    pub fn error_count(&self) -> usize {
        self.errors.len()
    }

    pub fn errors(&self) -> &[Error] {
        &self.errors
    }

    /// Takes over the errors another reader found in a file this document refers to (a spec's
    /// profile file): they keep their own file and position.
    pub fn absorb(&mut self, other: Errors) {
        self.errors.extend(other.0);
    }

    /// The errors in file order (stable: errors at one place keep the order they were found in).
    pub fn into_errors(mut self) -> Errors {
        self.errors.sort_by_key(|e| (e.line, e.column));
        Errors(self.errors)
    }

    /// `Ok(value)` when no error was recorded, else every error in file order.
    pub fn finish<T>(self, value: Option<T>) -> Result<T, Errors> {
        match value {
            Some(v) if self.errors.is_empty() => Ok(v),
            _ if !self.errors.is_empty() => Err(self.into_errors()),
            _ => {
                // A decoder that gave up without saying why; still never a panic.
                let file = self.file.to_string();
                Err(Errors(vec![Error { file, line: 1, column: 1, path: String::new(), reason: format!("the {} could not be read", self.noun) }]))
            }
        }
    }

    /// A view of the mapping at `node`, with any string keys. Non-string keys are reported and skipped.
    pub fn map<'n>(&mut self, node: &'n Node, path: &str) -> Option<Map<'n>> {
        let Val::Map(pairs) = &node.val else {
            let what = if path.is_empty() { format!("the {}", self.noun) } else { "this field".into() };
            self.err(node, path, format!("{what} must be a mapping (key: value), found {}", node.kind()));
            return None;
        };
        let mut entries = Vec::new();
        for (k, v) in pairs {
            let Val::Str(key) = &k.val else {
                self.err(k, path, format!("keys must be names, found {}", k.kind()));
                continue;
            };
            entries.push((key.as_str(), k, v));
        }
        Some(Map { node, path: path.to_string(), entries })
    }

    /// [`Reader::map`] then [`Map::deny_unknown`]: the usual way to start decoding a struct.
    pub fn fields<'n>(&mut self, node: &'n Node, path: &str, allowed: &[&str]) -> Option<Map<'n>> {
        Some(self.map(node, path)?.deny_unknown(self, allowed))
    }

    /// The items of the list at `node`; `what` completes "must be a list of …".
    pub fn seq<'n>(&mut self, node: &'n Node, path: &str, what: &str) -> Option<&'n [Node]> {
        match &node.val {
            Val::Seq(items) => Some(items),
            _ => {
                self.err(node, path, format!("must be a list of {what}, found {}", node.kind()));
                None
            }
        }
    }

    /// A string; numbers and booleans are taken as written (env values like `OMP_NUM_THREADS: 4`
    /// are numbers in YAML but strings to the program).
    pub fn string(&mut self, node: &Node, path: &str) -> Option<String> {
        match &node.val {
            Val::Str(s) => Some(s.clone()),
            Val::Int(_) | Val::Float(_) | Val::Bool(_) => node.scalar_text(),
            _ => {
                self.err(node, path, format!("expected a string, found {}", node.kind()));
                None
            }
        }
    }

    /// An integer in `min..=max`.
    pub fn int(&mut self, node: &Node, path: &str, min: i64, max: i64) -> Option<i64> {
        match &node.val {
            Val::Int(i) if (min..=max).contains(i) => Some(*i),
            Val::Int(i) => {
                self.err(node, path, format!("{i} is out of range; allowed {min}..={max}"));
                None
            }
            _ => {
                self.err(node, path, format!("expected an integer in {min}..={max}, found {}", node.kind()));
                None
            }
        }
    }

    /// A finite number (an integer is a number).
    pub fn float(&mut self, node: &Node, path: &str) -> Option<f64> {
        match &node.val {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) if f.is_finite() => Some(*f),
            _ => {
                self.err(node, path, format!("expected a number, found {}", node.kind()));
                None
            }
        }
    }

    pub fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match node.val {
            Val::Bool(b) => Some(b),
            _ => {
                self.err(node, path, format!("expected true or false, found {}", node.kind()));
                None
            }
        }
    }

    /// One of `names`, with a did-you-mean when the value is close to one.
    pub fn one_of(&mut self, node: &Node, path: &str, names: &[&str]) -> Option<String> {
        let s = self.string(node, path)?;
        if names.contains(&s.as_str()) {
            return Some(s);
        }
        let hint = suggest(&s, names).map(|n| format!("did you mean `{n}`?")).unwrap_or_else(|| format!("use {}", names.join(", ")));
        self.err(node, path, format!("unknown value `{s}`; {hint}"));
        None
    }
}

/// A mapping being decoded: its entries with string keys, in file order, and its path.
/// A key whose value is null (`key:` with nothing after it) counts as absent.
pub struct Map<'n> {
    node: &'n Node,
    path: String,
    entries: Vec<(&'n str, &'n Node, &'n Node)>,
}

impl<'n> Map<'n> {
    /// Reports every key not in `allowed` (with a did-you-mean, or the allowed list) and drops it.
    pub fn deny_unknown(mut self, r: &mut Reader<'_>, allowed: &[&str]) -> Self {
        let path = &self.path;
        self.entries.retain(|(key, k, _)| {
            if allowed.contains(key) {
                return true;
            }
            let hint = if *key == "<<" {
                // YAML 1.1's merge key: saphyr reads YAML 1.2, where `<<` is an ordinary key.
                "merge keys (`<<: *anchor`) are not part of YAML 1.2; write the fields out (an alias `*anchor` can stand for a whole value)".to_string()
            } else {
                suggest(key, allowed)
                    .map(|s| format!("did you mean `{s}`?"))
                    .unwrap_or_else(|| format!("allowed here: {}", allowed.join(", ")))
            };
            r.err(k, &join(path, key), format!("unknown field `{key}`; {hint}"));
            false
        });
        self
    }

    /// The mapping node itself (where "missing" errors point).
    pub fn node(&self) -> &'n Node {
        self.node
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The path of field `key` of this mapping.
    pub fn path_of(&self, key: &str) -> String {
        join(&self.path, key)
    }

    pub fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries.iter().find(|(k, _, v)| *k == key && !v.is_null()).map(|(_, _, v)| *v)
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The key node of `key` (to point an error at the key rather than the value).
    pub fn key_node(&self, key: &str) -> Option<&'n Node> {
        self.entries.iter().find(|(k, _, _)| *k == key).map(|(_, k, _)| *k)
    }

    /// Every entry (key, key node, value node) in file order, null values included.
    pub fn entries(&self) -> impl Iterator<Item = (&'n str, &'n Node, &'n Node)> + '_ {
        self.entries.iter().copied()
    }

    /// Field `key` decoded by `read` (given the value and its path); `None` when absent or invalid.
    pub fn optional<'f, T>(
        &self,
        r: &mut Reader<'f>,
        key: &str,
        read: impl FnOnce(&mut Reader<'f>, &'n Node, &str) -> Option<T>,
    ) -> Option<T> {
        let v = self.get(key)?;
        read(r, v, &self.path_of(key))
    }

    /// Like [`Map::optional`], but an absent field is an error "missing; {missing}" at the mapping.
    pub fn required<'f, T>(
        &self,
        r: &mut Reader<'f>,
        key: &str,
        missing: &str,
        read: impl FnOnce(&mut Reader<'f>, &'n Node, &str) -> Option<T>,
    ) -> Option<T> {
        match self.get(key) {
            Some(v) => read(r, v, &self.path_of(key)),
            None => {
                r.err(self.node, &self.path_of(key), format!("missing; {missing}"));
                None
            }
        }
    }
}
