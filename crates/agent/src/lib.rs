//! rtslice-agent (being built; see docs/ARCHITECTURE.md).
