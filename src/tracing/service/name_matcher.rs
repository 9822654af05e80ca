//! A small regular-expression matcher for producer name filters
//! (`producer_name_regex_filter`, `Trigger.producer_name_regex`).
//!
//! Always a FULL match (like `std::regex_match`). Supported syntax:
//! literals, `.`, classes `[abc]`, `[a-z0-9_]`, `[^...]`, escapes
//! `\.` `\\` `\d` `\w` `\s` (and `\` before any other char = that char),
//! groups `( )`, alternation `|`, quantifiers `*` `+` `?` (greedy) on any
//! atom, and a leading `^` / trailing `$` (no-ops under full match).
//! Not supported: `{m,n}`, backreferences, lookaround, flags. An
//! unsupported or malformed pattern never matches. Matching is a
//! backtracking search with a step budget, so a pathological pattern
//! (e.g. `(a*)*b`) gives "no match" instead of hanging the service.

#[derive(Debug, Clone)]
enum Atom {
    Char(char),
    Any,
    Class {
        ranges: Vec<(char, char)>,
        negated: bool,
    },
    Group(Box<Alt>),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Quant {
    One,
    ZeroOrOne,
    ZeroOrMore,
    OneOrMore,
}

type Seq = Vec<(Atom, Quant)>;

#[derive(Debug, Clone)]
struct Alt(Vec<Seq>);

/// A compiled pattern.
#[derive(Debug, Clone)]
pub struct NameMatcher {
    root: Alt,
}

const MAX_STEPS: usize = 200_000;

struct Parser<'a> {
    p: &'a [char],
    i: usize,
}

impl Parser<'_> {
    fn alt(&mut self, depth: usize) -> Option<Alt> {
        if depth > 32 {
            return None;
        }
        let mut seqs = vec![self.seq(depth)?];
        while self.p.get(self.i) == Some(&'|') {
            self.i += 1;
            seqs.push(self.seq(depth)?);
        }
        Some(Alt(seqs))
    }

    fn seq(&mut self, depth: usize) -> Option<Seq> {
        let mut seq = Seq::new();
        while let Some(&c) = self.p.get(self.i) {
            let atom = match c {
                '|' | ')' => break,
                '(' => {
                    self.i += 1;
                    let inner = self.alt(depth + 1)?;
                    if self.p.get(self.i) != Some(&')') {
                        return None;
                    }
                    Atom::Group(Box::new(inner))
                }
                '.' => Atom::Any,
                '[' => self.class()?,
                '\\' => {
                    self.i += 1;
                    escape(*self.p.get(self.i)?)
                }
                '*' | '+' | '?' | '{' | '}' | ']' => return None,
                c => Atom::Char(c),
            };
            self.i += 1;
            let quant = match self.p.get(self.i) {
                Some('*') => Quant::ZeroOrMore,
                Some('+') => Quant::OneOrMore,
                Some('?') => Quant::ZeroOrOne,
                _ => Quant::One,
            };
            if quant != Quant::One {
                self.i += 1;
            }
            seq.push((atom, quant));
        }
        Some(seq)
    }

    /// Parses `[...]`; leaves `i` on the closing bracket.
    fn class(&mut self) -> Option<Atom> {
        self.i += 1;
        let negated = self.p.get(self.i) == Some(&'^');
        if negated {
            self.i += 1;
        }
        let mut ranges = Vec::new();
        let mut first = true;
        loop {
            let c = *self.p.get(self.i)?;
            if c == ']' && !first {
                break;
            }
            first = false;
            let lo = if c == '\\' {
                self.i += 1;
                match escape(*self.p.get(self.i)?) {
                    Atom::Char(c) => c,
                    Atom::Class { ranges: r, .. } => {
                        ranges.extend(r);
                        self.i += 1;
                        continue;
                    }
                    _ => return None,
                }
            } else {
                c
            };
            if self.p.get(self.i + 1) == Some(&'-')
                && self.p.get(self.i + 2).is_some_and(|&c| c != ']')
            {
                let hi = self.p[self.i + 2];
                if hi < lo {
                    return None;
                }
                ranges.push((lo, hi));
                self.i += 3;
            } else {
                ranges.push((lo, lo));
                self.i += 1;
            }
        }
        Some(Atom::Class { ranges, negated })
    }
}

fn escape(c: char) -> Atom {
    let class = |r: &[(char, char)]| Atom::Class {
        ranges: r.to_vec(),
        negated: false,
    };
    match c {
        'd' => class(&[('0', '9')]),
        'w' => class(&[('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_')]),
        's' => class(&[(' ', ' '), ('\t', '\r')]),
        c => Atom::Char(c),
    }
}

