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

impl CommitBatch {
    pub fn is_empty(&self) -> bool {
        self.chunks_to_move.is_empty()
            && self.chunks_to_patch.is_empty()
            && self.flush_request_id.is_none()
    }
}

/// How the arbiter talks to the service (the IPC adapter implements it).
///
/// Methods are called from writer threads and must not call back into the
/// [`Arbiter`] (they run under its send lock). They should be quick: queue
/// the message for the IPC thread.
pub trait ProducerTransport: Send + Sync {
    /// Send a CommitDataRequest.
    fn commit_data(&self, batch: CommitBatch);
    /// Send RegisterTraceWriter (a writer was created).
    fn register_trace_writer(&self, writer_id: WriterId, target_buffer: BufferId);
    /// Send UnregisterTraceWriter (a writer was dropped).
    fn unregister_trace_writer(&self, writer_id: WriterId);
}
