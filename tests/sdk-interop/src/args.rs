//! A tiny `--flag value` parser; enough for test tools, no dependencies.

use std::str::FromStr;

pub struct Args {
    rest: Vec<String>,
    usage: &'static str,
}

impl Args {
    pub fn from_env(usage: &'static str) -> Self {
        let rest: Vec<String> = std::env::args().skip(1).collect();
        if rest.iter().any(|a| a == "-h" || a == "--help") {
            println!("usage: {usage}");
            std::process::exit(0);
        }
        Args { rest, usage }
    }

    pub fn usage_error(&self, msg: &str) -> ! {
        eprintln!("error: {msg}\nusage: {}", self.usage);
        std::process::exit(2);
    }

    /// Removes `name VALUE` (or `name=VALUE`) and returns VALUE.
    pub fn opt_str(&mut self, name: &str) -> Option<String> {
        let prefix = format!("{name}=");
        let pos = self
            .rest
            .iter()
            .position(|a| a == name || a.starts_with(&prefix))?;
        let arg = self.rest.remove(pos);
        if let Some(v) = arg.strip_prefix(&prefix) {
            return Some(v.to_string());
        }
        if pos >= self.rest.len() {
            self.usage_error(&format!("{name} needs a value"));
        }
        Some(self.rest.remove(pos))
    }

    pub fn opt_parse<T: FromStr>(&mut self, name: &str) -> Option<T> {
        let v = self.opt_str(name)?;
        match v.parse() {
            Ok(x) => Some(x),
            Err(_) => self.usage_error(&format!("bad value for {name}: {v:?}")),
        }
    }

    pub fn flag(&mut self, name: &str) -> bool {
        match self.rest.iter().position(|a| a == name) {
            Some(pos) => {
                self.rest.remove(pos);
                true
            }
            None => false,
        }
    }

    /// Fails on anything left over.
    pub fn finish(&self) {
        if let Some(a) = self.rest.first() {
            self.usage_error(&format!("unexpected argument {a:?}"));
        }
    }
}

/// Parses sizes like `100`, `4k`, `4KiB`, `1m`.
pub fn parse_size(s: &str) -> Option<usize> {
    let lower = s.trim().to_ascii_lowercase();
    let (num, mult) = if let Some(n) = lower.strip_suffix("kib").or(lower.strip_suffix('k')) {
        (n, 1024)
    } else if let Some(n) = lower.strip_suffix("mib").or(lower.strip_suffix('m')) {
        (n, 1024 * 1024)
    } else {
        (lower.strip_suffix('b').unwrap_or(&lower), 1)
    };
    num.trim().parse::<usize>().ok()?.checked_mul(mult)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16"), Some(16));
        assert_eq!(parse_size("100B"), Some(100));
        assert_eq!(parse_size("4KiB"), Some(4096));
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("2m"), Some(2 << 20));
        assert_eq!(parse_size("x"), None);
    }
}
