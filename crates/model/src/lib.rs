//! rtslice-model (being built; see docs/ARCHITECTURE.md).
