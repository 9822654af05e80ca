//! Applies the session's trace_filter to every packet a read pass emits.

use super::read_pass::PacketSink;
use super::trace_buffer::TracePacket;
use super::trace_filter::{FilterStats, TraceFilter};

/// Filters each packet (body and trusted trailer together, as upstream)
/// before handing it on. A malformed packet goes on empty and is counted
/// in `errors`; a packet the filter removed entirely goes on empty too
/// (upstream keeps the packet count).
pub(super) struct FilterSink<'a> {
    pub inner: &'a mut dyn PacketSink,
    pub filter: &'a TraceFilter,
    pub stats: FilterStats,
    /// Session buffer index of the packets now passing (None: service).
    pub buffer: Option<usize>,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl<'a> FilterSink<'a> {
    pub fn new(inner: &'a mut dyn PacketSink, filter: &'a TraceFilter) -> Self {
        FilterSink {
            inner,
            filter,
            stats: FilterStats::default(),
            buffer: None,
            input: Vec::new(),
            output: Vec::new(),
        }
    }
}

impl PacketSink for FilterSink<'_> {
    fn packet(&mut self, body: &TracePacket<'_>, trailer: &[u8]) -> bool {
        self.input.clear();
        body.slices()
            .for_each(|s| crate::mem::skew_copy::extend_bytes(&mut self.input, s));
        self.input.extend_from_slice(trailer);
        self.output.clear();
        let st = &mut self.stats;
        st.input_packets += 1;
        st.input_bytes += self.input.len() as u64;
        if self
            .filter
            .filter_packet(&self.input, &mut self.output)
            .is_err()
        {
            st.errors += 1;
        }
        st.output_bytes += self.output.len() as u64;
        if let Some(i) = self.buffer {
            let per = &mut st.bytes_discarded_per_buffer;
            if per.len() <= i {
                per.resize(i + 1, 0);
            }
            per[i] += (self.input.len() - self.output.len()) as u64;
        }
        let ranges = [(0, self.output.len())];
        self.inner
            .packet(&TracePacket::from_ranges(&self.output, &ranges), &[])
    }

    fn set_buffer(&mut self, index: Option<usize>) {
        self.buffer = index;
        // The file sink writes a cut's held packets before the first
        // buffer's (deflate's compresses them with it).
        self.inner.set_buffer(index);
    }
}

impl FilterStats {
    pub(super) fn add(&mut self, o: &FilterStats) {
        self.input_packets += o.input_packets;
        self.input_bytes += o.input_bytes;
        self.output_bytes += o.output_bytes;
        self.errors += o.errors;
        let per = &mut self.bytes_discarded_per_buffer;
        if per.len() < o.bytes_discarded_per_buffer.len() {
            per.resize(o.bytes_discarded_per_buffer.len(), 0);
        }
        for (a, b) in per.iter_mut().zip(&o.bytes_discarded_per_buffer) {
            *a += b;
        }
    }
}
