//! Streams the packets of a trace file (`Trace.packet`, field 1) from any
//! reader with one reusable buffer: memory is the largest packet, never the
//! trace. A truncated or corrupted file stops the walk with the offset it
//! got to.

use std::io::Read;

use crate::protozero::commit_append::PAD_FIELD;
use crate::protozero::decode::read_varint;

/// A packet bigger than this is treated as corruption (upstream's service
/// never writes packets near this size).
pub const MAX_PACKET: usize = 64 << 20;

pub struct PacketReader<R: Read> {
    src: R,
    buf: Vec<u8>,
    /// Valid bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    eof: bool,
    /// File offset of `buf[start]`.
    pub offset: u64,
    /// Why the walk stopped early, if it did.
    pub error: Option<String>,
    /// Top-level fields other than packets (skipped).
    pub unknown_fields: u64,
}

impl<R: Read> PacketReader<R> {
    pub fn new(src: R) -> Self {
        PacketReader {
            src,
            buf: vec![0; 1 << 20],
            start: 0,
            end: 0,
            eof: false,
            offset: 0,
            error: None,
            unknown_fields: 0,
        }
    }

    /// Makes at least `n` bytes available from `start`; false at the end.
    fn fill(&mut self, n: usize) -> bool {
        while self.end - self.start < n {
            if self.eof {
                return false;
            }
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() < n {
                self.buf.resize(n, 0);
            }
            match self.src.read(&mut self.buf[self.end..]) {
                Ok(0) => self.eof = true,
                Ok(k) => self.end += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.error = Some(format!("read error: {e}"));
                    self.eof = true;
                }
            }
        }
        true
    }

    fn fail(&mut self, what: &str) -> Option<&[u8]> {
        if self.error.is_none() {
            self.error = Some(format!("{what} at byte {}", self.offset));
        }
        None
    }

    /// The next packet's bytes, or `None` at the end (clean or not: see
    /// `error`).
    pub fn next_packet(&mut self) -> Option<&[u8]> {
        loop {
            self.fill(20);
            if self.start == self.end {
                return None;
            }
            let avail = &self.buf[self.start..self.end];
            let Some((tag, n)) = read_varint(avail) else {
                return self.fail("truncated field header");
            };
            let (len, m) = match tag & 7 {
                2 => match read_varint(&avail[n..]) {
                    Some((len, m)) => (len, m),
                    None => return self.fail("truncated field header"),
                },
                0 => match read_varint(&avail[n..]) {
                    Some((_, m)) => (0, m),
                    None => return self.fail("truncated field header"),
                },
                1 => (8, 0),
                5 => (4, 0),
                _ => return self.fail("corrupted field header"),
            };
            if tag >> 3 == 0 || len > MAX_PACKET as u64 {
                return self.fail("corrupted field header");
            }
            let head = n + m;
            let total = head + len as usize;
            if !self.fill(total) {
                return self.fail("truncated packet");
            }
            let at = self.start;
            self.start += total;
            self.offset += total as u64;
            if tag == (1 << 3 | 2) {
                return Some(&self.buf[at + head..at + total]);
            }
            // traced's padding (see protozero::commit_append) is no anomaly.
            if tag >> 3 != u64::from(PAD_FIELD) {
                self.unknown_fields += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_packets_and_stops_at_truncation() {
        let mut t = vec![0x0a, 2, 0x08, 1, 0x10, 5, 0x0a, 1, 0x00, 0x0a, 9, 1];
        let mut r = PacketReader::new(&t[..]);
        assert_eq!(r.next_packet(), Some(&[0x08u8, 1][..]));
        assert_eq!(r.next_packet(), Some(&[0u8][..]));
        assert_eq!(r.next_packet(), None);
        assert_eq!(r.unknown_fields, 1);
        assert_eq!(r.error.as_deref(), Some("truncated packet at byte 9"));
        t.truncate(9);
        let mut r = PacketReader::new(&t[..]);
        while r.next_packet().is_some() {}
        assert_eq!(r.error, None);
        // traced's padding, a varint and a length-delimited one, is skipped
        // and not counted.
        let t = [0x78, 0x80, 0, 0x7a, 2, 0, 0, 0x0a, 1, 7];
        let mut r = PacketReader::new(&t[..]);
        assert_eq!(r.next_packet(), Some(&[7u8][..]));
        assert_eq!(r.next_packet(), None);
        assert_eq!((r.unknown_fields, r.error.as_deref()), (0, None));
    }
}
