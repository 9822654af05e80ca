//! The in-memory encoder of bundle events: a few KiB at a time, moved on
//! into the trace packet at event boundaries (see `bundle`).
//!
//! Per event the ftrace encoder writes a dozen tiny fields (tags, varints,
//! short strings). Through the generic [`Stream`] path every one of them
//! is a variable-length slice append (a memcpy call); here varints are
//! written byte by byte into spare capacity, which is several times
//! cheaper per event. It still implements [`Stream`], so the generic
//! encoders (compact sched, stats, symbols) write into it too.

use crate::protozero::{
    redundant_varint, varint_len, LenSlot, Stream, LEN_FIELD_SIZE, WIRE_LEN, WIRE_VARINT,
};

/// A growable protobuf buffer with fast scalar appends.
///
/// The bytes live in `buf[..len]`; `buf` is allocated and initialized to
/// its full size, so a varint is a few indexed stores into room checked
/// once, with no per-byte capacity check or length update as with
/// `Vec::push`.
#[derive(Debug, Default)]
pub struct PacketBuf {
    buf: Vec<u8>,
    len: usize,
}

/// An open nested message of a [`PacketBuf`].
#[derive(Debug)]
#[must_use = "close it with end or end_compact"]
pub struct Open {
    /// Where the 4-byte length slot starts.
    slot: usize,
}

/// Above this many bytes the buffer is released after use, so a burst
/// does not pin memory for every cpu.
const KEEP_CAPACITY: usize = 4 << 20;

/// Smallest allocation; a bundle is usually tens of KiB.
const MIN_CAPACITY: usize = 16 << 10;

/// Most bytes a varint takes.
const MAX_VARINT: usize = 10;

impl PacketBuf {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Empties the buffer, keeping a moderate allocation.
    pub fn clear(&mut self) {
        self.len = 0;
        if self.buf.len() > KEEP_CAPACITY {
            self.buf = Vec::new();
        }
    }

    /// Makes sure `n` more bytes fit.
    #[inline(always)]
    fn room(&mut self, n: usize) {
        if self.buf.len() - self.len < n {
            self.grow(n);
        }
    }

    #[cold]
    fn grow(&mut self, n: usize) {
        let want = (self.len + n).max(self.buf.len() * 2).max(MIN_CAPACITY);
        self.buf.resize(want, 0);
    }

    /// A varint as a few indexed stores into room checked once. (A
    /// branch-free spread of 7-bit groups measured slower at opt-level
    /// "s", which keeps loops rolled; this loop's trip count is steady per
    /// call site, so it predicts well.)
    #[inline(always)]
    fn raw_varint(&mut self, v: u64) {
        self.room(MAX_VARINT);
        self.store_varint(v);
    }

    /// A packed repeated varint field (4-byte length slot, as
    /// [`put_packed_varints`](crate::protozero::put_packed_varints) writes
    /// it). Room for the whole array is checked once, and each value is a
    /// few stores rather than a slice append (compact sched's arrays hold
    /// most of a sched bundle).
    pub fn packed_varints(&mut self, field: u32, values: impl ExactSizeIterator<Item = u64>) {
        let n = self.begin(field);
        self.room(values.len() * MAX_VARINT);
        // store_varint with the cursor kept in a local: it stays in a
        // register (10 % faster on sched pages than calling it).
        let mut at = self.len;
        let buf = &mut self.buf[..];
        for mut v in values {
            while v >= 0x80 {
                buf[at] = v as u8 | 0x80;
                v >>= 7;
                at += 1;
            }
            buf[at] = v as u8;
            at += 1;
        }
        self.len = at;
        self.end(n);
    }

    /// A varint into room the caller made.
    #[inline(always)]
    fn store_varint(&mut self, mut v: u64) {
        let dst = &mut self.buf[self.len..self.len + MAX_VARINT];
        let mut i = 0;
        while v >= 0x80 && i < MAX_VARINT - 1 {
            dst[i] = v as u8 | 0x80;
            v >>= 7;
            i += 1;
        }
        dst[i] = v as u8;
        self.len += i + 1;
    }

