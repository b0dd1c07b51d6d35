//! Quantities as people write them in specs and on the command line: durations (`1.4ms`, `100us`),
//! fractions (`95%`, `0.95`), byte sizes (`4096MB`, `1GiB`) and bit rates (`10Mbit`, `1G`).
//! A bare number is refused where the unit would be a guess.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("`{0}` is empty; write a number with a unit, e.g. `1.4ms`")]
    Empty(String),
    #[error("`{input}` has no unit; write e.g. `{input}us`, `{input}ms` or `{input}s`")]
    MissingUnit { input: String },
    #[error("`{input}` has unknown unit `{unit}`; use one of {known}")]
    UnknownUnit { input: String, unit: String, known: &'static str },
    #[error("`{0}` is not a number")]
    NotANumber(String),
    #[error("`{0}` is negative")]
    Negative(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
    #[error("`{0}` is not a fraction in [0, 1] (write `0.95` or `95%`)")]
    NotAFraction(String),
}

fn split_number(input: &str) -> Result<(f64, &str), UnitError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(UnitError::Empty(input.to_string()));
    }
    let bytes = s.as_bytes();
    let mut end = 0;
    while end < bytes.len() {
        let b = bytes[end];
        let exponent_follows = |at: usize| {
            let rest = &bytes[at + 1..];
            let rest = rest.strip_prefix(b"+").or_else(|| rest.strip_prefix(b"-")).unwrap_or(rest);
            rest.first().is_some_and(u8::is_ascii_digit)
        };
        // `e` is an exponent only when digits follow it; otherwise it starts a unit.
        let numeric = b.is_ascii_digit()
            || b == b'.'
            || (matches!(b, b'+' | b'-') && (end == 0 || matches!(bytes[end - 1], b'e' | b'E')))
            || (matches!(b, b'e' | b'E') && end > 0 && exponent_follows(end));
        if !numeric {
            break;
        }
        end += 1;
    }
    let (num, unit) = s.split_at(end);
    let value: f64 = num.parse().map_err(|_| UnitError::NotANumber(input.to_string()))?;
    if !value.is_finite() {
        return Err(UnitError::NotANumber(input.to_string()));
    }
    if value < 0.0 {
        return Err(UnitError::Negative(input.to_string()));
    }
    Ok((value, unit.trim()))
}

/// Parses `1.4ms`, `100us`, `100µs`, `250ns`, `2s`, `1m`, `1h`.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    let (value, unit) = split_number(input)?;
    let ns_per_unit: f64 = match unit {
        "ns" => 1.0,
        "us" | "µs" | "μs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "" => return Err(UnitError::MissingUnit { input: input.trim().to_string() }),
        other => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit: other.to_string(),
                known: "ns, us, ms, s, m, h",
            })
        }
    };
    let ns = (value * ns_per_unit).round();
    if ns > u64::MAX as f64 {
        return Err(UnitError::TooLarge(input.to_string()));
    }
    Ok(Duration::from_nanos(ns as u64))
}

/// Writes a duration the way `parse_duration` reads it, in the largest unit that keeps it exact.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    for (unit, per) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if ns % per == 0 {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
}

/// Parses a fraction of one CPU: `0.95` or `95%`.
pub fn parse_fraction(input: &str) -> Result<f64, UnitError> {
    let (value, unit) = split_number(input)?;
    let fraction = match unit {
        "%" => value / 100.0,
        "" => value,
        other => {
            return Err(UnitError::UnknownUnit { input: input.to_string(), unit: other.to_string(), known: "%, or none" })
        }
    };
    if !(0.0..=1.0).contains(&fraction) {
        return Err(UnitError::NotAFraction(input.to_string()));
    }
    Ok(fraction)
}

/// Parses a byte size: `4096`, `512K`, `4096MB`, `1GiB` (K/M/G/T in powers of 1024, as the kernel does).
pub fn parse_bytes(input: &str) -> Result<u64, UnitError> {
    let (value, unit) = split_number(input)?;
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => 1024.0,
        "m" | "mb" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" | "tib" => 1024f64.powi(4),
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
                known: "B, K, M, G, T (optionally KiB/KB ...)",
            })
        }
    };
    let bytes = (value * mult).round();
    if bytes > u64::MAX as f64 {
        return Err(UnitError::TooLarge(input.to_string()));
    }
    Ok(bytes as u64)
}

