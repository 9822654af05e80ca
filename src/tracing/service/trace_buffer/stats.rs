//! Buffer counters, named after `TraceStats.BufferStats` fields, and their
//! protobuf encoding.

use crate::protozero::{begin_nested, end_nested, put_varint, Stream};

/// Counters of one trace buffer. Field names match
/// `TraceStats.BufferStats` in Perfetto's trace_stats.proto.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BufferStats {
    pub bytes_written: u64,
    pub chunks_written: u64,
    pub chunks_overwritten: u64,
    pub write_wrap_count: u64,
    pub patches_succeeded: u64,
    pub patches_failed: u64,
    pub readaheads_succeeded: u64,
    pub readaheads_failed: u64,
    pub abi_violations: u64,
    pub chunks_rewritten: u64,
    pub chunks_committed_out_of_order: u64,
    pub buffer_size: u64,
    pub bytes_overwritten: u64,
    pub bytes_read: u64,
    pub padding_bytes_written: u64,
    pub padding_bytes_cleared: u64,
    pub chunks_read: u64,
    pub chunks_discarded: u64,
    pub trace_writer_packet_loss: u64,
}

/// `TraceStats.buffer_stats` field number.
pub const TRACE_STATS_BUFFER_STATS_FIELD: u32 = 1;

impl BufferStats {
    /// `(field number, value)` for every counter, in field-number order.
    pub fn fields(&self) -> [(u32, u64); 19] {
        [
            (1, self.bytes_written),
            (2, self.chunks_written),
            (3, self.chunks_overwritten),
            (4, self.write_wrap_count),
            (5, self.patches_succeeded),
            (6, self.patches_failed),
            (7, self.readaheads_succeeded),
            (8, self.readaheads_failed),
            (9, self.abi_violations),
            (10, self.chunks_rewritten),
            (11, self.chunks_committed_out_of_order),
            (12, self.buffer_size),
            (13, self.bytes_overwritten),
            (14, self.bytes_read),
            (15, self.padding_bytes_written),
            (16, self.padding_bytes_cleared),
            (17, self.chunks_read),
            (18, self.chunks_discarded),
            (19, self.trace_writer_packet_loss),
        ]
    }

    /// Writes the counters as the body of a `BufferStats` message. Every
    /// field is written, zeros included, so readers see explicit values.
    pub fn encode<S: Stream + ?Sized>(&self, s: &mut S) {
        for (field, value) in self.fields() {
            put_varint(s, field, value);
        }
    }

    /// Writes one `TraceStats.buffer_stats` entry (field 1 of TraceStats).
    /// Call once per buffer, in the session's buffer order.
    pub fn encode_in_trace_stats<S: Stream + ?Sized>(&self, s: &mut S) {
        let n = begin_nested(s, TRACE_STATS_BUFFER_STATS_FIELD);
        self.encode(s);
        end_nested(s, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::VecStream;
    use quick_protobuf::BytesReader;

    /// Decodes a message made only of varint fields (tag, value).
    fn varint_fields(bytes: &[u8]) -> Vec<(u32, u64)> {
        let mut r = BytesReader::from_bytes(bytes);
        let mut out = Vec::new();
        while !r.is_eof() {
            let tag = r.next_tag(bytes).unwrap();
            assert_eq!(tag & 7, 0, "only varints expected");
            out.push((tag >> 3, r.read_varint64(bytes).unwrap()));
        }
        out
    }

    #[test]
    fn encodes_every_field_with_its_number() {
        let st = BufferStats {
            bytes_written: 1,
            chunks_written: 2,
            chunks_overwritten: 3,
            write_wrap_count: 4,
            patches_succeeded: 5,
            patches_failed: 6,
            readaheads_succeeded: 7,
            readaheads_failed: 8,
            abi_violations: 9,
            chunks_rewritten: 10,
            chunks_committed_out_of_order: 11,
            buffer_size: 12,
            bytes_overwritten: 13,
            bytes_read: 14,
            padding_bytes_written: 15,
            padding_bytes_cleared: 16,
            chunks_read: 17,
            chunks_discarded: 18,
            trace_writer_packet_loss: 19,
        };
        let mut s = VecStream::new();
        st.encode(&mut s);
        let fields = varint_fields(s.as_bytes());
        let expected: Vec<(u32, u64)> = (1..=19).map(|i| (i, i as u64)).collect();
        assert_eq!(fields, expected);
    }

    #[test]
    fn nests_under_trace_stats_field_1() {
        let st = BufferStats {
            buffer_size: 4096,
            ..Default::default()
        };
        let mut s = VecStream::new();
        st.encode_in_trace_stats(&mut s);
        let b = s.into_bytes();
        assert_eq!(b[0], 0x0a); // field 1, length-delimited
        let len = (b[1] & 0x7f) as usize | ((b[2] & 0x7f) as usize) << 7;
        let body = &b[5..];
        assert_eq!(body.len(), len);
        assert!(varint_fields(body).contains(&(12, 4096)));
    }
}
