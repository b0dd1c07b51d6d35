//! Spec errors are rtslice-yaml's located errors: each one points at a file, a line and column
//! (1-based), the field's path (`workloads[2].threads[0].priority`) and says why. Parsing collects
//! all of them before failing.

/// One located problem in a spec (or a TOSCA template, or what it could not map).
pub type SpecError = rtslice_yaml::Error;

/// All errors found in one spec, in file order. Display prints one per line.
pub type SpecErrors = rtslice_yaml::Errors;
