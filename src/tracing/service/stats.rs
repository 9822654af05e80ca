//! TraceStats for a session (GetTraceStats and the `trace_stats` packet).

use crate::protozero::{begin_nested, end_nested, put_varint, VecStream};

use super::service::TracingService;
use super::types::SessionId;

/// TraceStats field numbers.
mod field {
    pub const PRODUCERS_CONNECTED: u32 = 2;
    pub const PRODUCERS_SEEN: u32 = 3;
    pub const DATA_SOURCES_REGISTERED: u32 = 4;
    pub const DATA_SOURCES_SEEN: u32 = 5;
    pub const TRACING_SESSIONS: u32 = 6;
    pub const TOTAL_BUFFERS: u32 = 7;
    pub const CHUNKS_DISCARDED: u32 = 8;
    pub const PATCHES_DISCARDED: u32 = 9;
    pub const INVALID_PACKETS: u32 = 10;
    pub const FILTER_STATS: u32 = 11;
    pub const FLUSHES_REQUESTED: u32 = 12;
    pub const FLUSHES_SUCCEEDED: u32 = 13;
    pub const FLUSHES_FAILED: u32 = 14;
    pub const FINAL_FLUSH_OUTCOME: u32 = 15;
}

impl TracingService {
    /// Encoded TraceStats: one BufferStats per session buffer (config
    /// order), service-wide counters, and the session's own counters.
    /// `chunks_discarded` / `patches_discarded` are service-wide, as
    /// upstream.
    pub(super) fn trace_stats_for(&self, sid: SessionId) -> Vec<u8> {
        let mut s = VecStream::new();
        let Some(sess) = self.sessions.get(&sid) else {
            return Vec::new();
        };
        for b in &sess.buffers {
            if let Some(buf) = self.buffers.get(b) {
                buf.stats().encode_in_trace_stats(&mut s);
            }
        }
        let (chunks_discarded, patches_discarded) = (self.chunks_discarded, self.patches_discarded);
        let registered: usize = self.producers.values().map(|p| p.data_sources.len()).sum();
        put_varint(
            &mut s,
            field::PRODUCERS_CONNECTED,
            self.producers.len() as u64,
        );
        put_varint(&mut s, field::PRODUCERS_SEEN, self.producers_seen);
        put_varint(&mut s, field::DATA_SOURCES_REGISTERED, registered as u64);
        put_varint(&mut s, field::DATA_SOURCES_SEEN, self.data_sources_seen);
        put_varint(&mut s, field::TRACING_SESSIONS, self.sessions.len() as u64);
        put_varint(&mut s, field::TOTAL_BUFFERS, self.buffers.len() as u64);
        put_varint(&mut s, field::CHUNKS_DISCARDED, chunks_discarded);
        put_varint(&mut s, field::PATCHES_DISCARDED, patches_discarded);
        put_varint(&mut s, field::INVALID_PACKETS, sess.stats.invalid_packets);
        put_varint(
            &mut s,
            field::FLUSHES_REQUESTED,
            sess.stats.flushes_requested,
        );
        put_varint(
            &mut s,
            field::FLUSHES_SUCCEEDED,
            sess.stats.flushes_succeeded,
        );
        put_varint(&mut s, field::FLUSHES_FAILED, sess.stats.flushes_failed);
        if sess.stats.final_flush_outcome != 0 {
            put_varint(
                &mut s,
                field::FINAL_FLUSH_OUTCOME,
                sess.stats.final_flush_outcome as u64,
            );
        }
        if sess.read.filter.is_some() {
            let f = &sess.read.filter_stats;
            let n = begin_nested(&mut s, field::FILTER_STATS);
            put_varint(&mut s, 1, f.input_packets);
            put_varint(&mut s, 2, f.input_bytes);
            put_varint(&mut s, 3, f.output_bytes);
            put_varint(&mut s, 4, f.errors);
            for &b in &f.bytes_discarded_per_buffer {
                put_varint(&mut s, 20, b);
            }
            end_nested(&mut s, n);
        }
        s.into_bytes()
    }
}
