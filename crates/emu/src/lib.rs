//! rtslice-emu (being built; see docs/ARCHITECTURE.md).
