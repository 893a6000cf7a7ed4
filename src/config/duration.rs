//! Human-friendly durations (`"800ms"`, `"1.5s"`, `"20m"`) and sizes (`"8MiB"`, `"4096"`).
//!
//! Numbers are read as exact decimals, never through `f64`, so `"0.1s"` is exactly 100ms.

use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Duration units, longest suffix first so `ms` is not read as `m` + `s`.
const DURATION_UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("ms", 1_000_000),
    ("s", NANOS_PER_SEC),
    ("m", 60 * NANOS_PER_SEC),
    ("h", 3_600 * NANOS_PER_SEC),
    ("d", 86_400 * NANOS_PER_SEC),
];

/// Size units, compared case-insensitively. `KB` is 1000 bytes, `KiB` 1024.
const SIZE_UNITS: &[(&str, u128)] = &[
    ("b", 1),
    ("kb", 1_000),
    ("mb", 1_000_000),
    ("gb", 1_000_000_000),
    ("tb", 1_000_000_000_000),
    ("kib", 1 << 10),
    ("mib", 1 << 20),
    ("gib", 1 << 30),
    ("tib", 1 << 40),
];

/// Parse a duration such as `"800ms"`, `"60s"`, `"20m"`, `"2h"`, `"1d"`, `"1.5s"` or `"250us"`.
///
/// A unit is required (a bare `"30"` is ambiguous) and negative values are rejected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    let (number, unit) = split_number(text).map_err(|e| format!("invalid duration `{s}`: {e}"))?;
    if unit.is_empty() {
        return Err(format!(
            "invalid duration `{s}`: missing unit; write e.g. \"{text}s\" (units: us, ms, s, m, h, d)"
        ));
    }
    let Some(&(_, scale)) = DURATION_UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(format!(
            "invalid duration `{s}`: unknown unit `{unit}` (units: us, ms, s, m, h, d)"
        ));
    };
    let nanos = number
        .scaled(scale)
        .ok_or_else(|| format!("invalid duration `{s}`: too large"))?;
    let secs = u64::try_from(nanos / NANOS_PER_SEC)
        .map_err(|_| format!("invalid duration `{s}`: too large"))?;
    // The remainder is below one second, so it always fits in u32.
    let subsec = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    Ok(Duration::new(secs, subsec))
}

/// Parse a size in bytes such as `"8MiB"`, `"512KiB"`, `"1GiB"`, `"100KB"`, `"10B"` or a bare
/// `"4096"` (bytes). Units are case-insensitive; `KB`/`MB`/`GB` are powers of 1000, `KiB`/`MiB`/
/// `GiB` powers of 1024.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let text = s.trim();
    let (number, unit) = split_number(text).map_err(|e| format!("invalid size `{s}`: {e}"))?;
    let scale = if unit.is_empty() {
        1
    } else {
        let lower = unit.to_ascii_lowercase();
        match SIZE_UNITS.iter().find(|(name, _)| *name == lower) {
            Some(&(_, scale)) => scale,
            None => {
                return Err(format!(
                "invalid size `{s}`: unknown unit `{unit}` (units: B, KB, MB, GB, KiB, MiB, GiB)"
            ))
            }
        }
    };
    number
        .scaled(scale)
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or_else(|| format!("invalid size `{s}`: too large"))
}

/// Format a duration the way the config file writes it: whole seconds below five minutes in
/// seconds (`"60s"`, `"120s"`), else the largest unit that represents it exactly (`"20m"`,
/// `"1500ms"`).
pub fn format_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    if d.subsec_nanos() == 0 && d.as_secs() < 300 {
        return format!("{}s", d.as_secs());
    }
    for &(unit, scale) in DURATION_UNITS.iter().rev() {
        if unit != "µs" && nanos.is_multiple_of(scale) {
            return format!("{}{unit}", nanos / scale);
        }
    }
    format!("{nanos}ns")
}

/// An unsigned decimal read exactly: `int` + `frac / 10^frac_digits`.
struct Decimal {
    int: u128,
    frac: u128,
    frac_digits: u32,
}

impl Decimal {
    /// `self * scale`, truncated to an integer; `None` on overflow.
    fn scaled(&self, scale: u128) -> Option<u128> {
        let whole = self.int.checked_mul(scale)?;
        let part = self.frac.checked_mul(scale)? / 10u128.checked_pow(self.frac_digits)?;
        whole.checked_add(part)
    }
}

/// Split `"1.5ms"` into its number and unit (`"ms"`); whitespace between them is allowed.
fn split_number(text: &str) -> Result<(Decimal, &str), String> {
    if text.is_empty() {
        return Err("empty value".to_owned());
    }
    if text.starts_with('-') {
        return Err("must not be negative".to_owned());
    }
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(end);
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() || (number.contains('.') && frac.is_empty()) || frac.contains('.') {
        return Err("expected a number followed by a unit".to_owned());
    }
    if frac.len() > 18 {
        return Err("too many decimal places".to_owned());
    }
    let too_large = |_| "too large".to_owned();
    let decimal = Decimal {
        int: int.parse().map_err(too_large)?,
        frac: if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(too_large)?
        },
        frac_digits: u32::try_from(frac.len()).unwrap_or(0),
    };
    Ok((decimal, unit.trim_start()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases = [
            ("800ms", Duration::from_millis(800)),
            ("60s", Duration::from_secs(60)),
            ("20m", Duration::from_secs(20 * 60)),
            ("2h", Duration::from_secs(2 * 3600)),
            ("1d", Duration::from_secs(86_400)),
            ("1.5s", Duration::from_millis(1500)),
            ("0.1s", Duration::from_millis(100)),
            ("250us", Duration::from_micros(250)),
            ("0s", Duration::ZERO),
            (" 10 s ", Duration::from_secs(10)),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn bad_durations() {
        for (text, needle) in [
            ("30", "missing unit"),
            ("-5s", "negative"),
            ("", "empty"),
            ("5x", "unknown unit `x`"),
            ("s", "expected a number"),
            ("1.s", "expected a number"),
            ("1.2.3s", "expected a number"),
            ("99999999999999999999999d", "too large"),
            ("1h30m", "unknown unit"),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn sizes() {
        let cases = [
            ("8MiB", 8 << 20),
            ("512KiB", 512 << 10),
            ("1GiB", 1 << 30),
            ("100KB", 100_000),
            ("1MB", 1_000_000),
            ("4096", 4096),
            ("10B", 10),
            ("1.5KiB", 1536),
            ("2 mib", 2 << 20),
        ];
        for (text, want) in cases {
            assert_eq!(parse_size(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn bad_sizes() {
        for (text, needle) in [
            ("8M", "unknown unit `M`"),
            ("-1", "negative"),
            ("MiB", "expected a number"),
            ("", "empty"),
        ] {
            let err = parse_size(text).unwrap_err();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn format_round_trips() {
        for text in [
            "0s", "800ms", "30s", "120s", "5m", "20m", "2h", "1d", "250us", "1500ms",
        ] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }
}
