//! What the producer tells the service about committed chunks: one
//! CommitData request's worth of moves, patches and a flush ack (converted
//! to `pb::CommitDataRequest` by the IPC adapter), and the transport trait
//! the arbiter sends them through.

use super::smb_abi::PATCH_SIZE;

/// Global id of a service-side trace buffer.
pub type BufferId = u16;
/// Id of one trace writer (packet sequence) within a producer.
pub type WriterId = u16;

/// A chunk the service should copy out (CommitDataRequest.chunks_to_move).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkToMove {
    pub page: u32,
    pub chunk: u32,
    pub target_buffer: BufferId,
}

/// One 4-byte fix-up (CommitDataRequest.ChunkToPatch.Patch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Patch {
    /// From the first payload byte (after the 8-byte chunk header).
    pub offset: u32,
    pub data: [u8; PATCH_SIZE],
}

/// Patches for one chunk (CommitDataRequest.chunks_to_patch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkToPatch {
    pub target_buffer: BufferId,
    pub writer_id: WriterId,
    pub chunk_id: u32,
    pub patches: Vec<Patch>,
    /// More patches for this chunk will follow in a later batch.
    pub has_more_patches: bool,
}

/// One CommitData request's worth of work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitBatch {
    pub chunks_to_move: Vec<ChunkToMove>,
    pub chunks_to_patch: Vec<ChunkToPatch>,
    /// Acks every flush request with id <= this.
    pub flush_request_id: Option<u64>,
}

/// Largest CommitData request Perfetto producers send (IPC buffer 128 KiB
/// minus headroom).
pub const MAX_COMMIT_REQUEST_BYTES: usize = 128 * 1024 - 512;
/// The service applies at most this many patches per ChunkToPatch.
pub const MAX_PATCHES_PER_CHUNK_TO_PATCH: usize = 1024;

/// Upper bounds of the encoded sizes (tags, lengths, max-width varints).
const MOVE_ESTIMATE: usize = 24;
const PATCH_ENTRY_ESTIMATE: usize = 32;
const PATCH_ESTIMATE: usize = 16;

impl CommitBatch {
    pub fn is_empty(&self) -> bool {
        self.chunks_to_move.is_empty()
            && self.chunks_to_patch.is_empty()
            && self.flush_request_id.is_none()
    }

    /// Upper bound of the encoded CommitDataRequest size.
    pub fn estimated_size(&self) -> usize {
        16 + self.chunks_to_move.len() * MOVE_ESTIMATE
            + self
                .chunks_to_patch
                .iter()
                .map(|c| PATCH_ENTRY_ESTIMATE + c.patches.len() * PATCH_ESTIMATE)
                .sum::<usize>()
    }

    /// Splits the batch into requests of at most `max_bytes` (estimated),
    /// keeping order: moves first, then patches; a ChunkToPatch longer than
    /// [`MAX_PATCHES_PER_CHUNK_TO_PATCH`] (or than fits) is cut into pieces
    /// marked `has_more_patches`; the flush ack rides on the last request.
    /// An empty batch yields one empty request.
    pub fn split(self, max_bytes: usize) -> Vec<CommitBatch> {
        let max_bytes = max_bytes.max(16 + PATCH_ENTRY_ESTIMATE + PATCH_ESTIMATE);
        let mut out = vec![CommitBatch::default()];
        let mut size = 16;
        for m in self.chunks_to_move {
            if size + MOVE_ESTIMATE > max_bytes {
                out.push(CommitBatch::default());
                size = 16;
            }
            size += MOVE_ESTIMATE;
            out.last_mut().unwrap().chunks_to_move.push(m);
        }
        for ctp in self.chunks_to_patch {
            let mut rest = ctp.patches.as_slice();
            loop {
                if size + PATCH_ENTRY_ESTIMATE + PATCH_ESTIMATE > max_bytes {
                    out.push(CommitBatch::default());
                    size = 16;
                }
                let room = (max_bytes - size - PATCH_ENTRY_ESTIMATE) / PATCH_ESTIMATE;
                let n = rest.len().min(room).min(MAX_PATCHES_PER_CHUNK_TO_PATCH);
                let (now, later) = rest.split_at(n);
                size += PATCH_ENTRY_ESTIMATE + n * PATCH_ESTIMATE;
                out.last_mut().unwrap().chunks_to_patch.push(ChunkToPatch {
                    patches: now.to_vec(),
                    has_more_patches: !later.is_empty() || ctp.has_more_patches,
                    ..ctp.clone()
                });
                rest = later;
                if rest.is_empty() {
                    break;
                }
            }
        }
        out.last_mut().unwrap().flush_request_id = self.flush_request_id;
        out
    }
}

/// How the arbiter talks to the service (the IPC adapter implements it).
///
/// Methods are called from writer threads and must not call back into the
/// [`Arbiter`](super::arbiter::Arbiter) (they run under its send lock). They should be quick: queue
/// the message for the IPC thread.
pub trait ProducerTransport: Send + Sync {
    /// Send a CommitDataRequest.
    fn commit_data(&self, batch: CommitBatch);
    /// Send RegisterTraceWriter (a writer was created).
    fn register_trace_writer(&self, writer_id: WriterId, target_buffer: BufferId);
    /// Send UnregisterTraceWriter (a writer was dropped).
    fn unregister_trace_writer(&self, writer_id: WriterId);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_order_and_bounds() {
        let moves: Vec<_> = (0..5000)
            .map(|i| ChunkToMove {
                page: i,
                chunk: 0,
                target_buffer: 1,
            })
            .collect();
        let patches: Vec<_> = (0..3000)
            .map(|i| Patch {
                offset: i,
                data: [1; 4],
            })
            .collect();
        let batch = CommitBatch {
            chunks_to_move: moves.clone(),
            chunks_to_patch: vec![ChunkToPatch {
                target_buffer: 1,
                writer_id: 2,
                chunk_id: 3,
                patches: patches.clone(),
                has_more_patches: false,
            }],
            flush_request_id: Some(9),
        };
        assert!(batch.estimated_size() > MAX_COMMIT_REQUEST_BYTES);
        let parts = batch.split(MAX_COMMIT_REQUEST_BYTES);
        assert!(parts.len() >= 2);
        for (i, p) in parts.iter().enumerate() {
            assert!(p.estimated_size() <= MAX_COMMIT_REQUEST_BYTES);
            assert_eq!(p.flush_request_id.is_some(), i + 1 == parts.len());
            for c in &p.chunks_to_patch {
                assert!(c.patches.len() <= MAX_PATCHES_PER_CHUNK_TO_PATCH);
            }
        }
        let all_moves: Vec<_> = parts
            .iter()
            .flat_map(|p| p.chunks_to_move.clone())
            .collect();
        assert_eq!(all_moves, moves);
        let pieces: Vec<_> = parts
            .iter()
            .flat_map(|p| p.chunks_to_patch.clone())
            .collect();
        assert!(pieces.len() >= 3);
        assert!(pieces[..pieces.len() - 1]
            .iter()
            .all(|c| c.has_more_patches));
        assert!(!pieces.last().unwrap().has_more_patches);
        let all: Vec<_> = pieces.into_iter().flat_map(|c| c.patches).collect();
        assert_eq!(all, patches);
        assert_eq!(
            CommitBatch::default().split(100),
            vec![CommitBatch::default()]
        );
    }
}
