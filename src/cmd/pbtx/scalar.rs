//! Conversion of number and identifier tokens into typed values, with
//! range checks per protobuf type.

/// Parses an integer literal: optional sign, then decimal or `0x` hex.
/// Leading zeros are decimal (as in Perfetto's parser; no octal).
/// Returns (negative, magnitude).
pub fn parse_int(text: &str) -> Option<(bool, u64)> {
    let (neg, rest) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let mag = if let Some(hex) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u64::from_str_radix(hex, 16).ok()?
    } else {
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        rest.parse::<u64>().ok()?
    };
    Some((neg, mag))
}

/// Checks an integer against `[min, max]` and returns it as i128.
pub fn int_in_range(neg: bool, mag: u64, min: i128, max: i128) -> Option<i128> {
    let v = if neg { -(mag as i128) } else { mag as i128 };
    (min..=max).contains(&v).then_some(v)
}

/// Parses a floating-point literal: decimal/exponent forms, integers (also
/// hex), `inf`, `infinity`, `nan` (any case, optional sign), optional
/// trailing `f`/`F` after a decimal number.
pub fn parse_float(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    let (neg, body) = match lower.as_bytes().first()? {
        b'-' => (true, &lower[1..]),
        b'+' => (false, &lower[1..]),
        _ => (false, &lower[..]),
    };
    let v = match body {
        "inf" | "infinity" => f64::INFINITY,
        "nan" => f64::NAN,
        _ if body.starts_with("0x") => parse_int(body)?.1 as f64,
        _ => {
            let body = body.strip_suffix('f').unwrap_or(body);
            let valid = !body.is_empty()
                && body
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b"._e+-".contains(&b))
                && body.bytes().any(|b| b.is_ascii_digit());
            if !valid {
                return None;
            }
            crate::protozero::decimal::parse_decimal(body)?
        }
    };
    Some(if neg { -v } else { v })
}

/// `true/false`, `True/False`, `t/f`, and `1/0`.
pub fn parse_bool(text: &str) -> Option<bool> {
    match text {
        "true" | "True" | "t" | "1" => Some(true),
        "false" | "False" | "f" | "0" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        assert_eq!(parse_int("0"), Some((false, 0)));
        assert_eq!(parse_int("-12"), Some((true, 12)));
        assert_eq!(parse_int("0x1F"), Some((false, 31)));
        assert_eq!(parse_int("-0x10"), Some((true, 16)));
        assert_eq!(parse_int("010"), Some((false, 10)));
        assert_eq!(parse_int("18446744073709551615"), Some((false, u64::MAX)));
        for bad in [
            "",
            "-",
            "0x",
            "1.5",
            "12a",
            "18446744073709551616",
            "--1",
            "0xg",
        ] {
            assert_eq!(parse_int(bad), None, "{bad}");
        }
    }

    #[test]
    fn ranges() {
        let i32r = (i32::MIN as i128, i32::MAX as i128);
        assert_eq!(
            int_in_range(true, 1 << 31, i32r.0, i32r.1),
            Some(i32::MIN as i128)
        );
        assert_eq!(int_in_range(false, 1 << 31, i32r.0, i32r.1), None);
        assert_eq!(int_in_range(true, 1, 0, u32::MAX as i128), None);
        assert_eq!(int_in_range(true, 0, 0, 10), Some(0));
    }

    #[test]
    fn floats() {
        assert_eq!(parse_float("1.5"), Some(1.5));
        assert_eq!(parse_float("-2e3"), Some(-2000.0));
        assert_eq!(parse_float(".5"), Some(0.5));
        assert_eq!(parse_float("3"), Some(3.0));
        assert_eq!(parse_float("0x10"), Some(16.0));
        assert_eq!(parse_float("2.5f"), Some(2.5));
        assert_eq!(parse_float("-inf"), Some(f64::NEG_INFINITY));
        assert!(parse_float("nan").unwrap().is_nan());
        for bad in ["", "e", "1.2.3", "abc", "1e", "-"] {
            assert_eq!(parse_float(bad), None, "{bad}");
        }
    }

    #[test]
    fn bools() {
        assert_eq!(parse_bool("true"), Some(true));
        assert_eq!(parse_bool("f"), Some(false));
        assert_eq!(parse_bool("yes"), None);
    }
}
