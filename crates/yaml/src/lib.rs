//! rtslice-yaml: reads YAML keeping every value's line and column, and collects every error at once.
//!
//! Specs, TOSCA templates, bench experiment files and model-validation files are all read with it,
//! so every input file of rtslice reports its problems the same way: all of them in one pass, each
//! as `file:line:col: field.path: reason`, unknown fields with a did-you-mean.
//!
//! # The API
//! - [`load`] parses text into a located tree of [`Node`]s (a [`Val`] plus line and column). One
//!   document per file; an empty file, invalid YAML and a second document are errors. Anchors and
//!   aliases work (an alias is located where it is used, the values inside it where the anchor's
//!   value is written); YAML 1.1 merge
//!   keys (`<<`) do not exist in YAML 1.2 and [`Map::deny_unknown`] says so. [`utf8`] turns the bytes of a file into text, or a located "not UTF-8" error.
//! - A [`Reader`] walks the tree and collects [`Error`]s. Its typed accessors ([`Reader::string`],
//!   [`Reader::int`], [`Reader::float`], [`Reader::boolean`], [`Reader::one_of`], [`Reader::seq`])
//!   return `None` after recording an error, so a decoder goes on with the next field. Units
//!   (durations, sizes, CPU lists) are the caller's job: write them as functions (or an extension
//!   trait) over `&mut Reader`, using [`Reader::err`] to report.
//! - [`Reader::fields`] starts decoding a struct: it checks the node is a mapping, reports every key
//!   not in the allowed list (with a did-you-mean from [`suggest`]) and returns a [`Map`] view;
//!   [`Map::optional`] and [`Map::required`] decode one field each, handing the reader the value and
//!   its path (`parent.key`; see [`join`] and [`index`]). A null value (`key:` alone) is absent.
//! - [`Reader::finish`] or [`Reader::into_errors`] end the walk: errors come sorted by position.
//!
//! ```
//! use rtslice_yaml::{load, DocKind, Reader};
//!
//! struct Job { name: String, cpus: i64 }
//!
//! let text = "name: du1\ncpu: 3\n";
//! let root = load(text, "job.yaml", DocKind { noun: "job", empty_hint: "a job has a `name`" }).unwrap();
//! let mut r = Reader::new("job.yaml", "job");
//! let job = r.fields(&root, "", &["name", "cpus"]).and_then(|m| {
//!     let name = m.required(&mut r, "name", "give the job a name", |r, n, p| r.string(n, p));
//!     let cpus = m.optional(&mut r, "cpus", |r, n, p| r.int(n, p, 1, 64)).unwrap_or(1);
//!     Some(Job { name: name?, cpus })
//! });
//! let errors = r.finish(job).err().unwrap();
//! assert_eq!(errors.to_string(), "job.yaml:2:1: cpu: unknown field `cpu`; did you mean `cpus`?");
//! ```

mod error;
mod node;
mod reader;
mod suggest;
mod text;

pub use error::{Error, Errors};
pub use node::{load, DocKind, Node, Val};
pub use reader::{index, join, Map, Reader};
pub use suggest::suggest;
pub use text::utf8;
