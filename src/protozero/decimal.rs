//! Decimal text to `f64`, for the few doubles tracebox reads as text
//! (text-format config values, tracefs timestamps).
//!
//! std's correctly rounded parser brings ~25 KB of tables and code into
//! the binary (a sixth of the aarch64 size budget's margin). Inputs here
//! are short: exact whenever the digits fit in 2^53 and the decimal
//! exponent is within 22 (one rounding), within a few ulps otherwise.

/// Exact powers of ten as f64 (10^22 is the largest).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Digits beyond this many stop adding to the mantissa.
const MAX_DIGITS: u64 = 1_000_000_000_000_000_000;

/// Parses `digits[.digits][(e|E)[+|-]digits]` (either side of the point
/// may be empty, not both). No sign, no spaces; `None` on anything else.
pub fn parse_decimal(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut mantissa = 0u64;
    let mut exp10 = 0i64;
    let mut any = false;
    while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
        any = true;
        if mantissa < MAX_DIGITS {
            mantissa = mantissa * 10 + u64::from(d - b'0');
        } else {
            exp10 += 1;
        }
        i += 1;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            any = true;
            if mantissa < MAX_DIGITS {
                mantissa = mantissa * 10 + u64::from(d - b'0');
                exp10 -= 1;
            }
            i += 1;
        }
    }
    if !any {
        return None;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        let neg = match b.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        let mut e = 0i64;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            // Far beyond any f64 either way; stop growing.
            e = (e * 10 + i64::from(d - b'0')).min(100_000);
            i += 1;
        }
        if i == start {
            return None;
        }
        exp10 += if neg { -e } else { e };
    }
    if i != b.len() {
        return None;
    }
    Some(scale(mantissa as f64, exp10))
}

fn scale(m: f64, exp10: i64) -> f64 {
    if m == 0.0 {
        return 0.0;
    }
    let e = exp10.clamp(-400, 400) as i32;
    match e {
        0..=22 => m * POW10[e as usize],
        -22..=-1 => m / POW10[(-e) as usize],
        // Split so that neither step overflows or underflows early.
        23.. => m * 1e22 * 10f64.powi(e - 22),
        _ => m / 1e22 / 10f64.powi(-e - 22),
    }
}

#[cfg(test)]
mod tests {
    use super::parse_decimal;

    #[test]
    fn exact_where_std_is_exact() {
        for s in [
            "0",
            "1",
            "0.5",
            ".5",
            "5.",
            "1240.250000",
            "3.14159",
            "1e3",
            "1E-3",
            "2.5e+2",
            "123456789012345",
            "0.000001",
            "1e22",
            "1e-22",
            "9007199254740993",
        ] {
            let want: f64 = s.parse().unwrap();
            let got = parse_decimal(s).unwrap();
            assert!(
                (got - want).abs() <= want.abs() * 4.0 * f64::EPSILON,
                "{s}: {got} vs {want}"
            );
        }
        assert_eq!(parse_decimal("0.1"), Some(0.1));
        assert_eq!(parse_decimal("1240.25"), Some(1240.25));
        assert_eq!(
            parse_decimal("6.02214076e23").map(|v| (v / 6.02214076e23 - 1.0).abs() < 1e-15),
            Some(true)
        );
    }

    #[test]
    fn extremes_and_long_inputs() {
        assert_eq!(parse_decimal("1e400"), Some(f64::INFINITY));
        assert_eq!(parse_decimal("1e-400"), Some(0.0));
        assert_eq!(parse_decimal("0e999999999999"), Some(0.0));
        let long = format!("{}.{}", "9".repeat(40), "1".repeat(40));
        let v = parse_decimal(&long).unwrap();
        assert!((v / 1e40 - 1.0).abs() < 1e-12, "{v}");
        let tiny = format!("0.{}1", "0".repeat(30));
        assert!((parse_decimal(&tiny).unwrap() / 1e-31 - 1.0).abs() < 1e-12);
    }

    #[test]
    fn malformed_is_refused() {
        for s in [
            "", ".", "e5", "1e", "1e+", "1.2.3", "1..2", "-1", "+1", " 1", "1 ", "1f", "0x10",
            "nan",
        ] {
            assert_eq!(parse_decimal(s), None, "{s:?}");
        }
    }
}
