//! Spec errors: each one points at a file, a line and column (1-based), the field's path
//! (`workloads[2].threads[0].priority`) and says why. Parsing collects all of them before failing.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SpecError {
    pub file: String,
    /// 1-based; 0 when the error concerns the whole file.
    pub line: usize,
    /// 1-based.
    pub column: usize,
    /// Field path such as `workloads[1].demand.reservation.runtime`; empty for the document itself.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.reason)
    }
}

impl std::error::Error for SpecError {}

/// All errors found in one spec, in file order. Display prints one per line.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SpecErrors(pub Vec<SpecError>);

impl SpecErrors {
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn iter(&self) -> std::slice::Iter<'_, SpecError> {
        self.0.iter()
    }
}

impl fmt::Display for SpecErrors {
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

impl std::error::Error for SpecErrors {}

impl IntoIterator for SpecErrors {
    type Item = SpecError;
    type IntoIter = std::vec::IntoIter<SpecError>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