    #[inline(always)]
    fn append(&mut self, bytes: &[u8]) {
        self.room(bytes.len());
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    #[inline(always)]
    fn tag(&mut self, field: u32, wire: u32) {
        self.raw_varint(((field as u64) << 3) | wire as u64);
    }

    /// A varint field (uint*/int*/bool/enum; negative values sign-extended).
    #[inline]
    pub fn varint(&mut self, field: u32, v: u64) {
        self.varint_inline(field, v);
    }

    /// [`varint`](Self::varint) always inlined, so a constant field
    /// number folds into its tag bytes: for the fields of the hottest
    /// event (a call per field costs as much as the field).
    #[inline(always)]
    pub fn varint_inline(&mut self, field: u32, v: u64) {
        self.tag(field, WIRE_VARINT);
        self.raw_varint(v);
    }

    /// [`bytes`](Self::bytes) always inlined (see [`varint_inline`](Self::varint_inline)).
    #[inline(always)]
    pub fn bytes_inline(&mut self, field: u32, v: &[u8]) {
        self.tag(field, WIRE_LEN);
        self.raw_varint(v.len() as u64);
        self.append(v);
    }

    /// A zigzag (sint32/sint64) field.
    #[inline]
    pub fn sint(&mut self, field: u32, v: i64) {
        self.varint(field, ((v << 1) ^ (v >> 63)) as u64);
    }

    /// A bytes/string field.
    #[inline]
    pub fn bytes(&mut self, field: u32, v: &[u8]) {
        self.bytes_inline(field, v);
    }

    /// Opens a nested message with a 4-byte length slot.
    #[inline(always)]
    pub fn begin(&mut self, field: u32) -> Open {
        self.tag(field, WIRE_LEN);
        let slot = self.len;
        self.append(&[0x80, 0x80, 0x80, 0]);
        Open { slot }
    }

    /// Closes `n` keeping the 4-byte (redundant varint) length, as the
    /// shared-memory encoders do.
    #[inline(always)]
    pub fn end(&mut self, n: Open) {
        let len = self.len - n.slot - LEN_FIELD_SIZE;
        self.buf[n.slot..n.slot + LEN_FIELD_SIZE].copy_from_slice(&redundant_varint(len as u32));
    }

    /// Opens a nested message expected to be short (one event): its
    /// length takes one byte, growing only if the body reaches 128 bytes.
    /// Close it with [`end_small`](Self::end_small).
    #[inline(always)]
    pub fn begin_small(&mut self, field: u32) -> Open {
        self.tag(field, WIRE_LEN);
        self.room(1);
        let slot = self.len;
        self.len += 1;
        Open { slot }
    }

    /// Closes a message of [`begin_small`](Self::begin_small) with the
    /// shortest length varint (3 bytes fewer than [`end`](Self::end) for
    /// an event, which every later copy of the trace pays for). Must be
    /// the innermost open message.
    #[inline(always)]
    pub fn end_small(&mut self, n: Open) {
        let body = n.slot + 1;
        let len = self.len - body;
        if len < 0x80 {
            self.buf[n.slot] = len as u8;
            return;
        }
        self.widen_small_length(n.slot, len);
    }

    /// Rare: makes room for a length of more than one byte.
    #[cold]
    fn widen_small_length(&mut self, slot: usize, len: usize) {
        let body = slot + 1;
        let width = varint_len(len as u64);
        self.room(width - 1);
        self.buf.copy_within(body..body + len, slot + width);
        self.len += width - 1;
        let mut v = len;
        for i in 0..width {
            let more = if i + 1 < width { 0x80 } else { 0 };
            self.buf[slot + i] = (v as u8 & 0x7f) | more;
            v >>= 7;
        }
    }
}

impl Stream for PacketBuf {
    #[inline(always)]
    fn write(&mut self, bytes: &[u8]) {
        self.append(bytes);
    }

    #[inline(always)]
    fn reserve_len(&mut self) -> LenSlot {
        let at = self.len;
        self.append(&[0x80, 0x80, 0x80, 0]);
        LenSlot(at as u32)
    }

    #[inline(always)]
    fn fill_len(&mut self, slot: LenSlot, len: u32) {
        let at = slot.0 as usize;
        self.buf[at..at + LEN_FIELD_SIZE].copy_from_slice(&redundant_varint(len));
    }

