//! A [`Stream`] into a growable `Vec<u8>`, for tests and cold paths.

use super::{redundant_varint, LenSlot, Stream, LEN_FIELD_SIZE};

/// Encodes into memory. Slots are byte offsets into the buffer.
#[derive(Debug, Default)]
pub struct VecStream {
    buf: Vec<u8>,
}

impl VecStream {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_capacity(cap: usize) -> Self {
        Self {
            buf: Vec::with_capacity(cap),
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    pub fn clear(&mut self) {
        self.buf.clear();
    }
}

impl Stream for VecStream {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    #[inline]
    fn reserve_len(&mut self) -> LenSlot {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0x80, 0x80, 0x80, 0x00]);
        LenSlot(at as u32)
    }

    #[inline]
    fn fill_len(&mut self, slot: LenSlot, len: u32) {
        let at = slot.0 as usize;
        self.buf[at..at + LEN_FIELD_SIZE].copy_from_slice(&redundant_varint(len));
    }

    #[inline]
    fn position(&self) -> u64 {
        self.buf.len() as u64
    }
}
