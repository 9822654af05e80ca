//! The 16-byte header that precedes every chunk copied into the buffer.
//!
//! Layout (little endian), same as Perfetto's in-buffer `ChunkRecord`:
//! `chunk_id u32 | producer_id u16 | writer_id u16 | num_fragments u16 |
//! size u16 | flags:6 is_padding:1 unused:1 | b"CHU"`.
//! `size` covers the header too and is always a multiple of 16. A record
//! whose `size` is 0 marks the never-written tail of the buffer.

/// Size of the header, and the alignment of every record.
pub const RECORD_HEADER_SIZE: usize = 16;
/// Largest record `size` the u16 field can describe.
pub const MAX_RECORD_SIZE: usize = u16::MAX as usize;
/// Only the low 6 bits of the chunk flags are stored.
pub const RECORD_FLAGS_MASK: u8 = (1 << 6) - 1;

const PADDING_BIT: u8 = 1 << 6;
const MAGIC: [u8; 3] = *b"CHU";

/// Decoded record header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHeader {
    pub chunk_id: u32,
    pub producer_id: u16,
    pub writer_id: u16,
    pub num_fragments: u16,
    /// Whole record size, header included; 0 = untouched memory.
    pub size: u16,
    pub flags: u8,
    pub is_padding: bool,
}

impl RecordHeader {
    /// A padding record of `size` bytes (header included).
    pub fn padding(size: usize) -> Self {
        debug_assert!((RECORD_HEADER_SIZE..=MAX_RECORD_SIZE).contains(&size));
        debug_assert!(size.is_multiple_of(RECORD_HEADER_SIZE));
        RecordHeader {
            size: size as u16,
            is_padding: true,
            ..Default::default()
        }
    }

    pub fn encode(&self) -> [u8; RECORD_HEADER_SIZE] {
        let mut b = [0u8; RECORD_HEADER_SIZE];
        b[0..4].copy_from_slice(&self.chunk_id.to_le_bytes());
        b[4..6].copy_from_slice(&self.producer_id.to_le_bytes());
        b[6..8].copy_from_slice(&self.writer_id.to_le_bytes());
        b[8..10].copy_from_slice(&self.num_fragments.to_le_bytes());
        b[10..12].copy_from_slice(&self.size.to_le_bytes());
        b[12] = (self.flags & RECORD_FLAGS_MASK) | if self.is_padding { PADDING_BIT } else { 0 };
        b[13..16].copy_from_slice(&MAGIC);
        b
    }

    /// Decodes the header at the start of `b` (at least 16 bytes long).
    pub fn decode(b: &[u8]) -> Self {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        RecordHeader {
            chunk_id: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            producer_id: u16_at(4),
            writer_id: u16_at(6),
            num_fragments: u16_at(8),
            size: u16_at(10),
            flags: b[12] & RECORD_FLAGS_MASK,
            is_padding: b[12] & PADDING_BIT != 0,
        }
    }

    pub fn is_valid(&self) -> bool {
        self.size != 0
    }
}

/// The `size` field of the record header at `off` in `data`, without
/// decoding the rest (the read path needs only this, once a packet).
pub fn size_at(data: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([data[off + 10], data[off + 11]])
}

/// Rounds `n` up to the record alignment.
pub fn align_up(n: usize) -> usize {
    (n + RECORD_HEADER_SIZE - 1) & !(RECORD_HEADER_SIZE - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = RecordHeader {
            chunk_id: 0xdead_beef,
            producer_id: 7,
            writer_id: 0x7fff,
            num_fragments: 1023,
            size: 65520,
            flags: 0x3f,
            is_padding: false,
        };
        let b = h.encode();
        assert_eq!(&b[13..], b"CHU");
        assert_eq!(RecordHeader::decode(&b), h);
        let p = RecordHeader::padding(32);
        assert_eq!(RecordHeader::decode(&p.encode()), p);
        assert!(RecordHeader::decode(&[0u8; 16]).size == 0);
        let mut at = vec![0u8; 16];
        at.extend_from_slice(&b);
        assert_eq!(size_at(&at, 16), h.size);
    }

    #[test]
    fn alignment() {
        assert_eq!(align_up(0), 0);
        assert_eq!(align_up(1), 16);
        assert_eq!(align_up(16), 16);
        assert_eq!(align_up(17), 32);
    }
}
