//! Parse errors with source positions and "did you mean" suggestions.

use std::fmt;

/// A text-format parse error. `Display` prints
/// `file:line:col error: message`, the source line and a `^~~` marker,
/// like Perfetto's own parser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PbtxError {
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in bytes.
    pub col: usize,
    /// The offending token as written (may be empty at end of input).
    pub token: String,
    pub message: String,
    /// The source line, filled in by the parser entry point.
    pub source_line: String,
}

impl PbtxError {
    pub(super) fn new(line: usize, col: usize, token: String, message: String) -> Self {
        PbtxError {
            file: String::new(),
            line,
            col,
            token,
            message,
            source_line: String::new(),
        }
    }

    /// Attaches the file name and the source line for display.
    pub(super) fn with_source(mut self, file: &str, text: &str) -> Self {
        self.file = file.to_string();
        self.source_line = text
            .lines()
            .nth(self.line.saturating_sub(1))
            .unwrap_or("")
            .into();
        self
    }
}

impl fmt::Display for PbtxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{} error: {}",
            self.file, self.line, self.col, self.message
        )?;
        if !self.source_line.is_empty() {
            let width = self
                .token
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .count()
                .max(1);
            let pad: String = self
                .source_line
                .bytes()
                .take(self.col - 1)
                .map(|b| if b == b'\t' { '\t' } else { ' ' })
                .collect();
            write!(f, "\n{}\n{pad}^{}", self.source_line, "~".repeat(width - 1))?;
        }
        Ok(())
    }
}

impl std::error::Error for PbtxError {}

/// Levenshtein distance, case-insensitive.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<u8> = a.bytes().map(|c| c.to_ascii_lowercase()).collect();
    let b: Vec<u8> = b.bytes().map(|c| c.to_ascii_lowercase()).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let sub = prev[j - 1] + (a[i - 1] != b[j - 1]) as usize;
            cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// The candidate closest to `wrong`, if it is close enough to be a typo.
pub fn suggest<'a>(wrong: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    if wrong.len() > 128 {
        return None;
    }
    let limit = (wrong.len() / 3).clamp(1, 3);
    candidates
        .map(|c| (edit_distance(wrong, c), c))
        .filter(|&(d, c)| d <= limit || (c.len() > 3 && (c.contains(wrong) || wrong.contains(c))))
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

/// `" Did you mean \"x\"?"` or nothing.
pub fn did_you_mean<'a>(wrong: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    suggest(wrong, candidates).map_or(String::new(), |s| format!(". Did you mean \"{s}\"?"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("Buffers", "buffers"), 0);
    }

    #[test]
    fn suggestions() {
        let names = ["buffers", "data_sources", "duration_ms"];
        assert_eq!(suggest("bufers", names.iter().copied()), Some("buffers"));
        assert_eq!(
            suggest("duration", names.iter().copied()),
            Some("duration_ms")
        );
        assert_eq!(
            suggest("data_source", names.iter().copied()),
            Some("data_sources")
        );
        assert_eq!(suggest("zzzzzz", names.iter().copied()), None);
        assert_eq!(did_you_mean("x", names.iter().copied()), "");
    }

    #[test]
    fn display_points_at_token() {
        let e = PbtxError::new(2, 3, "bufers".into(), "No field".into())
            .with_source("cfg.pbtx", "a: 1\n  bufers {\n");
        assert_eq!(
            e.to_string(),
            "cfg.pbtx:2:3 error: No field\n  bufers {\n  ^~~~~~"
        );
    }
}
