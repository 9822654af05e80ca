//! Append-only protobuf encoder for the hot path (trace packets).
//!
//! Unlike quick-protobuf, nothing is built in memory first: fields are
//! appended to a [`Stream`] as they are produced. A nested message reserves
//! a 4-byte length ("redundant varint", `0x80|b0, 0x80|b1, 0x80|b2, b3`) and
//! fills it when the message ends, which is what Perfetto's protozero does
//! and what readers of the shared-memory ABI expect.
//!
//! The stream decides where reserved lengths live: a `Vec` for tests and
//! cold paths ([`VecStream`]), or shared-memory chunks for a TraceWriter,
//! where a length may end up in a chunk that has already been committed and
//! must then be patched out of band. Slots are therefore addressed by an
//! opaque [`LenSlot`] handed out by the stream, never by a pointer.

pub mod commit_append;
pub mod decimal;
pub mod decode;
mod encode;
mod vec_stream;

pub use encode::*;
pub use vec_stream::VecStream;

/// Size in bytes of a reserved length field.
pub const LEN_FIELD_SIZE: usize = 4;

/// Largest value a 4-byte redundant varint can carry (2^28 - 1).
pub const MAX_LEN_FIELD_VALUE: u32 = (1 << 28) - 1;

/// Handle to a reserved length field inside a [`Stream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LenSlot(pub u32);

/// Where encoded bytes go.
pub trait Stream {
    /// Appends bytes.
    fn write(&mut self, bytes: &[u8]);
    /// Reserves [`LEN_FIELD_SIZE`] bytes for a length to be filled later.
    fn reserve_len(&mut self) -> LenSlot;
    /// Fills a reserved length. `len` must be at most [`MAX_LEN_FIELD_VALUE`].
    fn fill_len(&mut self, slot: LenSlot, len: u32);
    /// Total bytes appended so far (including reserved lengths); used to
    /// compute nested message sizes.
    fn position(&self) -> u64;
}

/// Encodes `len` as the 4-byte redundant varint used for reserved lengths.
#[inline]
pub fn redundant_varint(len: u32) -> [u8; LEN_FIELD_SIZE] {
    debug_assert!(len <= MAX_LEN_FIELD_VALUE);
    [
        (len as u8 & 0x7f) | 0x80,
        ((len >> 7) as u8 & 0x7f) | 0x80,
        ((len >> 14) as u8 & 0x7f) | 0x80,
        (len >> 21) as u8 & 0x7f,
    ]
}
