//! Matrix expansion: blocks × variants × scenarios × strategies → cells, and cells × repetitions →
//! an interleaved run order (A B C A B C …) so slow drift of the machine (thermal, other tenants,
//! page cache) hits every strategy alike instead of biasing whichever ran last.

use serde::{Deserialize, Serialize};

use crate::experiment::Experiment;
use crate::strategy::Strategy;

/// One combination the report compares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cell {
    /// Stable id, e.g. `lat/idle/irq+wide` or `density/n=2/idle/none`.
    pub id: String,
    pub block: usize,
    pub block_name: String,
    pub variant: usize,
    pub variant_name: String,
    pub scenario: usize,
    pub scenario_name: String,
    pub strategy: Strategy,
}

/// One execution of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSlot {
    /// Position in the run order (0-based).
    pub seq: usize,
    pub cell: usize,
    pub repetition: u32,
}

pub fn cells(exp: &Experiment) -> Vec<Cell> {
    let mut out = Vec::new();
    for (bi, b) in exp.blocks.iter().enumerate() {
        for (vi, v) in b.variants.iter().enumerate() {
            for (si, s) in b.scenarios.iter().enumerate() {
                for st in &b.strategies {
                    let mut id = b.name.clone();
                    if !v.name.is_empty() {
                        id.push('/');
                        id.push_str(&v.name);
                    }
                    id.push('/');
                    id.push_str(&s.name);
                    id.push('/');
                    id.push_str(st.name());
                    out.push(Cell {
                        id,
                        block: bi,
                        block_name: b.name.clone(),
                        variant: vi,
                        variant_name: v.name.clone(),
                        scenario: si,
                        scenario_name: s.name.clone(),
                        strategy: *st,
                    });
                }
            }
        }
    }
    out
}

/// Interleaved order: repetition-major, so every cell runs once before any runs twice.
pub fn schedule(n_cells: usize, repetitions: u32) -> Vec<RunSlot> {
    let mut out = Vec::with_capacity(n_cells * repetitions as usize);
    for r in 0..repetitions {
        for c in 0..n_cells {
            out.push(RunSlot { seq: out.len(), cell: c, repetition: r });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::Experiment;
    use proptest::prelude::*;

    const FILE: &str = r#"
apiVersion: rtslice/v1
kind: Experiment
name: m
duration: 1s
repetitions: 2
blocks:
  - name: a
    workloads: [{name: w, command: [sleep, "1"]}]
    scenarios: [idle, user]
    strategies: [none, wide, thread]
  - name: b
    workloads: [{name: w, command: [sleep, "1"]}]
    strategies: [none]
    variants: [{name: "n=1"}, {name: "n=2", replicas: {w: 2}}]
"#;

    #[test]
    fn expands_blocks_variants_scenarios_strategies() {
        let e = Experiment::parse(FILE, "m.yaml").unwrap();
        let c = cells(&e);
        assert_eq!(c.len(), 2 * 3 + 2);
        assert_eq!(c[0].id, "a/idle/none");
        assert_eq!(c[5].id, "a/user/thread");
        assert_eq!(c[7].id, "b/n=2/idle/none");
        let ids: std::collections::BTreeSet<_> = c.iter().map(|x| x.id.clone()).collect();
        assert_eq!(ids.len(), c.len(), "ids are unique");
    }

    #[test]
    fn schedule_interleaves() {
        let s: Vec<_> = schedule(3, 2).iter().map(|r| (r.cell, r.repetition)).collect();
        assert_eq!(s, vec![(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]);
    }

    proptest! {
        #[test]
        fn schedule_runs_each_cell_once_per_repetition_in_rounds(n in 1usize..30, r in 1u32..6) {
            let s = schedule(n, r);
            prop_assert_eq!(s.len(), n * r as usize);
            for (i, slot) in s.iter().enumerate() {
                prop_assert_eq!(slot.seq, i);
                // Round k holds exactly cells 0..n once each: no cell repeats before all ran.
                prop_assert_eq!(slot.repetition as usize, i / n);
                prop_assert_eq!(slot.cell, i % n);
            }
        }
    }
}
