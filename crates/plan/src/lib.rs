//! rtslice-plan (being built; see docs/ARCHITECTURE.md).
