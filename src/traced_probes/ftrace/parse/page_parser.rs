//! Parser for one kernel ring-buffer page as read from
//! `per_cpu/cpuN/trace_pipe_raw`.
//!
//! Pure and allocation-free: records are handed to a [`PageSink`] as slices
//! of the page. Any layout error stops the page and is returned as a
//! [`ParseError`]; the events delivered before it stay valid.

use super::format::PageHeaderLayout;

/// Why a page (or the rest of it) was dropped. Values match Perfetto's
/// `FtraceParseStatus` so they can go straight into bundles and stats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ParseError {
    UnexpectedReadError = 2,
    PartialPageRead = 3,
    InvalidPageHeader = 4,
    ShortEventHeader = 5,
    NullPadding = 6,
    ShortPaddingLength = 7,
    InvalidPaddingLength = 8,
    ShortTimeExtend = 9,
    ShortTimeStamp = 10,
    ShortDataLength = 11,
    ZeroDataLength = 12,
    InvalidDataLength = 13,
    ShortEventId = 14,
    EndOverflow = 15,
    ShortCompactEvent = 16,
    InvalidEvent = 17,
}

impl ParseError {
    /// The `FtraceParseStatus` enum value.
    pub fn status(self) -> u32 {
        self as u32
    }
}

/// Event header `type_len` values with special meaning.
pub const TYPE_PADDING: u32 = 29;
pub const TYPE_TIME_EXTEND: u32 = 30;
pub const TYPE_TIME_STAMP: u32 = 31;

const DATA_SIZE_MASK: u32 = (1 << 27) - 1;
const MISSED_EVENTS_FLAG: u32 = 1 << 31;

/// Decoded page header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageHeader {
    /// Timestamp of the page; event deltas accumulate from here.
    pub timestamp: u64,
    /// Bytes of event data after the header.
    pub size: usize,
    /// The kernel dropped events before this page (RB_MISSED_EVENTS).
    pub lost_events: bool,
}

/// Receives the data records of a page, in order.
pub trait PageSink {
    /// `record` starts at the event's `common_type` and spans the whole
    /// record (it may include trailing alignment bytes). `event_id` is the
    /// `common_type` already read. Returning an error stops the page.
    fn on_event(&mut self, timestamp: u64, event_id: u16, record: &[u8]) -> Result<(), ParseError>;
}

/// What one page gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageSummary {
    pub header: PageHeader,
    /// Data records handed to the sink.
    pub events: u32,
    /// Timestamp of the last data record (0 if none).
    pub last_event_timestamp: u64,
    /// Set when the page was cut short by a layout error.
    pub error: Option<ParseError>,
}

#[inline]
fn read_u32(buf: &[u8], at: usize) -> Option<u32> {
    let b = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[inline]
fn read_u64(buf: &[u8], at: usize) -> Option<u64> {
    let b = buf.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(b.try_into().ok()?))
}

/// Decodes the page header. Only the low 32 bits of `commit` matter: bits
/// 0-26 data size, bit 31 lost events.
pub fn parse_page_header(page: &[u8], layout: &PageHeaderLayout) -> Result<PageHeader, ParseError> {
    let timestamp =
        read_u64(page, layout.timestamp_offset as usize).ok_or(ParseError::InvalidPageHeader)?;
    let commit =
        read_u32(page, layout.commit_offset as usize).ok_or(ParseError::InvalidPageHeader)?;
    let size = (commit & DATA_SIZE_MASK) as usize;
    let data_end = layout.data_offset as usize + size;
    if size == 0 || data_end > page.len() {
        return Err(ParseError::InvalidPageHeader);
    }
    Ok(PageHeader {
        timestamp,
        size,
        lost_events: commit & MISSED_EVENTS_FLAG != 0,
    })
}

/// Parses one page. `Err` only when the page header itself is unusable;
/// later errors are in [`PageSummary::error`].
pub fn parse_page<S: PageSink + ?Sized>(
    page: &[u8],
    layout: &PageHeaderLayout,
    sink: &mut S,
) -> Result<PageSummary, ParseError> {
    let header = parse_page_header(page, layout)?;
    let start = layout.data_offset as usize;
    let data = &page[start..start + header.size];
    let mut summary = PageSummary {
        header,
        events: 0,
        last_event_timestamp: 0,
        error: None,
    };
    if let Err(e) = parse_payload(data, header.timestamp, sink, &mut summary) {
        summary.error = Some(e);
    }
    Ok(summary)
}

