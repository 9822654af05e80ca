//! `-t 10s`, `-b 32mb`, `-s 1gb`: values with mandatory units, as upstream.
//! A bare number is refused, except `0`.

/// Parses `N` followed by a unit from `units` into `N * multiplier`.
fn parse_with_units(arg: &str, units: &[(&str, u64)]) -> Option<u64> {
    if arg == "0" {
        return Some(0);
    }
    let digits = arg.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    let (num, unit) = arg.split_at(digits);
    let value: u64 = num.parse().ok()?;
    let (_, mult) = units.iter().find(|(u, _)| *u == unit)?;
    value.checked_mul(*mult)
}

/// Duration in milliseconds: `ms`, `s`, `m`, `h`.
pub fn parse_time_ms(arg: &str) -> Option<u64> {
    parse_with_units(
        arg,
        &[("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)],
    )
}

/// Size in KiB: `k`/`kb`, `m`/`mb`, `g`/`gb`.
pub fn parse_size_kb(arg: &str) -> Option<u64> {
    parse_with_units(
        arg,
        &[
            ("kb", 1),
            ("k", 1),
            ("mb", 1024),
            ("m", 1024),
            ("gb", 1 << 20),
            ("g", 1 << 20),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time_ms("10s"), Some(10_000));
        assert_eq!(parse_time_ms("250ms"), Some(250));
        assert_eq!(parse_time_ms("2m"), Some(120_000));
        assert_eq!(parse_time_ms("1h"), Some(3_600_000));
        assert_eq!(parse_time_ms("0"), Some(0));
        for bad in ["10", "s", "", "10 s", "10sec", "-1s", "1.5s"] {
            assert_eq!(parse_time_ms(bad), None, "{bad}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size_kb("32mb"), Some(32 * 1024));
        assert_eq!(parse_size_kb("64k"), Some(64));
        assert_eq!(parse_size_kb("1g"), Some(1 << 20));
        assert_eq!(parse_size_kb("0"), Some(0));
        for bad in ["32", "mb", "32MB", "99999999999999999999gb"] {
            assert_eq!(parse_size_kb(bad), None, "{bad}");
        }
    }
}
