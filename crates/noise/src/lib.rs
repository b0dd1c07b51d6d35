//! rtslice-noise (being built; see docs/ARCHITECTURE.md).
