//! Tokenizer for protobuf text format.
//!
//! Produces identifiers, numbers (raw text, classified later against the
//! field type), strings (escapes already decoded) and punctuation, each with
//! its 1-based line and column. `#` starts a comment up to end of line.

use super::error::PbtxError;

#[derive(Debug, Clone, PartialEq)]
pub enum TokKind {
    /// `[A-Za-z_][A-Za-z0-9_]*`
    Ident,
    /// Anything starting with a digit, `.` or `-`: `12`, `-0x1f`, `1.5e3`,
    /// `-inf`. Validated by the consumer.
    Number,
    /// A quoted string; the decoded bytes are in `Token::bytes`.
    Str,
    /// One of `: { } < > [ ] , ;`.
    Punct(u8),
    Eof,
}

#[derive(Debug, Clone)]
pub struct Token {
    pub kind: TokKind,
    /// Source text of the token (quotes included for strings).
    pub text: String,
    /// Decoded value of a string token.
    pub bytes: Vec<u8>,
    pub line: usize,
    pub col: usize,
}

pub struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    line: usize,
    line_start: usize,
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_'
}

fn is_ident_body(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        Lexer {
            src: src.as_bytes(),
            pos: 0,
            line: 1,
            line_start: 0,
        }
    }

    fn col(&self, at: usize) -> usize {
        at - self.line_start + 1
    }

    fn text(&self, start: usize, end: usize) -> String {
        String::from_utf8_lossy(&self.src[start..end]).into_owned()
    }

    fn error_at(&self, start: usize, end: usize, msg: String) -> PbtxError {
        PbtxError::new(self.line, self.col(start), self.text(start, end), msg)
    }

    fn skip_space_and_comments(&mut self) {
        while self.pos < self.src.len() {
            let c = self.src[self.pos];
            if c == b'\n' {
                self.pos += 1;
                self.line += 1;
                self.line_start = self.pos;
            } else if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if c == b'#' {
                while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
    }

    pub fn next_token(&mut self) -> Result<Token, PbtxError> {
        self.skip_space_and_comments();
        let start = self.pos;
        let (line, col) = (self.line, self.col(start));
        let tok = |kind, text: String, bytes| Token {
            kind,
            text,
            bytes,
            line,
            col,
        };
        let Some(&c) = self.src.get(start) else {
            return Ok(tok(TokKind::Eof, String::new(), Vec::new()));
        };
        if is_ident_start(c) {
            while self.pos < self.src.len() && is_ident_body(self.src[self.pos]) {
                self.pos += 1;
            }
            return Ok(tok(TokKind::Ident, self.text(start, self.pos), Vec::new()));
        }
        if c.is_ascii_digit() || c == b'.' || c == b'-' || c == b'+' {
            self.pos += 1;
            while self.pos < self.src.len() {
                let d = self.src[self.pos];
                let prev = self.src[self.pos - 1];
                let exp_sign = (d == b'-' || d == b'+')
                    && (prev == b'e' || prev == b'E')
                    && !self.src[start..self.pos]
                        .iter()
                        .any(|&b| b == b'x' || b == b'X');
                if is_ident_body(d) || d == b'.' || exp_sign {
                    self.pos += 1;
                } else {
                    break;
                }
            }
            return Ok(tok(TokKind::Number, self.text(start, self.pos), Vec::new()));
        }
        if c == b'"' || c == b'\'' {
            let bytes = self.lex_string(c)?;
            return Ok(tok(TokKind::Str, self.text(start, self.pos), bytes));
        }
        if b":{}<>[],;".contains(&c) {
            self.pos += 1;
            return Ok(tok(
                TokKind::Punct(c),
                self.text(start, self.pos),
                Vec::new(),
            ));
        }
        // Report the whole (possibly multi-byte) character.
        let len = std::str::from_utf8(&self.src[start..])
            .ok()
            .and_then(|s| s.chars().next())
            .map_or(1, char::len_utf8);
        let ch = self.text(start, start + len);
        Err(self.error_at(start, start + len, format!("Unexpected character '{ch}'")))
    }

    /// Reads a quoted string starting at `self.pos` and decodes C escapes:
    /// `\n \t \r \a \b \f \v \\ \' \" \?`, `\ooo` (1-3 octal digits, <= 0377)
    /// and `\xHH` (1-2 hex digits).
    fn lex_string(&mut self, quote: u8) -> Result<Vec<u8>, PbtxError> {
        let start = self.pos;
        let (line, line_start) = (self.line, self.line_start);
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.src.get(self.pos) else {
                self.line = line;
                self.line_start = line_start;
                return Err(self.error_at(start, self.pos, "Unterminated string".into()));
            };
            self.pos += 1;
            match c {
                b'\n' => {
                    // Raw newlines are accepted (Perfetto's parser does too).
                    self.line += 1;
                    self.line_start = self.pos;
                    out.push(c);
                }
                b'\\' => {
                    let esc_start = self.pos - 1;
                    let Some(&e) = self.src.get(self.pos) else {
                        continue;
                    };
                    self.pos += 1;
                    let simple = match e {
                        b'n' => Some(b'\n'),
                        b't' => Some(b'\t'),
                        b'r' => Some(b'\r'),
                        b'a' => Some(0x07),
                        b'b' => Some(0x08),
                        b'f' => Some(0x0c),
                        b'v' => Some(0x0b),
                        b'\\' | b'\'' | b'"' | b'?' => Some(e),
                        _ => None,
                    };
                    if let Some(b) = simple {
                        out.push(b);
                    } else if (b'0'..=b'7').contains(&e) {
                        let mut v = (e - b'0') as u32;
                        for _ in 0..2 {
                            match self.src.get(self.pos) {
                                Some(&d) if (b'0'..=b'7').contains(&d) => {
                                    v = v * 8 + (d - b'0') as u32;
                                    self.pos += 1;
                                }
                                _ => break,
                            }
                        }
                        if v > 0xff {
                            return Err(self.error_at(
                                esc_start,
                                self.pos,
                                "Octal escape out of range (max \\377)".into(),
                            ));
                        }
                        out.push(v as u8);
                    } else if e == b'x' || e == b'X' {
                        let mut v = 0u32;
                        let mut n = 0;
                        while n < 2 {
                            match self
                                .src
                                .get(self.pos)
                                .and_then(|&d| (d as char).to_digit(16))
                            {
                                Some(d) => {
                                    v = v * 16 + d;
                                    self.pos += 1;
                                    n += 1;
                                }
                                None => break,
                            }
                        }
                        if n == 0 {
                            return Err(self.error_at(
                                esc_start,
                                self.pos,
                                "\\x escape needs hex digits".into(),
                            ));
                        }
                        out.push(v as u8);
                    } else {
                        let end = (self.pos).min(self.src.len());
                        return Err(self.error_at(esc_start, end, "Unknown string escape".into()));
                    }
                }
                _ if c == quote => return Ok(out),
                _ => out.push(c),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lex_all(s: &str) -> Vec<Token> {
        let mut l = Lexer::new(s);
        let mut v = Vec::new();
        loop {
            let t = l.next_token().unwrap();
            if t.kind == TokKind::Eof {
                return v;
            }
            v.push(t);
        }
    }

    #[test]
    fn tokens_with_positions() {
        let t = lex_all("a: 1 # c\n  b { x: -0x1F }");
        let kinds: Vec<_> = t.iter().map(|t| (t.text.as_str(), t.line, t.col)).collect();
        assert_eq!(
            kinds,
            vec![
                ("a", 1, 1),
                (":", 1, 2),
                ("1", 1, 4),
                ("b", 2, 3),
                ("{", 2, 5),
                ("x", 2, 7),
                (":", 2, 8),
                ("-0x1F", 2, 10),
                ("}", 2, 16)
            ]
        );
        assert_eq!(t[7].kind, TokKind::Number);
    }

    #[test]
    fn numbers_with_exponents() {
        let t = lex_all("1.5e-3 -2E+4 0x1e-5");
        let texts: Vec<_> = t.iter().map(|t| t.text.as_str()).collect();
        // After a hex prefix, '-' is not an exponent sign.
        assert_eq!(texts, vec!["1.5e-3", "-2E+4", "0x1e", "-5"]);
    }

    #[test]
    fn string_escapes() {
        let t = lex_all(r#""a\n\t\\\"\'\x41\101\0\?" 'it''s'"#);
        assert_eq!(t[0].bytes, b"a\n\t\\\"'AA\0?");
        assert_eq!(t[1].bytes, b"it");
        assert_eq!(t[2].bytes, b"s");
    }

    #[test]
    fn string_errors() {
        let mut l = Lexer::new("x: \"abc");
        l.next_token().unwrap();
        l.next_token().unwrap();
        let e = l.next_token().unwrap_err();
        assert!(e.message.contains("Unterminated"), "{e}");
        assert_eq!((e.line, e.col), (1, 4));
        let e = Lexer::new(r#""\q""#).next_token().unwrap_err();
        assert!(e.message.contains("Unknown string escape"));
        let e = Lexer::new(r#""\400""#).next_token().unwrap_err();
        assert!(e.message.contains("Octal"));
        let e = Lexer::new(r#""\xZ""#).next_token().unwrap_err();
        assert!(e.message.contains("hex"));
        let e = Lexer::new("  @").next_token().unwrap_err();
        assert_eq!((e.col, e.token.as_str()), (3, "@"));
        let e = Lexer::new("é").next_token().unwrap_err();
        assert_eq!(e.token, "é");
    }
}
