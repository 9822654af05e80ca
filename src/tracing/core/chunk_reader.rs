//! Splits a chunk payload into its fragments (FACTS c.5), trusting nothing.
//!
//! A payload is `packet_count` fragments, each `[varint size][size bytes]`.
//! The size varint is 1..=4 bytes (the writer back-fills a 4-byte redundant
//! varint, or rewinds to one byte for short packets). The special size
//! [`PACKET_SIZE_DROP_PACKET`] marks a packet the writer abandoned; nothing
//! after it in the chunk is meaningful. Bytes after the last counted
//! fragment are unused tail.

use super::smb_abi::PACKET_SIZE_DROP_PACKET;

/// Longest size varint a reader accepts.
const MAX_SIZE_VARINT_LEN: usize = 4;

/// One fragment of a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fragment<'a> {
    /// Fragment bytes (may be empty: an empty packet, skipped by readers).
    Data(&'a [u8]),
    /// The writer aborted this packet; the reader drops the packet it
    /// belongs to and counts a `trace_writer_packet_loss`.
    DropPacket,
}

/// A malformed payload (an ABI violation by the producer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragmentError {
    /// The size varint is unterminated within 4 bytes or the payload end.
    BadSizeVarint { offset: usize },
    /// The fragment would extend past the payload.
    SizeOutOfBounds { offset: usize, size: u32 },
    /// The header counts more fragments than the payload holds.
    MissingFragment { index: u16 },
}

/// Iterates over the fragments of one chunk payload. After an error or a
/// [`Fragment::DropPacket`] the iterator ends.
#[derive(Debug, Clone)]
pub struct FragmentIter<'a> {
    payload: &'a [u8],
    pos: usize,
    index: u16,
    count: u16,
    done: bool,
}

impl<'a> FragmentIter<'a> {
    /// `packet_count_untrusted` is the header's count (10 bits).
    pub fn new(payload: &'a [u8], packet_count_untrusted: u16) -> Self {
        FragmentIter {
            payload,
            pos: 0,
            index: 0,
            count: packet_count_untrusted,
            done: false,
        }
    }

    /// Offset of the next fragment's size field within the payload.
    pub fn position(&self) -> usize {
        self.pos
    }
}

/// Parses a varint of at most 4 bytes from the start of `buf`.
/// Returns `(value, bytes used)`.
pub fn parse_size_varint(buf: &[u8]) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for (i, &b) in buf.iter().take(MAX_SIZE_VARINT_LEN).enumerate() {
        value |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

impl<'a> Iterator for FragmentIter<'a> {
    type Item = Result<Fragment<'a>, FragmentError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.index >= self.count {
            return None;
        }
        let offset = self.pos;
        let rest = self.payload.get(offset..).unwrap_or(&[]);
        if rest.is_empty() {
            self.done = true;
            return Some(Err(FragmentError::MissingFragment { index: self.index }));
        }
        let Some((size, used)) = parse_size_varint(rest) else {
            self.done = true;
            return Some(Err(FragmentError::BadSizeVarint { offset }));
        };
        if size == PACKET_SIZE_DROP_PACKET {
            self.done = true;
            return Some(Ok(Fragment::DropPacket));
        }
        let body = &rest[used..];
        if size as usize > body.len() {
            self.done = true;
            return Some(Err(FragmentError::SizeOutOfBounds { offset, size }));
        }
        self.pos = offset + used + size as usize;
        self.index += 1;
        Some(Ok(Fragment::Data(&body[..size as usize])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(p: &[u8], n: u16) -> Vec<Result<Fragment<'_>, FragmentError>> {
        FragmentIter::new(p, n).collect()
    }

    #[test]
    fn short_and_redundant_sizes() {
        let p = [2, b'a', b'b', 0x81, 0x80, 0x80, 0x00, b'c', 0, 0xff];
        assert_eq!(
            collect(&p, 3),
            vec![
                Ok(Fragment::Data(b"ab")),
                Ok(Fragment::Data(b"c")),
                Ok(Fragment::Data(b""))
            ]
        );
        // Count 2 leaves the rest as unused tail.
        assert_eq!(collect(&p, 2).len(), 2);
    }

    #[test]
    fn hostile_payloads_error_without_panicking() {
        assert_eq!(
            collect(&[5, 1, 2], 1),
            vec![Err(FragmentError::SizeOutOfBounds { offset: 0, size: 5 })]
        );
        assert_eq!(
            collect(&[0x80, 0x80, 0x80, 0x80, 0], 1),
            vec![Err(FragmentError::BadSizeVarint { offset: 0 })]
        );
        assert_eq!(
            collect(&[0x80], 1),
            vec![Err(FragmentError::BadSizeVarint { offset: 0 })]
        );
        assert_eq!(
            collect(&[1, 7], 2),
            vec![
                Ok(Fragment::Data(&[7])),
                Err(FragmentError::MissingFragment { index: 1 })
            ]
        );
        assert_eq!(collect(&[], 1023).len(), 1);
    }

    #[test]
    fn drop_marker_ends_the_chunk() {
        let p = [1, 9, 0xff, 0xff, 0xff, 0x7f, 1, 2, 3];
        assert_eq!(
            collect(&p, 3),
            vec![Ok(Fragment::Data(&[9])), Ok(Fragment::DropPacket)]
        );
    }
}
