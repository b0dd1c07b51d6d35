//! rtslice-spec: the declarative description of a node and its workloads (`apiVersion: rtslice/v1`).
//! Pure: parsing and validation only, no I/O beyond the text it is handed.

pub mod units;
