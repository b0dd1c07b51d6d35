//! rtslice-bench (being built; see docs/ARCHITECTURE.md).
