//! `FtraceConfig.print_filter`: which `ftrace/print` events to keep.
//!
//! Rules are tried in order; the first that matches decides (allow or
//! deny); a message no rule matches is kept.

/// How a rule matches the message (`buf` of ftrace/print).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrintMatch {
    /// The message starts with these bytes.
    Prefix(Vec<u8>),
    /// An atrace message `TYPE|PID|REST` whose TYPE equals `kind` and
    /// whose REST starts with `prefix` (e.g. kind "B" for slice begins).
    Atrace { kind: Vec<u8>, prefix: Vec<u8> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrintRule {
    pub matcher: PrintMatch,
    pub allow: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrintFilter {
    pub rules: Vec<PrintRule>,
}

impl PrintFilter {
    /// Whether the message `buf` is kept.
    pub fn allows(&self, buf: &[u8]) -> bool {
        self.rules
            .iter()
            .find(|r| r.matcher.matches(buf))
            .is_none_or(|r| r.allow)
    }
}

impl PrintMatch {
    pub fn matches(&self, buf: &[u8]) -> bool {
        match self {
            PrintMatch::Prefix(p) => buf.starts_with(p),
            PrintMatch::Atrace { kind, prefix } => {
                let Some(rest) = buf.strip_prefix(kind.as_slice()) else {
                    return false;
                };
                let Some(rest) = rest.strip_prefix(b"|") else {
                    return false;
                };
                let Some(bar) = rest.iter().position(|&c| c == b'|') else {
                    return false;
                };
                rest[..bar].iter().all(u8::is_ascii_digit) && rest[bar + 1..].starts_with(prefix)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(m: PrintMatch, allow: bool) -> PrintRule {
        PrintRule { matcher: m, allow }
    }

    #[test]
    fn prefix_rules_first_match_wins_default_allow() {
        let f = PrintFilter {
            rules: vec![
                rule(PrintMatch::Prefix(b"keep-".to_vec()), true),
                rule(PrintMatch::Prefix(b"ke".to_vec()), false),
            ],
        };
        assert!(f.allows(b"keep-me"));
        assert!(!f.allows(b"kernel"));
        assert!(f.allows(b"other"));
        assert!(f.allows(b""));
        assert!(PrintFilter::default().allows(b"anything"));
    }

    #[test]
    fn atrace_rules_skip_the_pid() {
        let m = PrintMatch::Atrace {
            kind: b"B".to_vec(),
            prefix: b"drop".to_vec(),
        };
        assert!(m.matches(b"B|123|drop this"));
        assert!(m.matches(b"B||drop"));
        assert!(!m.matches(b"B|12x|drop"));
        assert!(!m.matches(b"E|123|drop"));
        assert!(!m.matches(b"B|123"));
        assert!(!m.matches(b"B123|drop"));
        assert!(!m.matches(b"B|123|keep"));
        let f = PrintFilter {
            rules: vec![rule(m, false)],
        };
        assert!(!f.allows(b"B|1|drop"));
        assert!(f.allows(b"B|1|other"));
    }
}
