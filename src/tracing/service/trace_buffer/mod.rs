//! The central trace buffer of a tracing session (one per
//! `TraceConfig.buffers` entry), compatible in behaviour with Perfetto's
//! `TraceBufferV1`.
//!
//! Producers commit chunks (see `tracing::core::smb_abi`); the service
//! copies each chunk's payload here with [`TraceBuffer::copy_chunk_untrusted`],
//! applies out-of-band patches with [`TraceBuffer::try_patch_chunk_contents`]
//! and later drains whole packets with [`TraceBuffer::read_next_trace_packet`].
//!
//! Storage is one flat allocation of exactly the configured size (zeroed
//! memory from the allocator, so pages are only committed once written).
//! Records (16-byte header + payload, 16-byte aligned) are appended at a
//! write cursor that wraps to offset 0, overwriting the oldest records whole.
//! A sorted index keyed by `(producer, writer, chunk_id)` keeps per-chunk read
//! state; its size is bounded by `size / 16` entries.
//!
//! Everything a producer sends is untrusted: sizes, counts, flags and ids
//! are checked, violations are counted in [`BufferStats::abi_violations`],
//! and nothing here panics on hostile input.

mod continuity;
mod index;
mod payload;
mod read;
mod record;
mod rewind;
mod stats;
mod write;
mod writer_stats;

#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod test_util;
#[cfg(test)]
mod tests_hostile;
#[cfg(test)]
mod tests_read;
#[cfg(test)]
mod tests_rewind;
#[cfg(test)]
mod tests_write;

use std::collections::BTreeMap;
use std::fmt;

pub use index::ClientIdentity;
pub use payload::ChunkPayload;
pub use read::{PacketInfo, TracePacket};
pub use stats::{BufferStats, TRACE_STATS_BUFFER_STATS_FIELD};
pub use write::Patch;
pub use writer_stats::{encode_histogram_def, ChunkPayloadHistogram, CHUNK_PAYLOAD_BUCKETS};

use continuity::EvictedTail;
use index::{ChunkIndex, SequenceKey};
use read::{Ranges, ReadIter, SkipHints};
use record::{MAX_RECORD_SIZE, RECORD_HEADER_SIZE};

/// What happens when a new chunk would overwrite data not yet read.
/// Mirrors `TraceConfig.BufferConfig.FillPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverwritePolicy {
    /// Overwrite the oldest records (`RING_BUFFER`, the default).
    Overwrite,
    /// Drop the write and every later one (`DISCARD`).
    Discard,
}

/// Why a buffer could not be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferSizeError {
    /// Zero, or not a multiple of 16 bytes.
    Misaligned(usize),
    /// Record offsets are 32-bit, so the buffer must be below 4 GiB.
    TooLarge(usize),
}

impl fmt::Display for BufferSizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferSizeError::Misaligned(n) => {
                write!(
                    f,
                    "trace buffer size {n} must be a non-zero multiple of 16 bytes"
                )
            }
            BufferSizeError::TooLarge(n) => write!(f, "trace buffer size {n} must be below 4 GiB"),
        }
    }
}

impl std::error::Error for BufferSizeError {}

/// A session's central buffer. See the module docs.
#[derive(Debug)]
pub struct TraceBuffer {
    /// Exactly `size` bytes. A zero `size` field at a record boundary marks
    /// memory never written.
    data: Vec<u8>,
    /// Bytes from the start that have ever been written (for cloning).
    used_size: usize,
    /// Where the next record goes; always 16-aligned and < `data.len()`.
    wptr: usize,
    /// Largest acceptable record: min(buffer size, 65535).
    max_record_size: usize,
    policy: OverwritePolicy,
    /// Sticky: set once a DISCARD buffer refused a write.
    discard_writes: bool,
    /// Clones are snapshots: writes and patches are ignored.
    read_only: bool,
    has_data: bool,
    index: ChunkIndex,
    /// Newest chunk id seen per sequence (wrap-aware); reading a sequence
    /// starts right after it, i.e. at its oldest chunk.
    last_chunk_id_written: BTreeMap<SequenceKey, u32>,
    /// Read state of each sequence's newest consumed chunk that left the
    /// index (see `continuity`).
    evicted: BTreeMap<SequenceKey, EvictedTail>,
    read_iter: ReadIter,
    /// Bumped by every write and patch: read-side caches of index state
    /// are valid only while it is unchanged.
    index_generation: u64,
    /// Consumed runs at the start of sequences, found by earlier passes.
    skip_hints: SkipHints,
    /// `stats.bytes_written` when the last read pass began.
    bytes_written_at_read: u64,
    /// Reused list of the byte ranges of the packet being read.
    read_scratch: Ranges,
    stats: BufferStats,
    /// Fill level of each fully read chunk, per `(producer, writer)`.
    writer_stats: BTreeMap<SequenceKey, ChunkPayloadHistogram>,
}

