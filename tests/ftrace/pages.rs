//! Pages captured from this machine's kernel (6.18, x86_64) by
//! `tests/data/ftrace-pages/capture.py`: a tracefs instance with
//! sched_switch enabled, 60 trace_marker writes pinned to cpu 0, then
//! every page read from per_cpu/cpuN/trace_pipe_raw. The capture's stats
//! said cpu0 entries=115, cpu1 entries=14, no overruns.

use tracebox::traced_probes::ftrace::parse::format::{
    parse_format, parse_header_page, EventFormat,
};
use tracebox::traced_probes::ftrace::parse::page_parser::{parse_page, PageSink, ParseError};

const CPU0: &[u8] = include_bytes!("../data/ftrace-pages/cpu0.pages");
const CPU1: &[u8] = include_bytes!("../data/ftrace-pages/cpu1.pages");
const MARKERS: &str = include_str!("../data/ftrace-pages/markers.txt");
const PRINT: &str = include_str!("../data/ftrace-pages/print.format");
const SWITCH: &str = include_str!("../data/ftrace-pages/sched_switch.format");
const HEADER_PAGE: &str = include_str!("../data/ftrace-pages/header_page");

struct Decode {
    print: EventFormat,
    switch: EventFormat,
    markers: Vec<String>,
    switches: Vec<(i32, i32)>,
    timestamps: Vec<u64>,
}

fn cstr(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap()
}

impl PageSink for Decode {
    fn on_event(&mut self, ts: u64, id: u16, rec: &[u8]) -> Result<(), ParseError> {
        self.timestamps.push(ts);
        if id as u32 == self.print.id {
            let buf = self.print.field("buf").unwrap();
            let text = cstr(&rec[buf.offset as usize..]);
            self.markers.push(String::from_utf8(text.to_vec()).unwrap());
        } else if id as u32 == self.switch.id {
            let int = |name: &str| {
                let f = self.switch.field(name).unwrap();
                let o = f.offset as usize;
                i32::from_le_bytes(rec[o..o + 4].try_into().unwrap())
            };
            self.switches.push((int("prev_pid"), int("next_pid")));
        } else {
            return Err(ParseError::InvalidEvent);
        }
        Ok(())
    }
}

fn decode(pages: &[u8]) -> (Decode, usize) {
    let layout = parse_header_page(HEADER_PAGE).unwrap();
    let mut d = Decode {
        print: parse_format(PRINT).unwrap(),
        switch: parse_format(SWITCH).unwrap(),
        markers: vec![],
        switches: vec![],
        timestamps: vec![],
    };
    let mut n = 0;
    for page in pages.chunks(layout.page_size) {
        let s = parse_page(page, &layout, &mut d).unwrap();
        assert_eq!(s.error, None);
        assert!(!s.header.lost_events);
        assert_eq!(s.last_event_timestamp, *d.timestamps.last().unwrap());
        n += s.events as usize;
    }
    (d, n)
}

#[test]
fn captured_cpu0_pages() {
    let (d, n) = decode(CPU0);
    assert_eq!(n, 115);
    let want: Vec<String> = MARKERS.lines().map(|m| format!("{m}\n")).collect();
    assert_eq!(want.len(), 60);
    assert_eq!(d.markers, want);
    assert_eq!(d.switches.len(), 55);
    assert!(d.timestamps.windows(2).all(|w| w[0] <= w[1]));
    // Long markers (> 112 bytes) use type_len 0 records with a length word.
    assert!(d.markers.iter().filter(|m| m.len() > 112).count() == 6);
    assert!(d
        .switches
        .iter()
        .all(|&(prev, next)| prev >= 0 && next >= 0));
}

#[test]
fn captured_cpu1_pages() {
    let (d, n) = decode(CPU1);
    assert_eq!(n, 14);
    assert!(d.markers.is_empty());
    assert_eq!(d.switches.len(), 14);
    assert!(d.timestamps.windows(2).all(|w| w[0] < w[1]));
    // In this capture every switch on cpu 1 went to idle (pid 0).
    assert!(d
        .switches
        .iter()
        .all(|&(prev, next)| prev >= 0 && next == 0));
}
