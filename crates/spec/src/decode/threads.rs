//! Per-thread rules (`threads:`) and the deadline shares they divide a workload's budget into.

use std::time::Duration;

use rtslice_yaml::{self as yaml, join, Reader};

use super::values::SpecValues;
use super::workload::slot_field;
use crate::types::*;
use crate::units::format_duration;

pub(super) fn thread_rule(cx: &mut Reader, n: &yaml::Node, path: &str, count: Option<u32>) -> Option<ThreadRule> {
    let f = cx.fields(n, path, &["match", "policy", "priority", "nice", "runtime", "deadline", "period", "share", "slots"])?;
    let before = cx.error_count();
    let pattern = match f.get("match") {
        Some(m) => cx.regex(m, &join(path, "match")),
        None => {
            cx.err(n, &join(path, "match"), "missing; give a thread-name regex such as `^ru-thread$`");
            None
        }
    };
    let policy_name = match f.get("policy") {
        Some(p) => cx.string(p, &join(path, "policy")).unwrap_or_default(),
        None => "other".into(),
    };
    // Which fields each policy takes; the others are reported so nothing is silently ignored.
    let takes: &[&str] = match policy_name.as_str() {
        "other" => &["nice", "share", "period"],
        "batch" => &["nice"],
        "idle" => &[],
        "fifo" | "rr" => &["priority", "period"],
        "deadline" => &["runtime", "deadline", "period", "share"],
        _ => {
            if let Some(p) = f.get("policy") {
                cx.err(p, &join(path, "policy"), format!("unknown policy `{policy_name}`; use other, batch, idle, fifo, rr or deadline"));
            }
            return None;
        }
    };
    for k in ["priority", "nice", "runtime", "deadline", "period", "share"] {
        if !takes.contains(&k) {
            if let Some(v) = f.get(k) {
                cx.err(v, &join(path, k), format!("`{k}` does not apply to policy `{policy_name}`"));
            }
        }
    }
    let nice = f.optional(cx, "nice", |cx, v, p| cx.int(v, p, -20, 19)).map(|v| v as i32);
    let policy = match policy_name.as_str() {
        "other" => {
            let share = f.optional(cx, "share", |cx, v, p| cx.fraction(v, p));
            if let (Some(v), Some(s)) = (f.get("share"), share) {
                if s <= 0.0 {
                    cx.err(v, &join(path, "share"), "a share must be above 0");
                }
            }
            let period = f.optional(cx, "period", |cx, v, p| cx.duration(v, p));
            if let (Some(v), Some(p)) = (f.get("period"), period) {
                if share.is_none() {
                    cx.err(v, &join(path, "period"), "`period` of an `other` rule is the period of its CFS bandwidth: give the rule a `share` too");
                } else if p < CFS_MIN_PERIOD || p > CFS_MAX_PERIOD {
                    cx.err(
                        v,
                        &join(path, "period"),
                        format!(
                            "CFS bandwidth period {} is outside the kernel's range {}–{}",
                            format_duration(p),
                            format_duration(CFS_MIN_PERIOD),
                            format_duration(CFS_MAX_PERIOD)
                        ),
                    );
                }
            }
            SchedPolicy::Other { nice, share, period }
        }
        "batch" => SchedPolicy::Batch { nice },
        "idle" => SchedPolicy::Idle,
        "fifo" | "rr" => {
            let priority = match f.get("priority") {
                Some(v) => cx.int(v, &join(path, "priority"), 1, 99).map(|v| v as u32),
                None => {
                    cx.err(n, &join(path, "priority"), format!("missing; {policy_name} needs a priority 1–99"));
                    None
                }
            }
            .unwrap_or(1);
            let period = f.optional(cx, "period", |cx, v, p| cx.period(v, p));
            if policy_name == "fifo" {
                SchedPolicy::Fifo { priority, period }
            } else {
                SchedPolicy::Rr { priority, period }
            }
        }
        _ => {
            let runtime = f.optional(cx, "runtime", |cx, v, p| cx.duration(v, p));
            let deadline = f.optional(cx, "deadline", |cx, v, p| cx.duration(v, p));
            let period = f.optional(cx, "period", |cx, v, p| cx.period(v, p));
            let share = f.optional(cx, "share", |cx, v, p| cx.fraction(v, p));
            if let (Some(v), Some(s)) = (f.get("share"), share) {
                if s <= 0.0 {
                    cx.err(v, &join(path, "share"), "a share must be above 0");
                }
                if f.has("runtime") {
                    cx.err(v, &join(path, "share"), "give `runtime` or `share`, not both");
                }
            }
            // The kernel's own checks (sched_dl_overflow / __checkparam_dl): 1024 ns ≤ runtime ≤ deadline ≤ period.
            if let (Some(r), Some(v)) = (runtime, f.get("runtime")) {
                if r < Duration::from_nanos(1024) {
                    cx.err(v, &join(path, "runtime"), "SCHED_DEADLINE needs a runtime of at least 1024ns");
                }
                if let Some(d) = deadline.or(period) {
                    if r > d {
                        cx.err(v, &join(path, "runtime"), format!("runtime {} exceeds the deadline {}", format_duration(r), format_duration(d)));
                    }
                }
            }
            if let (Some(d), Some(p), Some(v)) = (deadline, period, f.get("deadline")) {
                if d > p {
                    cx.err(v, &join(path, "deadline"), format!("deadline {} exceeds the period {}", format_duration(d), format_duration(p)));
                }
            }
            if let (Some(d), Some(v)) = (deadline, f.get("deadline")) {
                if d < MIN_PERIOD && f.get("period").is_none() {
                    cx.err(v, &join(path, "deadline"), format!("deadline {} is below the kernel's minimum {}", format_duration(d), format_duration(MIN_PERIOD)));
                }
            }
            SchedPolicy::Deadline { runtime, deadline, period, share }
        }
    };
    let slots = f.get("slots").and_then(|s| slot_field(cx, s, &join(path, "slots"), count)).unwrap_or_default();
    (cx.error_count() == before).then(|| ThreadRule { pattern: pattern.unwrap_or_default(), policy, slots })
}

/// Shares of deadline rules and of `other` rules (the CFS pool) divide one workload budget: together
/// they cannot pass 100%, and a pool leaves the real-time rules something.
pub(super) fn check_deadline_shares(cx: &mut Reader, at: &yaml::Node, path: &str, rules: &[ThreadRule]) {
    let deadline: f64 = rules
        .iter()
        .filter_map(|r| match r.policy {
            SchedPolicy::Deadline { share, .. } => share,
            _ => None,
        })
        .sum();
    let pool = pool_share(rules).unwrap_or(0.0);
    if deadline + pool > 1.0 + 1e-9 {
        let what = if pool > 0.0 { "deadline and `other` shares" } else { "deadline shares" };
        cx.err(at, path, format!("{what} add up to {:.0}% of the workload's budget; at most 100%", (deadline + pool) * 100.0));
    } else if pool >= 1.0 - 1e-9 {
        cx.err(
            at,
            path,
            "`other` shares take the whole budget as CFS bandwidth and leave its real-time threads nothing; give the real-time rules a part \
             (or use `bestEffort` with a cap for a workload with no real-time thread)",
        );
    }
}
