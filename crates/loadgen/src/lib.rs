//! rtslice-loadgen (being built; see docs/ARCHITECTURE.md).
