//! Did-you-mean for unknown names.

/// The closest of `allowed` to `key`, if close enough to be a typo: a name `key` abbreviates
/// (three letters or more), else the nearest by edit distance within max(2, a third of its length).
/// Case is ignored.
pub fn suggest<'a>(key: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let lower = key.to_lowercase();
    // An abbreviation (`prio`) is a clearer hint than the nearest word by edit distance (`period`).
    if key.len() >= 3 {
        if let Some(a) = allowed.iter().find(|a| a.to_lowercase().starts_with(&lower)) {
            return Some(a);
        }
    }
    allowed
        .iter()
        .map(|a| (strsim::levenshtein(&lower, &a.to_lowercase()), *a))
        .filter(|(d, a)| *d <= 2.max(a.len() / 3))
        .min()
        .map(|(_, a)| a)
}
