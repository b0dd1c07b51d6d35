//! rtslice-trace (being built; see docs/ARCHITECTURE.md).
