//! rtslice-spec: the declarative description of a node and its workloads (`apiVersion: rtslice/v1`).
//! Pure: parsing and validation only, no I/O beyond the text it is handed.
//!
//! Entry point: [`parse`] turns YAML text into a validated [`Spec`] or reports every error found
//! (file, line, column, field path, reason). docs/spec.md is the reference for the format.

pub mod access;
pub mod annotations;
mod cache;
pub mod cpulist;
mod error;
mod types;
pub mod units;
mod decode;
mod emit;
pub mod tosca;
#[cfg(feature = "schema")]
pub mod schema;

pub use cache::*;
pub use cpulist::{format_cpu_list, format_cpu_mask, parse_cpu_list};
pub use emit::to_yaml;
pub use error::{SpecError, SpecErrors};
pub use tosca::{import_tosca, ToscaImport};
pub use types::*;
/// A PCI address (`0000:3b:02.1`), the type of a workload's `devices[].pci`.
pub use rtslice_sys::pci::PciAddress;

/// A spec (or TOSCA) file's bytes as text; a file that is not UTF-8 (a binary, another encoding)
/// is an error located at its first invalid byte, so the user is told what the file is.
pub fn utf8_text<'b>(bytes: &'b [u8], file: &str) -> Result<&'b str, SpecErrors> {
    rtslice_yaml::utf8(bytes, file)
}

/// Parses and validates a spec. `file` is only used in error messages. A spec that refers to a
/// file (`profile: vbs1.profile.json`) is refused here with a located error: use
/// [`parse_with_files`].
pub fn parse(text: &str, file: &str) -> Result<Spec, SpecErrors> {
    decode::parse(text, file, &NoFiles)
}

/// [`parse`], reading the files the spec refers to through `files` (the CLI resolves them relative
/// to the spec file's directory). Errors inside such a file are located in it.
pub fn parse_with_files(text: &str, file: &str, files: &dyn SpecFiles) -> Result<Spec, SpecErrors> {
    decode::parse(text, file, files)
}

/// Reads a profile file (`rtslice profile` writes them; JSON, which is YAML) with located errors.
pub fn parse_profile(text: &str, file: &str) -> Result<Profile, SpecErrors> {
    decode::parse_profile(text, file)
}