/// Writes a size the way `parse_bytes` reads it, in the largest binary unit that keeps it exact
/// (`4GiB`, `1536MiB`, `4097B`).
pub fn format_bytes(bytes: u64) -> String {
    for (unit, shift) in [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if bytes != 0 && bytes % (1u64 << shift) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{bytes}B")
}

/// Parses a bit rate in bits per second: `1000000`, `10Mbit`, `1G`, `100kbps` (powers of 1000, as tc does).
pub fn parse_bitrate(input: &str) -> Result<f64, UnitError> {
    let (value, unit) = split_number(input)?;
    let lower = unit.to_ascii_lowercase();
    let stem = lower.trim_end_matches("bps").trim_end_matches("bit").trim_end_matches("/s");
    let mult = match stem {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => {
            return Err(UnitError::UnknownUnit {
                input: input.to_string(),
                unit: unit.to_string(),
                known: "bit, kbit, Mbit, Gbit (or bps forms)",
            })
        }
    };
    Ok(value * mult)
}

/// `Some` written by `inner`, `None` as a none: the `option` halves of the serde helpers below.
fn serialize_option<S: serde::Serializer>(
    d: &Option<Duration>,
    s: S,
    inner: fn(&Duration, S) -> Result<S::Ok, S::Error>,
) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => inner(d, s),
        None => s.serialize_none(),
    }
}

/// serde helpers: a `Duration` written as `1400us` (read back with [`parse_duration`]).
pub mod serde_duration {
    use serde::{de, Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format_duration(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_duration(&text).map_err(de::Error::custom)
    }

    /// The same for `Option<Duration>`.
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};
        use std::time::Duration;
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            super::super::serialize_option(d, s, super::serialize)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            match Option::<String>::deserialize(d)? {
                Some(t) => super::super::parse_duration(&t).map(Some).map_err(serde::de::Error::custom),
                None => Ok(None),
            }
        }
    }
}

/// serde helpers: a `Duration` as integer nanoseconds (the unit of sched_setattr), for JSON plans.
pub mod serde_nanos {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_nanos(u64::deserialize(d)?))
    }

    /// The same for an optional duration (`null` or absent = `None`).
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};
        use std::time::Duration;

        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            super::super::serialize_option(d, s, super::serialize)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            Ok(Option::<u64>::deserialize(d)?.map(Duration::from_nanos))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1.4ms").unwrap(), Duration::from_micros(1400));
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("100µs").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration(" 2s ").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1e3us").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(matches!(parse_duration("100"), Err(UnitError::MissingUnit { .. })));
        assert!(matches!(parse_duration("5 parsecs"), Err(UnitError::UnknownUnit { .. })));
        assert!(matches!(parse_duration("-1ms"), Err(UnitError::Negative(_))));
        assert!(matches!(parse_duration(""), Err(UnitError::Empty(_))));
        assert!(parse_duration("ms").is_err());
    }

    #[test]
    fn fractions_bytes_rates() {
        assert_eq!(parse_fraction("95%").unwrap(), 0.95);
        assert_eq!(parse_fraction("0.5").unwrap(), 0.5);
        assert!(parse_fraction("120%").is_err());
        assert_eq!(parse_bytes("4096MB").unwrap(), 4096 * 1024 * 1024);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("128").unwrap(), 128);
        assert_eq!(parse_bitrate("10Mbit").unwrap(), 10e6);
        assert_eq!(parse_bitrate("1G").unwrap(), 1e9);
        assert!(parse_bitrate("3 furlongs").is_err());
    }

    proptest! {
        #[test]
        fn duration_round_trips(ns in 0u64..10_000_000_000_000) {
            let d = Duration::from_nanos(ns);
            prop_assert_eq!(parse_duration(&format_duration(d)).unwrap(), d);
        }

        #[test]
        fn never_panics(s in "\\PC{0,12}") {
            let _ = parse_duration(&s);
            let _ = parse_fraction(&s);
            let _ = parse_bytes(&s);
            let _ = parse_bitrate(&s);
        }
    }
}
