//! `FtraceConfig.enable_function_graph`: checking the untrusted function
//! patterns of `function_filters` and `function_graph_roots` before they
//! are written to `set_ftrace_filter` / `set_graph_function`.

use crate::pb::protos::FtraceConfig;

/// Patterns one list may hold.
pub const MAX_PATTERNS: usize = 64;
/// Bytes of one pattern.
const MAX_PATTERN_LEN: usize = 128;

/// A function name or a glob over names (`vfs_*`, `*_open`, `do_?`): the
/// characters of kernel symbols (`.` as in `foo.isra.0`) plus `*` and
/// `?`. Commands (`func:cmd`), `:mod:` selectors, `!` negations and
/// anything that would add a line are refused.
pub fn valid_pattern_untrusted(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= MAX_PATTERN_LEN
        && p.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'*' | b'?'))
}

/// What one config asks of the function_graph tracer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FuncgraphRequest {
    pub filters: Vec<String>,
    pub roots: Vec<String>,
    /// `max_graph_depth` (0: unlimited).
    pub max_depth: u32,
}

/// The request of `cfg` (`None` without `enable_function_graph`), or why
/// it is refused.
pub fn request_untrusted(cfg: &FtraceConfig) -> Result<Option<FuncgraphRequest>, String> {
    if !cfg.enable_function_graph.unwrap_or(false) {
        return Ok(None);
    }
    let check = |what: &str, list: &[String]| -> Result<Vec<String>, String> {
        if list.len() > MAX_PATTERNS {
            return Err(format!(
                "{what}: {} patterns, at most {MAX_PATTERNS}",
                list.len()
            ));
        }
        if let Some(bad) = list.iter().find(|p| !valid_pattern_untrusted(p)) {
            let shown: String = bad
                .chars()
                .take(64)
                .flat_map(char::escape_default)
                .collect();
            return Err(format!(
                "{what}: {shown:?} is not a function name or glob (letters, digits, _ . * ?)"
            ));
        }
        Ok(list.to_vec())
    };
    Ok(Some(FuncgraphRequest {
        filters: check("function_filters", &cfg.function_filters)?,
        roots: check("function_graph_roots", &cfg.function_graph_roots)?,
        max_depth: cfg.function_graph_max_depth.unwrap_or(0),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        for ok in ["vfs_read", "vfs_*", "*open*", "do_?", "foo.isra.0"] {
            assert!(valid_pattern_untrusted(ok), "{ok}");
        }
        for bad in [
            "",
            "vfs_read\nsched_*",
            "vfs_read:traceoff",
            ":mod:ext4",
            "!vfs_read",
            "a b",
            &"x".repeat(129),
        ] {
            assert!(!valid_pattern_untrusted(bad), "{bad:?}");
        }
    }

    #[test]
    fn requests() {
        let mut cfg = FtraceConfig::default();
        assert_eq!(request_untrusted(&cfg), Ok(None));
        cfg.enable_function_graph = Some(true);
        cfg.function_filters = vec!["vfs_*".into()];
        cfg.function_graph_roots = vec!["do_sys_openat2".into()];
        cfg.function_graph_max_depth = Some(3);
        assert_eq!(
            request_untrusted(&cfg),
            Ok(Some(FuncgraphRequest {
                filters: vec!["vfs_*".into()],
                roots: vec!["do_sys_openat2".into()],
                max_depth: 3
            }))
        );
        cfg.function_graph_roots = vec!["x:traceoff".into()];
        assert_eq!(
            request_untrusted(&cfg),
            Err(
                "function_graph_roots: \"x:traceoff\" is not a function name or glob \
                 (letters, digits, _ . * ?)"
                    .into()
            )
        );
        cfg.function_graph_roots = vec!["f".into(); 65];
        assert!(request_untrusted(&cfg).unwrap_err().contains("at most 64"));
    }
}