    #[inline]
    fn position(&self) -> u64 {
        self.len as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::{begin_nested, end_nested, put_bytes, put_sint, put_varint, VecStream};

    #[test]
    fn scalars_match_the_generic_encoder() {
        let mut a = PacketBuf::default();
        let mut b = VecStream::new();
        for (f, v) in [
            (1, 0u64),
            (2, 127),
            (3, 128),
            (300, u64::MAX),
            (16, 1 << 35),
        ] {
            a.varint(f, v);
            put_varint(&mut b, f, v);
        }
        a.sint(7, -3);
        put_sint(&mut b, 7, -3);
        a.bytes(9, b"hello");
        put_bytes(&mut b, 9, b"hello");
        let long = vec![7u8; 300];
        a.bytes(10, &long);
        put_bytes(&mut b, 10, &long);
        assert_eq!(a.as_bytes(), b.as_bytes());
    }

    #[test]
    fn varints_of_every_length_match_the_generic_encoder() {
        let mut a = PacketBuf::default();
        let mut b = VecStream::new();
        for bits in 0..64 {
            for v in [
                1u64 << bits,
                (1u64 << bits) - 1,
                (1u64 << bits) | 0x55,
                u64::MAX >> bits,
            ] {
                a.varint(1, v);
                put_varint(&mut b, 1, v);
            }
        }
        assert_eq!(a.as_bytes(), b.as_bytes());
    }

    #[test]
    fn end_keeps_a_redundant_length_like_protozero() {
        let mut a = PacketBuf::default();
        let mut b = VecStream::new();
        let n = a.begin(2);
        a.varint(1, 5);
        a.end(n);
        let m = begin_nested(&mut b, 2);
        put_varint(&mut b, 1, 5);
        end_nested(&mut b, m);
        assert_eq!(a.as_bytes(), b.as_bytes());
    }

    #[test]
    fn small_messages_use_the_shortest_length() {
        let mut a = PacketBuf::default();
        a.varint(1, 1);
        let outer = a.begin_small(2);
        a.varint(1, 300);
        let inner = a.begin_small(3);
        a.bytes(2, b"abc");
        a.end_small(inner);
        a.end_small(outer);
        // 08 01 | 12 len=10 [08 ac 02 | 1a len=5 [12 03 'abc']]
        assert_eq!(
            a.as_bytes(),
            &[0x08, 1, 0x12, 10, 0x08, 0xac, 0x02, 0x1a, 5, 0x12, 3, b'a', b'b', b'c']
        );
        // Bodies of 127, 200 and 20000 bytes: 1-, 2- and 3-byte lengths.
        for (body, len_bytes) in [(127usize, vec![127u8]), (200, vec![200 | 0x80, 1])] {
            let mut c = PacketBuf::default();
            let n = c.begin_small(4);
            let content: Vec<u8> = (0..body).map(|i| i as u8).collect();
            c.write(&content);
            c.end_small(n);
            assert_eq!(&c.as_bytes()[1..1 + len_bytes.len()], &len_bytes[..]);
            assert_eq!(&c.as_bytes()[1 + len_bytes.len()..], &content[..]);
        }
        let mut c = PacketBuf::default();
        let n = c.begin_small(4);
        let big = vec![9u8; 20_000];
        c.bytes(1, &big);
        c.end_small(n);
        let mut want = VecStream::new();
        put_bytes(&mut want, 4, &{
            let mut inner = VecStream::new();
            put_bytes(&mut inner, 1, &big);
            inner.into_bytes()
        });
        assert_eq!(c.as_bytes(), want.as_bytes());
        // An empty message.
        let mut d = PacketBuf::default();
        let n = d.begin_small(4);
        d.end_small(n);
        assert_eq!(d.as_bytes(), &[0x22, 0]);
    }

    #[test]
    fn packed_varints_match_the_generic_encoder() {
        let values: Vec<u64> = (0..300u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 64))
            .chain([0, 127, 128, u64::MAX, -1i64 as u64])
            .collect();
        for n in [0, 1, values.len()] {
            let mut a = PacketBuf::default();
            let mut b = VecStream::new();
            a.varint(1, 7);
            put_varint(&mut b, 1, 7);
            a.packed_varints(3, values[..n].iter().copied());
            crate::protozero::put_packed_varints(&mut b, 3, values[..n].iter().copied());
            assert_eq!(a.as_bytes(), b.as_bytes(), "{n} values");
        }
    }

    #[test]
    fn generic_stream_writes_land_verbatim() {
        let mut a = PacketBuf::default();
        a.write(&[1, 2, 3]);
        a.write(&[9u8; 40]);
        let slot = a.reserve_len();
        a.fill_len(slot, 129);
        assert_eq!(a.len(), 3 + 40 + 4);
        assert_eq!(&a.as_bytes()[43..], &redundant_varint(129));
        assert_eq!(a.position(), 47);
        a.clear();
        assert!(a.is_empty());
    }
}
