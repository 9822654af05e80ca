//! `tracebox report` on any bytes: the summary (text and JSON), the profile and the
//! events dump never panic, and reading the file in odd-sized pieces gives
//! the same report as reading it whole.

use std::io::Read;

use tracebox::report::{events, output, profile, summarize, walk};

/// Hands out the input a few bytes at a time.
struct Trickle<'a>(&'a [u8], usize);

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.1 = self.1 % 7 + 1;
        let n = self.1.min(buf.len()).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

pub fn run(data: &[u8]) {
    let (w, a) = summarize(data, 0, u64::MAX);
    let text = output::text(&w, &a, 5);
    let json = output::json(&w, &a);
    // The profile section (PerfSample packets), whole and in pieces.
    let (prof, _) = profile::Profile::scan(data);
    let (prof2, _) = profile::Profile::scan(Trickle(data, 0));
    let all = profile::Filter::default();
    assert_eq!(
        profile::text(&prof, &all, 5),
        profile::text(&prof2, &all, 5)
    );
    let (w2, a2) = summarize(Trickle(data, 0), 0, u64::MAX);
    assert_eq!(text, output::text(&w2, &a2, 5));
    assert_eq!(json, output::json(&w2, &a2));
    let mut p = events::Printer::default();
    let f = events::Filter {
        until: u64::MAX,
        ..Default::default()
    };
    walk(data, true, &mut |r, w| {
        let _ = p.line(r, w, &f);
    });
}