impl NameMatcher {
    /// Compiles `pattern`; `None` if it uses unsupported or malformed syntax.
    pub fn new(pattern: &str) -> Option<NameMatcher> {
        let mut chars: Vec<char> = pattern.chars().collect();
        if chars.first() == Some(&'^') {
            chars.remove(0);
        }
        if chars.last() == Some(&'$') && !(chars.len() >= 2 && chars[chars.len() - 2] == '\\') {
            chars.pop();
        }
        let mut p = Parser { p: &chars, i: 0 };
        let root = p.alt(0)?;
        if p.i != chars.len() {
            return None;
        }
        Some(NameMatcher { root })
    }

    /// True if the whole of `text` matches.
    pub fn full_match(&self, text: &str) -> bool {
        let s: Vec<char> = text.chars().collect();
        let mut steps = 0usize;
        match_alt(&self.root, &s, 0, &mut steps, &mut |pos, _| pos == s.len())
    }
}

/// Convenience: compile and full-match; malformed patterns match nothing.
pub fn regex_full_match(pattern: &str, text: &str) -> bool {
    NameMatcher::new(pattern).is_some_and(|m| m.full_match(text))
}

type Cont<'c> = dyn FnMut(usize, &mut usize) -> bool + 'c;

fn match_alt(alt: &Alt, s: &[char], pos: usize, steps: &mut usize, k: &mut Cont) -> bool {
    alt.0.iter().any(|seq| match_seq(seq, s, pos, steps, k))
}

fn match_seq(
    seq: &[(Atom, Quant)],
    s: &[char],
    pos: usize,
    steps: &mut usize,
    k: &mut Cont,
) -> bool {
    *steps += 1;
    if *steps > MAX_STEPS {
        return false;
    }
    let Some(((atom, quant), rest)) = seq.split_first() else {
        return k(pos, steps);
    };
    let mut then_rest = |p: usize, st: &mut usize| match_seq(rest, s, p, st, k);
    match quant {
        Quant::One => match_atom(atom, s, pos, steps, &mut then_rest),
        Quant::ZeroOrOne => {
            match_atom(atom, s, pos, steps, &mut then_rest) || then_rest(pos, steps)
        }
        Quant::ZeroOrMore => match_star(atom, s, pos, steps, &mut then_rest),
        Quant::OneOrMore => match_atom(atom, s, pos, steps, &mut |p, st| {
            match_star(atom, s, p, st, &mut then_rest)
        }),
    }
}

/// Greedy `atom*`: each extra repetition must consume input.
fn match_star(atom: &Atom, s: &[char], pos: usize, steps: &mut usize, k: &mut Cont) -> bool {
    *steps += 1;
    if *steps > MAX_STEPS {
        return false;
    }
    let more = match_atom(atom, s, pos, steps, &mut |p, st| {
        p > pos && match_star(atom, s, p, st, &mut *k)
    });
    more || k(pos, steps)
}

fn match_atom(atom: &Atom, s: &[char], pos: usize, steps: &mut usize, k: &mut Cont) -> bool {
    match atom {
        Atom::Group(alt) => match_alt(alt, s, pos, steps, k),
        _ => {
            let Some(&c) = s.get(pos) else { return false };
            let ok = match atom {
                Atom::Char(x) => *x == c,
                Atom::Any => true,
                Atom::Class { ranges, negated } => {
                    ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
                }
                Atom::Group(_) => unreachable!(),
            };
            ok && k(pos + 1, steps)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::regex_full_match as m;

    #[test]
    fn literals_and_full_match() {
        assert!(m("com.foo", "com.foo"));
        assert!(m("com.foo", "comXfoo"));
        assert!(!m("com\\.foo", "comXfoo"));
        assert!(!m("foo", "foobar"));
        assert!(!m("bar", "foobar"));
        assert!(m("^foo$", "foo"));
    }

    #[test]
    fn quantifiers_classes_groups() {
        assert!(m("com\\.google\\..*", "com.google.chrome"));
        assert!(m("a+b*c?", "aaab"));
        assert!(!m("a+b*c?", "bc"));
        assert!(m("[a-c]+[^x]", "abcy"));
        assert!(!m("[a-c]+[^x]", "abcx"));
        assert!(m("(chrome|firefox)_[0-9]+", "firefox_12"));
        assert!(!m("(chrome|firefox)_[0-9]+", "safari_12"));
        assert!(m("\\w+\\d", "ab_c9"));
        assert!(m("(ab)*", ""));
        assert!(m("(ab)*", "ababab"));
        assert!(m("x(a|b)?y", "xy"));
    }

    #[test]
    fn malformed_or_unsupported_never_matches() {
        for p in ["(", "a)", "[a-", "*a", "a{2}", "[z-a]", "\\"] {
            assert!(!m(p, "a"), "{p}");
        }
    }

    #[test]
    fn pathological_pattern_terminates() {
        let text = "a".repeat(40);
        assert!(!m("(a*)*b", &text));
        assert!(!m("(a|a)*b", &text));
    }
}
