//! rtslice-host (being built; see docs/ARCHITECTURE.md).
