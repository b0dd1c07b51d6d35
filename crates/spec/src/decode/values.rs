//! The spec's value types, read like rtslice-yaml's typed accessors.

use std::time::Duration;

use rtslice_yaml::{self as yaml, index, Reader, Val};

use crate::cpulist::parse_cpu_list;
use crate::types::*;
use crate::units::{format_duration, parse_bytes, parse_duration, parse_fraction};

/// The spec's own value types (units, CPU lists, patterns), read like rtslice-yaml's typed accessors:
/// `None` after recording an error.
pub(crate) trait SpecValues {
    fn number(&mut self, node: &yaml::Node, path: &str) -> Option<f64>;
    fn duration(&mut self, node: &yaml::Node, path: &str) -> Option<Duration>;
    /// A duration used as a kernel period: 100 µs to 4.194304 s (sched_rt_period_us / deadline limits).
    fn period(&mut self, node: &yaml::Node, path: &str) -> Option<Duration>;
    fn fraction(&mut self, node: &yaml::Node, path: &str) -> Option<f64>;
    fn bytes(&mut self, node: &yaml::Node, path: &str) -> Option<u64>;
    /// `0-3,6`, a single id, or a list of ids.
    fn cpus(&mut self, node: &yaml::Node, path: &str) -> Option<Vec<u32>>;
    fn slots(&mut self, node: &yaml::Node, path: &str) -> Option<Slots>;
    fn regex(&mut self, node: &yaml::Node, path: &str) -> Option<String>;
}

impl SpecValues for Reader<'_> {
    fn number(&mut self, node: &yaml::Node, path: &str) -> Option<f64> {
        match &node.val {
            Val::Int(i) => Some(*i as f64),
            Val::Float(f) if f.is_finite() => Some(*f),
            // Percentages of one CPU may exceed 100% here (a cap of `150%`), so not parse_fraction.
            Val::Str(s) if s.trim_end().ends_with('%') => match s.trim().trim_end_matches('%').trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v >= 0.0 => Some(v / 100.0),
                _ => {
                    self.err(node, path, format!("`{s}` is not a number or percentage"));
                    None
                }
            },
            _ => {
                self.err(node, path, format!("expected a number, found {}", node.kind()));
                None
            }
        }
    }

    fn duration(&mut self, node: &yaml::Node, path: &str) -> Option<Duration> {
        let Some(text) = node.scalar_text() else {
            self.err(node, path, format!("expected a duration such as `100ms`, found {}", node.kind()));
            return None;
        };
        match parse_duration(&text) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(node, path, e.to_string());
                None
            }
        }
    }

    /// A duration used as a kernel period: 100 µs to 4.194304 s (sched_rt_period_us / deadline limits).
    fn period(&mut self, node: &yaml::Node, path: &str) -> Option<Duration> {
        let d = self.duration(node, path)?;
        if d < MIN_PERIOD || d > MAX_PERIOD {
            self.err(
                node,
                path,
                format!(
                    "period {} is outside the kernel's range {}–{}",
                    format_duration(d),
                    format_duration(MIN_PERIOD),
                    format_duration(MAX_PERIOD)
                ),
            );
            return None;
        }
        Some(d)
    }

    fn fraction(&mut self, node: &yaml::Node, path: &str) -> Option<f64> {
        let Some(text) = node.scalar_text() else {
            self.err(node, path, format!("expected a fraction such as `0.95` or `95%`, found {}", node.kind()));
            return None;
        };
        match parse_fraction(&text) {
            Ok(f) => Some(f),
            Err(e) => {
                self.err(node, path, e.to_string());
                None
            }
        }
    }

    fn bytes(&mut self, node: &yaml::Node, path: &str) -> Option<u64> {
        let Some(text) = node.scalar_text() else {
            self.err(node, path, format!("expected a size such as `4096MB`, found {}", node.kind()));
            return None;
        };
        match parse_bytes(&text) {
            Ok(b) => Some(b),
            Err(e) => {
                self.err(node, path, e.to_string());
                None
            }
        }
    }

    /// `0-3,6`, a single id, or a list of ids.
    fn cpus(&mut self, node: &yaml::Node, path: &str) -> Option<Vec<u32>> {
        match &node.val {
            Val::Str(s) => match parse_cpu_list(s) {
                Ok(c) => Some(c),
                Err(e) => {
                    self.err(node, path, e.to_string());
                    None
                }
            },
            Val::Int(_) => self.int(node, path, 0, crate::cpulist::MAX_CPU_ID as i64).map(|c| vec![c as u32]),
            Val::Seq(items) => {
                let mut out = Vec::new();
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match self.int(item, &index(path, i), 0, crate::cpulist::MAX_CPU_ID as i64) {
                        Some(c) => out.push(c as u32),
                        None => ok = false,
                    }
                }
                out.sort_unstable();
                out.dedup();
                ok.then_some(out)
            }
            _ => {
                self.err(node, path, format!("expected a CPU list such as `0-3,6` or [0, 1], found {}", node.kind()));
                None
            }
        }
    }

    fn slots(&mut self, node: &yaml::Node, path: &str) -> Option<Slots> {
        if let Val::Str(s) = &node.val {
            if s.trim() == "any" {
                return Some(Slots::Any);
            }
        }
        self.cpus(node, path).map(Slots::List)
    }

    fn regex(&mut self, node: &yaml::Node, path: &str) -> Option<String> {
        let text = self.string(node, path)?;
        if text.is_empty() {
            self.err(node, path, "empty pattern; write a regular expression such as `^ru-thread$`");
            return None;
        }
        match regex::Regex::new(&text) {
            Ok(_) => Some(text),
            Err(e) => {
                // The regex crate's message spans lines with a caret diagram; keep its last line.
                let msg = e.to_string();
                let short = msg.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(&msg).trim().to_string();
                self.err(node, path, format!("`{text}` is not a valid regular expression: {short}"));
                None
            }
        }
    }
}
