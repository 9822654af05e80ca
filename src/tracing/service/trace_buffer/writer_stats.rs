//! Per-writer histograms of how full chunks were when read
//! (`TraceStats.writer_stats`, `TraceStats.chunk_payload_histogram_def`).
//! They show writers that commit mostly-empty chunks, which waste buffer
//! space since whole chunks are copied.

use crate::protozero::{begin_nested, end_nested, put_packed_varints, put_varint, Stream};

/// Upper bounds (inclusive) of the buckets; one more bucket catches the
/// rest. Same layout as Perfetto's, so reports are comparable.
pub const CHUNK_PAYLOAD_BUCKETS: [u64; 10] =
    [8, 32, 128, 512, 1024, 2048, 4096, 8192, 12288, 16384];
const NUM_BUCKETS: usize = CHUNK_PAYLOAD_BUCKETS.len() + 1;

/// `TraceStats` field numbers.
const HISTOGRAM_DEF_FIELD: u32 = 17;
const WRITER_STATS_FIELD: u32 = 18;

/// Count and sum of the used payload bytes of each read chunk, by bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkPayloadHistogram {
    pub counts: [u64; NUM_BUCKETS],
    pub sums: [u64; NUM_BUCKETS],
}

impl ChunkPayloadHistogram {
    pub fn add(&mut self, used_bytes: u64) {
        let bucket = CHUNK_PAYLOAD_BUCKETS
            .iter()
            .position(|&limit| used_bytes <= limit)
            .unwrap_or(NUM_BUCKETS - 1);
        self.counts[bucket] += 1;
        self.sums[bucket] += used_bytes;
    }

    /// Writes one `TraceStats.writer_stats` entry.
    pub fn encode_writer_stats<S: Stream + ?Sized>(
        &self,
        s: &mut S,
        sequence_id: u64,
        buffer_index: u32,
    ) {
        let n = begin_nested(s, WRITER_STATS_FIELD);
        put_varint(s, 1, sequence_id);
        put_packed_varints(s, 2, self.counts.iter().copied());
        put_packed_varints(s, 3, self.sums.iter().copied());
        put_varint(s, 4, u64::from(buffer_index));
        end_nested(s, n);
    }
}

/// Writes `TraceStats.chunk_payload_histogram_def` (once per TraceStats,
/// before or after the `writer_stats` entries).
pub fn encode_histogram_def<S: Stream + ?Sized>(s: &mut S) {
    for limit in CHUNK_PAYLOAD_BUCKETS {
        put_varint(s, HISTOGRAM_DEF_FIELD, limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::VecStream;
    use quick_protobuf::BytesReader;

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        let mut h = ChunkPayloadHistogram::default();
        for v in [0, 8, 9, 16384, 16385, 100_000] {
            h.add(v);
        }
        assert_eq!(h.counts[0], 2);
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[9], 1);
        assert_eq!(h.counts[10], 2);
        assert_eq!(h.sums[10], 116_385);
    }

    #[test]
    fn encodes_writer_stats_message() {
        let mut h = ChunkPayloadHistogram::default();
        h.add(100);
        let mut s = VecStream::new();
        encode_histogram_def(&mut s);
        h.encode_writer_stats(&mut s, 7, 2);
        let b = s.into_bytes();
        let mut r = BytesReader::from_bytes(&b);
        let mut defs = Vec::new();
        let mut body = Vec::new();
        while !r.is_eof() {
            match r.next_tag(&b).unwrap() >> 3 {
                17 => defs.push(r.read_varint64(&b).unwrap()),
                18 => body = r.read_bytes(&b).unwrap().to_vec(),
                f => panic!("unexpected field {f}"),
            }
        }
        assert_eq!(defs, CHUNK_PAYLOAD_BUCKETS);
        let mut r = BytesReader::from_bytes(&body);
        let (mut seq, mut buffer, mut counts, mut sums) = (0, 0, Vec::new(), Vec::new());
        while !r.is_eof() {
            match r.next_tag(&body).unwrap() >> 3 {
                1 => seq = r.read_varint64(&body).unwrap(),
                4 => buffer = r.read_varint64(&body).unwrap(),
                2 => counts = r.read_packed(&body, |r, b| r.read_varint64(b)).unwrap(),
                3 => sums = r.read_packed(&body, |r, b| r.read_varint64(b)).unwrap(),
                f => panic!("unexpected field {f}"),
            }
        }
        assert_eq!((seq, buffer), (7, 2));
        assert_eq!(counts.len(), 11);
        assert_eq!((counts[2], sums[2]), (1, 100));
    }
}