fn parse_payload<S: PageSink + ?Sized>(
    data: &[u8],
    mut timestamp: u64,
    sink: &mut S,
    summary: &mut PageSummary,
) -> Result<(), ParseError> {
    let end = data.len();
    let mut pos = 0usize;
    while pos < end {
        let word = read_u32(data, pos).ok_or(ParseError::ShortEventHeader)?;
        pos += 4;
        let type_len = word & 0x1f;
        let time_delta = (word >> 5) as u64;
        timestamp = timestamp.wrapping_add(time_delta);
        match type_len {
            TYPE_PADDING => {
                if time_delta == 0 {
                    return Err(ParseError::NullPadding);
                }
                let len = read_u32(data, pos).ok_or(ParseError::ShortPaddingLength)? as usize;
                if len < 4 {
                    return Err(ParseError::InvalidPaddingLength);
                }
                // `len` counts the length word itself.
                pos = pos.saturating_add(len);
            }
            TYPE_TIME_EXTEND => {
                let ext = read_u32(data, pos).ok_or(ParseError::ShortTimeExtend)?;
                pos += 4;
                timestamp = timestamp.wrapping_add((ext as u64) << 27);
            }
            TYPE_TIME_STAMP => {
                let ext = read_u32(data, pos).ok_or(ParseError::ShortTimeStamp)?;
                pos += 4;
                timestamp = time_delta + ((ext as u64) << 27);
            }
            _ => {
                let size = if type_len == 0 {
                    let len = read_u32(data, pos).ok_or(ParseError::ShortDataLength)?;
                    pos += 4;
                    match len {
                        0 => return Err(ParseError::ZeroDataLength),
                        1..=3 => return Err(ParseError::InvalidDataLength),
                        n => n as usize - 4,
                    }
                } else {
                    4 * type_len as usize
                };
                let next = pos.checked_add(size).filter(|&n| n <= end);
                let next = next.ok_or(ParseError::EndOverflow)?;
                let record = &data[pos..next];
                if record.len() < 2 {
                    return Err(ParseError::ShortEventId);
                }
                let event_id = u16::from_le_bytes([record[0], record[1]]);
                sink.on_event(timestamp, event_id, record)?;
                summary.events += 1;
                summary.last_event_timestamp = timestamp;
                pos = next;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Record = (u64, u16, Vec<u8>);
    type Build = Box<dyn Fn(&mut Page)>;

    /// Collects (timestamp, id, record) for assertions.
    #[derive(Default)]
    struct Collect(Vec<Record>);
    impl PageSink for Collect {
        fn on_event(&mut self, ts: u64, id: u16, record: &[u8]) -> Result<(), ParseError> {
            self.0.push((ts, id, record.to_vec()));
            Ok(())
        }
    }

    /// Builds a page with the 64-bit layout.
    struct Page {
        data: Vec<u8>,
    }
    impl Page {
        fn new() -> Page {
            Page { data: Vec::new() }
        }
        fn word(&mut self, type_len: u32, delta: u32) -> &mut Self {
            self.u32((delta << 5) | type_len)
        }
        fn u32(&mut self, v: u32) -> &mut Self {
            self.data.extend_from_slice(&v.to_le_bytes());
            self
        }
        /// A data record with `type_len` = payload words.
        fn small(&mut self, delta: u32, id: u16, words: usize) -> &mut Self {
            self.word(words as u32, delta);
            let mut rec = vec![0u8; 4 * words];
            rec[..2].copy_from_slice(&id.to_le_bytes());
            self.data.extend_from_slice(&rec);
            self
        }
        fn finish(&self, ts: u64, page_size: usize, flags: u32) -> Vec<u8> {
            let mut page = vec![0u8; page_size];
            page[..8].copy_from_slice(&ts.to_le_bytes());
            let commit = self.data.len() as u64 | flags as u64;
            page[8..16].copy_from_slice(&commit.to_le_bytes());
            page[16..16 + self.data.len()].copy_from_slice(&self.data);
            page
        }
    }

    const L: PageHeaderLayout = PageHeaderLayout::DEFAULT_64;

    fn run(page: &[u8]) -> (Result<PageSummary, ParseError>, Vec<Record>) {
        let mut c = Collect::default();
        let r = parse_page(page, &L, &mut c);
        (r, c.0)
    }

    #[test]
    fn timestamps_and_record_kinds() {
        let mut p = Page::new();
        p.small(10, 7, 2); // ts 1010
        p.word(TYPE_TIME_EXTEND, 5).u32(1); // +5 + (1<<27)
        p.small(0, 8, 1);
        p.word(TYPE_PADDING, 1).u32(12).u32(0).u32(0); // +1, skips 8 more bytes
                                                       // A long record: type_len 0 and an explicit length (incl. itself).
        p.word(0, 3).u32(4 + 8).u32(9).u32(0xdead);
        p.word(TYPE_TIME_STAMP, 100).u32(2); // absolute: 100 + (2<<27)
        p.small(1, 10, 1);
        let page = p.finish(1000, 4096, 0);
        let (r, ev) = run(&page);
        let s = r.unwrap();
        assert_eq!(s.error, None);
        assert!(!s.header.lost_events);
        let ts: Vec<_> = ev.iter().map(|e| (e.0, e.1, e.2.len())).collect();
        let t2 = 1010 + 5 + (1 << 27);
        assert_eq!(
            ts,
            [
                (1010, 7, 8),
                (t2, 8, 4),
                (t2 + 1 + 3, 9, 8),
                (101 + (2 << 27), 10, 4)
            ]
        );
        assert_eq!(s.events, 4);
        assert_eq!(s.last_event_timestamp, 101 + (2 << 27));
    }

    #[test]
    fn lost_events_flag_and_big_pages() {
        for size in [4096, 16384, 65536] {
            let mut p = Page::new();
            for i in 0..(size / 16) - 2 {
                p.small(1, i as u16, 2);
            }
            let page = p.finish(0, size, 1 << 31);
            let (r, ev) = run(&page);
            let s = r.unwrap();
            assert!(s.header.lost_events);
            assert_eq!(s.error, None);
            assert_eq!(ev.len(), size / 16 - 2);
        }
    }

    #[test]
    fn errors_stop_the_page_keep_earlier_events() {
        let cases: Vec<(Build, ParseError)> = vec![
            (
                Box::new(|p| {
                    p.word(TYPE_PADDING, 0).u32(8);
                }),
                ParseError::NullPadding,
            ),
            (
                Box::new(|p| {
                    p.word(TYPE_PADDING, 1);
                }),
                ParseError::ShortPaddingLength,
            ),
            (
                Box::new(|p| {
                    p.word(TYPE_PADDING, 1).u32(3);
                }),
                ParseError::InvalidPaddingLength,
            ),
            (
                Box::new(|p| {
                    p.word(TYPE_TIME_EXTEND, 1);
                }),
                ParseError::ShortTimeExtend,
            ),
            (
                Box::new(|p| {
                    p.word(TYPE_TIME_STAMP, 1);
                }),
                ParseError::ShortTimeStamp,
            ),
            (
                Box::new(|p| {
                    p.word(0, 1);
                }),
                ParseError::ShortDataLength,
            ),
            (
                Box::new(|p| {
                    p.word(0, 1).u32(0);
                }),
                ParseError::ZeroDataLength,
            ),
            (
                Box::new(|p| {
                    p.word(0, 1).u32(2);
                }),
                ParseError::InvalidDataLength,
            ),
            (
                Box::new(|p| {
                    p.word(0, 1).u32(5).u32(0);
                }),
                ParseError::ShortEventId,
            ),
            (
                Box::new(|p| {
                    p.word(3, 1).u32(0);
                }),
                ParseError::EndOverflow,
            ),
            (
                Box::new(|p| {
                    p.word(0, 1).u32(u32::MAX);
                }),
                ParseError::EndOverflow,
            ),
            (
                Box::new(|p| {
                    p.data.extend_from_slice(&[1, 2]);
                }),
                ParseError::ShortEventHeader,
            ),
        ];
        for (build, want) in cases {
            let mut p = Page::new();
            p.small(1, 42, 1);
            build(&mut p);
            let (r, ev) = run(&p.finish(0, 4096, 0));
            assert_eq!(r.unwrap().error, Some(want));
            assert_eq!(ev.len(), 1, "{want:?}");
        }
    }

    #[test]
    fn bad_headers() {
        let page = Page::new().finish(0, 4096, 0);
        assert_eq!(run(&page).0, Err(ParseError::InvalidPageHeader)); // size 0
        let mut page = Page::new().finish(0, 4096, 0);
        page[8..12].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(run(&page).0, Err(ParseError::InvalidPageHeader));
        assert_eq!(run(&page[..10]).0, Err(ParseError::InvalidPageHeader));
        assert_eq!(run(&[]).0, Err(ParseError::InvalidPageHeader));
    }

    #[test]
    fn sink_error_stops_page() {
        struct Refuse(u32);
        impl PageSink for Refuse {
            fn on_event(&mut self, _: u64, _: u16, _: &[u8]) -> Result<(), ParseError> {
                self.0 += 1;
                Err(ParseError::InvalidEvent)
            }
        }
        let mut p = Page::new();
        p.small(1, 1, 1).small(1, 1, 1);
        let mut sink = Refuse(0);
        let s = parse_page(&p.finish(0, 4096, 0), &L, &mut sink).unwrap();
        assert_eq!(
            (s.error, s.events, sink.0),
            (Some(ParseError::InvalidEvent), 0, 1)
        );
    }

    #[test]
    fn commit_of_32_bit_kernel() {
        let layout = PageHeaderLayout::DEFAULT_32;
        let mut page = vec![0u8; 4096];
        page[8..12].copy_from_slice(&12u32.to_le_bytes());
        page[12..16].copy_from_slice(&(2u32 | (3 << 5)).to_le_bytes()); // 2 words, delta 3
        page[16..18].copy_from_slice(&77u16.to_le_bytes());
        let mut c = Collect::default();
        let s = parse_page(&page, &layout, &mut c).unwrap();
        assert_eq!(s.error, None);
        assert_eq!((c.0[0].0, c.0[0].1), (3, 77));
    }
}
