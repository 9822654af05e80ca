//! `--rotate-size`, `--rotate-time`, `--rotate-keep`: what rotation the
//! user asked for, checked against the rest of the plan (no OS here).

use super::options::Output;
use super::units::{parse_size_kb, parse_time_ms};
use crate::pb::protos::TraceConfig;

/// Smallest accepted cut sizes and periods: below these the re-emitted
/// headers (config, clocks, system info, process tree) dominate.
pub const MIN_SIZE_BYTES: u64 = 64 * 1024;
pub const MIN_PERIOD_MS: u64 = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotatePlan {
    /// Cut once the file being written holds this much.
    pub max_bytes: Option<u64>,
    /// Cut once the file being written is this old.
    pub period_ms: Option<u64>,
    /// Keep only the newest N files (the one being written included).
    pub keep: Option<u32>,
}

/// None when no `--rotate-*` flag was given.
pub fn from_flags(
    size: Option<&str>,
    time: Option<&str>,
    keep: Option<u32>,
    config: &TraceConfig,
    output: Option<&Output>,
    detach: bool,
) -> Result<Option<RotatePlan>, String> {
    if size.is_none() && time.is_none() {
        if keep.is_some() {
            return Err("--rotate-keep needs --rotate-size or --rotate-time".into());
        }
        return Ok(None);
    }
    let max_bytes = size
        .map(|s| {
            parse_size_kb(s)
                .map(|kb| kb.saturating_mul(1024))
                .filter(|&b| b >= MIN_SIZE_BYTES)
                .ok_or_else(|| format!("--rotate-size {s}: give at least 64kb (units k, m, g)"))
        })
        .transpose()?;
    let period_ms = time
        .map(|t| {
            parse_time_ms(t)
                .filter(|&ms| ms >= MIN_PERIOD_MS)
                .ok_or_else(|| format!("--rotate-time {t}: give at least 1s (units s, m, h)"))
        })
        .transpose()?;
    if keep == Some(0) {
        return Err("--rotate-keep must be at least 1".into());
    }
    if config.write_into_file != Some(true) {
        return Err(
            "--rotate-* needs a streaming trace: write_into_file: true in the config \
                    (or -s SIZE in light mode)"
                .into(),
        );
    }
    match output {
        Some(Output::File { .. }) => {}
        _ => return Err("--rotate-* needs -o PATH (files PATH.000, PATH.001, ...)".into()),
    }
    if detach {
        return Err("--rotate-* cannot be combined with --detach".into());
    }
    Ok(Some(RotatePlan {
        max_bytes,
        period_ms,
        keep,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wif() -> TraceConfig {
        TraceConfig {
            write_into_file: Some(true),
            ..Default::default()
        }
    }

    fn out() -> Output {
        Output::File {
            path: "t".into(),
            no_clobber: false,
        }
    }

    #[test]
    fn sizes_times_and_keep() {
        let p = from_flags(
            Some("1mb"),
            Some("10m"),
            Some(3),
            &wif(),
            Some(&out()),
            false,
        );
        assert_eq!(
            p.unwrap(),
            Some(RotatePlan {
                max_bytes: Some(1 << 20),
                period_ms: Some(600_000),
                keep: Some(3)
            })
        );
        assert_eq!(from_flags(None, None, None, &wif(), None, false), Ok(None));
    }

    #[test]
    fn refusals_say_why() {
        let cases = [
            (Some("1kb"), None, None, wif(), Some(out()), false, "64kb"),
            (None, Some("10ms"), None, wif(), Some(out()), false, "1s"),
            (
                None,
                None,
                Some(2),
                wif(),
                Some(out()),
                false,
                "needs --rotate-size",
            ),
            (
                Some("1mb"),
                None,
                Some(0),
                wif(),
                Some(out()),
                false,
                "at least 1",
            ),
            (
                Some("1mb"),
                None,
                None,
                TraceConfig::default(),
                Some(out()),
                false,
                "write_into_file",
            ),
            (
                Some("1mb"),
                None,
                None,
                wif(),
                Some(Output::Stdout),
                false,
                "-o PATH",
            ),
            (
                Some("1mb"),
                None,
                None,
                wif(),
                Some(out()),
                true,
                "--detach",
            ),
        ];
        for (size, time, keep, cfg, o, detach, words) in cases {
            let e = from_flags(size, time, keep, &cfg, o.as_ref(), detach).unwrap_err();
            assert!(e.contains(words), "{e}");
        }
    }
}