impl TraceBuffer {
    /// Creates a buffer of `size_bytes` (normally `size_kb * 1024`).
    pub fn new(size_bytes: usize, policy: OverwritePolicy) -> Result<Self, BufferSizeError> {
        if size_bytes == 0 || !size_bytes.is_multiple_of(RECORD_HEADER_SIZE) {
            return Err(BufferSizeError::Misaligned(size_bytes));
        }
        if size_bytes > u32::MAX as usize {
            return Err(BufferSizeError::TooLarge(size_bytes));
        }
        let stats = BufferStats {
            buffer_size: size_bytes as u64,
            ..Default::default()
        };
        Ok(TraceBuffer {
            // A zeroed allocation: large ones come straight from mmap and
            // stay uncommitted until touched.
            data: vec![0u8; size_bytes],
            used_size: 0,
            wptr: 0,
            max_record_size: size_bytes.min(MAX_RECORD_SIZE),
            policy,
            discard_writes: false,
            read_only: false,
            has_data: false,
            index: ChunkIndex::default(),
            last_chunk_id_written: BTreeMap::new(),
            evicted: BTreeMap::new(),
            read_iter: ReadIter::default(),
            index_generation: 0,
            skip_hints: SkipHints::default(),
            bytes_written_at_read: 0,
            read_scratch: Ranges::new(),
            stats,
            writer_stats: BTreeMap::new(),
        })
    }

    /// A read-only snapshot for `CloneSession`: same contents, index and
    /// read cursors; read counters (`bytes_read`, `chunks_read`,
    /// `readaheads_*`) restart at zero. The clone ignores writes and
    /// patches; reading it does not affect `self`.
    pub fn clone_read_only(&self) -> TraceBuffer {
        let mut data = vec![0u8; self.data.len()];
        data[..self.used_size].copy_from_slice(&self.data[..self.used_size]);
        let mut stats = self.stats;
        stats.bytes_read = 0;
        stats.chunks_read = 0;
        stats.readaheads_failed = 0;
        stats.readaheads_succeeded = 0;
        TraceBuffer {
            data,
            used_size: self.used_size,
            wptr: self.wptr,
            max_record_size: self.max_record_size,
            policy: self.policy,
            discard_writes: self.discard_writes,
            read_only: true,
            has_data: self.has_data,
            index: self.index.clone(),
            last_chunk_id_written: self.last_chunk_id_written.clone(),
            evicted: self.evicted.clone(),
            read_iter: ReadIter::default(),
            index_generation: 0,
            skip_hints: SkipHints::default(),
            bytes_written_at_read: stats.bytes_written,
            read_scratch: Ranges::new(),
            stats,
            writer_stats: BTreeMap::new(),
        }
    }

    /// This buffer, from now on ignoring writes and patches (a buffer
    /// handed to a clone by `transfer_on_clone`).
    pub fn into_read_only(mut self) -> TraceBuffer {
        self.read_only = true;
        self
    }

    /// Configured size in bytes.
    pub fn size(&self) -> usize {
        self.data.len()
    }

    /// Bytes of the buffer that have ever been written.
    pub fn used_size(&self) -> usize {
        self.used_size
    }

    /// Bytes of chunks written since the last read pass began: how close
    /// a buffer read only now and then is to filling up.
    pub fn written_since_read(&self) -> u64 {
        self.stats.bytes_written - self.bytes_written_at_read
    }

    pub fn overwrite_policy(&self) -> OverwritePolicy {
        self.policy
    }

    /// True once any chunk was accepted (even if since overwritten).
    pub fn has_data(&self) -> bool {
        self.has_data
    }

    /// True if this DISCARD buffer has stopped accepting writes.
    pub fn is_discarding(&self) -> bool {
        self.discard_writes
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    pub fn stats(&self) -> &BufferStats {
        &self.stats
    }

    /// The service saw a writer's sequence skip chunks that never came
    /// (upstream's `trace_writer_packet_loss`: times loss was detected).
    pub fn note_writer_packet_loss(&mut self) {
        self.stats.trace_writer_packet_loss += 1;
    }

    /// Chunk fill histograms per `(producer_id, writer_id)`, updated as
    /// chunks are fully read. Clones start empty.
    pub fn writer_stats(&self) -> impl Iterator<Item = ((u16, u16), &ChunkPayloadHistogram)> + '_ {
        self.writer_stats.iter().map(|(k, v)| (*k, v))
    }

    /// Number of chunk records currently indexed.
    pub fn num_chunks(&self) -> usize {
        self.index.len()
    }

    /// Heap bytes held by the payload storage (for the bounded-memory
    /// guarantee; the index adds at most one entry per 16 bytes).
    pub fn storage_capacity(&self) -> usize {
        self.data.capacity()
    }
}
