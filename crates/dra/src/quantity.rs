//! Kubernetes quantities (`resource.Quantity`) as thousandths of a CPU (`1m`), the resolution of
//! the published capacities and of what the node admits.

/// `"700m"` → 700, `"1"` → 1000, `"0.25"` → 250. Refuses what is not a whole number of
/// thousandths, negative or not a CPU quantity, saying why.
pub fn parse_milli(q: &str) -> Result<u64, String> {
    let t = q.trim();
    let (num, scale) = match t.strip_suffix('m') {
        Some(n) => (n, 1u64),
        None => (t, 1000u64),
    };
    let bad = || format!("`{q}` is not a CPU bandwidth: give thousandths of a CPU (`700m`) or a decimal number of CPUs (`0.7`)");
    let (int, frac) = match num.split_once('.') {
        Some((i, f)) => (i, f),
        None => (num, ""),
    };
    if int.is_empty() && frac.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let int_v: u64 = if int.is_empty() { 0 } else { int.parse().map_err(|_| bad())? };
    // Digits of the fraction below the resolution must be zeros.
    let digits = if scale == 1000 { 3 } else { 0 };
    let (kept, rest) = frac.split_at(frac.len().min(digits));
    if rest.bytes().any(|b| b != b'0') {
        return Err(format!("`{q}` is finer than a thousandth of a CPU (1m), the resolution rtslice publishes"));
    }
    let kept_v: u64 = if kept.is_empty() { 0 } else { format!("{kept:0<3}").parse().map_err(|_| bad())? };
    int_v.checked_mul(scale).and_then(|v| v.checked_add(kept_v)).ok_or_else(bad)
}

/// 700 → `"700m"`, 1000 → `"1"`: the canonical form Kubernetes itself prints.
pub fn format_milli(m: u64) -> String {
    if m % 1000 == 0 {
        (m / 1000).to_string()
    } else {
        format!("{m}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_trip_and_bad_ones_say_why() {
        for (q, m) in [("700m", 700), ("1", 1000), ("0.25", 250), (".5", 500), ("2.000", 2000), ("1500m", 1500), ("0", 0)] {
            assert_eq!(parse_milli(q), Ok(m), "{q}");
        }
        for m in [0, 1, 999, 1000, 1001, 12345] {
            assert_eq!(parse_milli(&format_milli(m)), Ok(m));
        }
        assert!(parse_milli("0.0005").unwrap_err().contains("finer"));
        assert!(parse_milli("1.5m").unwrap_err().contains("finer"));
        for bad in ["", "-1", "1Gi", "abc", ".", "1e3"] {
            assert!(parse_milli(bad).is_err(), "{bad}");
        }
    }
}
