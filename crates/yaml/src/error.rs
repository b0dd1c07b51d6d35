//! Located errors: each points at a file, a 1-based line and column, the field's path
//! (`workloads[2].threads[0].priority`) and says why. Readers collect all of them before failing.

use std::fmt;

/// One problem in one place of a file. Displays as `file:line:col: field.path: reason`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Error {
    pub file: String,
    /// 1-based; 0 when the error concerns the whole file.
    pub line: usize,
    /// 1-based.
    pub column: usize,
    /// Field path such as `workloads[1].demand.reservation.runtime`; empty for the document itself.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.reason)
    }
}

impl std::error::Error for Error {}

/// All errors found in one file, in file order. Display prints one per line.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Errors(pub Vec<Error>);

impl Errors {
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> std::slice::Iter<'_, Error> {
        self.0.iter()
    }
}

impl From<Vec<Error>> for Errors {
    fn from(v: Vec<Error>) -> Self {
        Errors(v)
    }
}

impl fmt::Display for Errors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Errors {}

impl IntoIterator for Errors {
    type Item = Error;
    type IntoIter = std::vec::IntoIter<Error>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<'a> IntoIterator for &'a Errors {
    type Item = &'a Error;
    type IntoIter = std::slice::Iter<'a, Error>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
