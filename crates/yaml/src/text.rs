//! Bytes to text: a file that is not UTF-8 is reported as such, at the first invalid byte.

use crate::error::{Error, Errors};

/// The bytes as text, or an error locating the first byte that is not UTF-8 (its offset, line and
/// column) so a binary or mis-encoded file is named for what it is.
pub fn utf8<'b>(bytes: &'b [u8], file: &str) -> Result<&'b str, Errors> {
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(e) => {
            let offset = e.valid_up_to();
            let before = &bytes[..offset];
            let line = 1 + before.iter().filter(|&&b| b == b'\n').count();
            let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            // The prefix is valid UTF-8 by construction; the column counts characters, as YAML does.
            let column = 1 + std::str::from_utf8(&before[line_start..]).map_or(0, |s| s.chars().count());
            Err(Errors(vec![Error {
                file: file.into(),
                line,
                column,
                path: String::new(),
                reason: format!(
                    "not UTF-8 text: byte {offset} (0x{:02x}) is not valid UTF-8; is this a binary file? save it as UTF-8 YAML",
                    bytes[offset]
                ),
            }]))
        }
    }
}
