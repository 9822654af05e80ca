//! Field encoders over any [`Stream`].

use super::{LenSlot, Stream, MAX_LEN_FIELD_VALUE};

/// Protobuf wire types.
pub const WIRE_VARINT: u32 = 0;
pub const WIRE_FIXED64: u32 = 1;
pub const WIRE_LEN: u32 = 2;
pub const WIRE_FIXED32: u32 = 5;

/// Writes `v` as a varint into `buf`, returning the number of bytes used.
#[inline]
pub fn encode_varint(mut v: u64, buf: &mut [u8; 10]) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        buf[i] = (v as u8) | 0x80;
        v >>= 7;
        i += 1;
    }
    buf[i] = v as u8;
    i + 1
}

/// Number of bytes `v` takes as a varint.
#[inline]
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn put_raw_varint<S: Stream + ?Sized>(s: &mut S, v: u64) {
    let mut buf = [0u8; 10];
    let n = encode_varint(v, &mut buf);
    s.write(&buf[..n]);
}

#[inline]
fn put_tag<S: Stream + ?Sized>(s: &mut S, field: u32, wire: u32) {
    put_raw_varint(s, ((field as u64) << 3) | wire as u64);
}

/// `uint32/uint64/int32/int64/bool/enum` field. Negative int32/int64 values
/// must be passed sign-extended to 64 bits (`v as i64 as u64`), as protobuf
/// requires.
#[inline]
pub fn put_varint<S: Stream + ?Sized>(s: &mut S, field: u32, v: u64) {
    put_tag(s, field, WIRE_VARINT);
    put_raw_varint(s, v);
}

/// `sint32/sint64` field (zigzag).
#[inline]
pub fn put_sint<S: Stream + ?Sized>(s: &mut S, field: u32, v: i64) {
    put_varint(s, field, ((v << 1) ^ (v >> 63)) as u64);
}

/// `fixed64/sfixed64/double` field.
#[inline]
pub fn put_fixed64<S: Stream + ?Sized>(s: &mut S, field: u32, v: u64) {
    put_tag(s, field, WIRE_FIXED64);
    s.write(&v.to_le_bytes());
}

/// `fixed32/sfixed32/float` field.
#[inline]
pub fn put_fixed32<S: Stream + ?Sized>(s: &mut S, field: u32, v: u32) {
    put_tag(s, field, WIRE_FIXED32);
    s.write(&v.to_le_bytes());
}

/// `double` field.
#[inline]
pub fn put_double<S: Stream + ?Sized>(s: &mut S, field: u32, v: f64) {
    put_fixed64(s, field, v.to_bits());
}

/// `bytes` field (or an already-serialized nested message).
#[inline]
pub fn put_bytes<S: Stream + ?Sized>(s: &mut S, field: u32, v: &[u8]) {
    put_tag(s, field, WIRE_LEN);
    put_raw_varint(s, v.len() as u64);
    s.write(v);
}

/// `string` field.
#[inline]
pub fn put_str<S: Stream + ?Sized>(s: &mut S, field: u32, v: &str) {
    put_bytes(s, field, v.as_bytes());
}

/// An open nested message; close it with [`end_nested`].
#[derive(Debug)]
#[must_use = "a nested message must be closed with end_nested"]
pub struct Nested {
    slot: LenSlot,
    start: u64,
}

/// Opens a nested message in `field`, reserving its 4-byte length.
#[inline]
pub fn begin_nested<S: Stream + ?Sized>(s: &mut S, field: u32) -> Nested {
    put_tag(s, field, WIRE_LEN);
    let slot = s.reserve_len();
    Nested {
        slot,
        start: s.position(),
    }
}

/// Closes a nested message opened with [`begin_nested`] and fills its length.
/// Messages must be closed innermost first.
#[inline]
pub fn end_nested<S: Stream + ?Sized>(s: &mut S, n: Nested) {
    let len = s.position() - n.start;
    assert!(
        len <= MAX_LEN_FIELD_VALUE as u64,
        "nested message over 256 MiB"
    );
    s.fill_len(n.slot, len as u32);
}

/// Writes a packed repeated varint field from an iterator.
pub fn put_packed_varints<S, I>(s: &mut S, field: u32, values: I)
where
    S: Stream + ?Sized,
    I: IntoIterator<Item = u64>,
{
    let n = begin_nested(s, field);
    for v in values {
        put_raw_varint(s, v);
    }
    end_nested(s, n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::VecStream;

    #[test]
    fn varint_lengths() {
        for (v, n) in [
            (0u64, 1),
            (127, 1),
            (128, 2),
            (16383, 2),
            (16384, 3),
            (u64::MAX, 10),
        ] {
            assert_eq!(varint_len(v), n, "{v}");
            let mut b = [0; 10];
            assert_eq!(encode_varint(v, &mut b), n);
        }
    }

    #[test]
    fn nested_message_bytes() {
        let mut s = VecStream::new();
        put_varint(&mut s, 1, 150);
        let n = begin_nested(&mut s, 2);
        put_str(&mut s, 1, "hi");
        end_nested(&mut s, n);
        assert_eq!(
            s.into_bytes(),
            vec![0x08, 0x96, 0x01, 0x12, 0x84, 0x80, 0x80, 0x00, 0x0a, 0x02, b'h', b'i']
        );
    }

    #[test]
    fn decodes_with_quick_protobuf() {
        use crate::pb::protos::IPCFrame;
        use quick_protobuf::{BytesReader, MessageRead};
        let mut s = VecStream::new();
        put_varint(&mut s, 2, 77);
        let n = begin_nested(&mut s, 5);
        put_varint(&mut s, 1, 3);
        put_bytes(&mut s, 3, b"args");
        end_nested(&mut s, n);
        let bytes = s.into_bytes();
        let frame = IPCFrame::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap();
        assert_eq!(frame.request_id, Some(77));
    }
}
