//! Producer-side SMB arbiter: hands chunks to trace writers and batches
//! what must be told to the service (Perfetto's SharedMemoryArbiterImpl).
//!
//! * Chunk allocation scans pages round-robin from the last page used,
//!   partitions free pages with the configured layout and CASes a free chunk
//!   to BeingWritten. When nothing is free, the writer's
//!   [`BufferExhaustedPolicy`] decides: `Stall` sends pending commits and
//!   sleeps with backoff (bounded by [`ArbiterConfig::max_stall_attempts`],
//!   after which it gives up like `Drop`), `Drop` returns no chunk at once
//!   and the writer discards data until a chunk is available again.
//! * Returned chunks and filled patches accumulate in a [`CommitBatch`]. It
//!   is sent through [`ProducerTransport::commit_data`] right away unless
//!   [`ArbiterConfig::batch_commits`] is set, in which case it is sent when
//!   patches must go out, when half the SMB is pending, on a stall, or on
//!   an explicit [`Arbiter::flush_pending_commits`].
//! * With direct SMB patching (the service advertised it), a returned chunk
//!   that still awaits patches stays BeingWritten while it is in the pending
//!   batch, and its patches are written in place; anything not patched by
//!   the time the batch is sent is released as Complete and patched through
//!   `chunks_to_patch`.
//!
//! Thread safety: allocation and batching state sit behind one mutex; chunk
//! memory is written without locks by the writer owning the chunk. Batches
//! are sent under a second lock so they reach the transport in order.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::patch_list::PatchList;
use super::smb_abi::{
    Chunk, ChunkHeader, ChunkState, PageLayout, SmbAbi, FLAG_CHUNK_NEEDS_PATCHING, PATCH_SIZE,
};
use super::trace_writer::TraceWriter;

pub use super::commit_batch::{
    BufferId, ChunkToMove, ChunkToPatch, CommitBatch, Patch, ProducerTransport, WriterId,
};
use super::writer_ids::WriterIdAllocator;

/// What a writer does when the SMB has no free chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferExhaustedPolicy {
    /// Wait for the service to free chunks (bounded, then drop).
    Stall,
    /// Discard data until a chunk frees up; the next packet that makes it
    /// carries `previous_packet_dropped`.
    Drop,
}

/// Arbiter settings.
#[derive(Debug, Clone, Copy)]
pub struct ArbiterConfig {
    /// Layout for newly partitioned pages (Perfetto uses one chunk/page).
    pub page_layout: PageLayout,
    /// Stall iterations before a `Stall` writer gives up and drops.
    pub max_stall_attempts: u32,
    /// Longest sleep between two stall iterations (the sleep grows 8x per
    /// iteration up to this). Perfetto's 100 ms suits apps; a producer
    /// that must keep up with a kernel buffer wants to notice freed chunks
    /// sooner than that.
    pub max_stall_sleep: Duration,
    /// Hold commits until patches, half-full SMB, stall or flush.
    pub batch_commits: bool,
}

impl Default for ArbiterConfig {
    fn default() -> Self {
        ArbiterConfig {
            page_layout: PageLayout::Div1,
            max_stall_attempts: 300,
            max_stall_sleep: Duration::from_millis(100),
            batch_commits: false,
        }
    }
}

/// Counters, see [`Arbiter::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArbiterStats {
    /// Times a writer had to wait for a free chunk.
    pub stalls: u64,
    /// Stalls that hit the bound and fell back to dropping.
    pub stall_give_ups: u64,
    /// Chunk requests that found the SMB full and returned nothing.
    pub chunk_requests_failed: u64,
    pub chunks_committed: u64,
    pub commit_batches_sent: u64,
    pub patches_sent: u64,
    pub patches_applied_in_smb: u64,
}

#[derive(Default)]
struct Counters {
    stalls: AtomicU64,
    stall_give_ups: AtomicU64,
    chunk_requests_failed: AtomicU64,
    chunks_committed: AtomicU64,
    commit_batches_sent: AtomicU64,
    patches_sent: AtomicU64,
    patches_applied_in_smb: AtomicU64,
}

struct State {
    page_cursor: usize,
    pending: CommitBatch,
    bytes_pending: usize,
    ids: WriterIdAllocator,
}

/// See [`Arbiter::hold_commits`].
#[must_use = "commits are held only while the guard lives"]
pub struct CommitHold {
    arbiter: Arc<Arbiter>,
}

impl Drop for CommitHold {
    fn drop(&mut self) {
        if self.arbiter.holds.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.arbiter.flush_pending_commits();
        }
    }
}

/// The producer-side SMB arbiter. Share it as `Arc<Arbiter>`.
pub struct Arbiter {
    abi: SmbAbi,
    config: ArbiterConfig,
    transport: Arc<dyn ProducerTransport>,
    state: Mutex<State>,
    send_lock: Mutex<()>,
    direct_patching: AtomicBool,
    /// Open [`CommitHold`]s: commits wait as with `batch_commits`.
    holds: AtomicUsize,
    counters: Counters,
}

impl std::fmt::Debug for Arbiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arbiter")
            .field("abi", &self.abi)
            .field("config", &self.config)
            .finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking writer thread must not take the whole producer down.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Arbiter {
    pub fn new(
        abi: SmbAbi,
        config: ArbiterConfig,
        transport: Arc<dyn ProducerTransport>,
    ) -> Arc<Arbiter> {
        Arc::new(Arbiter {
            abi,
            config,
            transport,
            state: Mutex::new(State {
                page_cursor: 0,
                pending: CommitBatch::default(),
                bytes_pending: 0,
                ids: WriterIdAllocator::default(),
            }),
            send_lock: Mutex::new(()),
            direct_patching: AtomicBool::new(false),
            holds: AtomicUsize::new(0),
            counters: Counters::default(),
        })
    }

    pub fn abi(&self) -> &SmbAbi {
        &self.abi
    }

    /// Enables in-place patching; call with the service's
    /// `direct_smb_patching_supported` (InitializeConnection reply).
    pub fn set_direct_smb_patching(&self, enabled: bool) {
        self.direct_patching.store(enabled, Ordering::Relaxed);
    }

    /// Creates a writer on a new writer id and sends RegisterTraceWriter.
    /// `None` when all 32767 ids are in use.
    pub fn create_trace_writer(
        self: &Arc<Self>,
        target_buffer: BufferId,
        policy: BufferExhaustedPolicy,
    ) -> Option<TraceWriter> {
        let id = lock(&self.state).ids.allocate()?;
        self.transport.register_trace_writer(id, target_buffer);
        Some(TraceWriter::new(self.clone(), id, target_buffer, policy))
    }

    /// Frees a writer id and sends UnregisterTraceWriter (writer drop).
    pub(crate) fn release_writer_id(&self, id: WriterId) {
        lock(&self.state).ids.free(id);
        self.transport.unregister_trace_writer(id);
    }

    /// Acks flush request `id` (after the data sources flushed their
    /// writers) and sends the pending batch.
    pub fn notify_flush_complete(&self, flush_request_id: u64) {
        {
            let mut st = lock(&self.state);
            let cur = st.pending.flush_request_id.unwrap_or(0);
            st.pending.flush_request_id = Some(cur.max(flush_request_id));
        }
        self.flush_pending_commits();
    }

    /// Counters (relaxed snapshot).
    pub fn stats(&self) -> ArbiterStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ArbiterStats {
            stalls: l(&c.stalls),
            stall_give_ups: l(&c.stall_give_ups),
            chunk_requests_failed: l(&c.chunk_requests_failed),
            chunks_committed: l(&c.chunks_committed),
            commit_batches_sent: l(&c.commit_batches_sent),
            patches_sent: l(&c.patches_sent),
            patches_applied_in_smb: l(&c.patches_applied_in_smb),
        }
    }

    fn try_get_chunk(&self, header: &ChunkHeader) -> Option<Chunk> {
        let mut st = lock(&self.state);
        let n = self.abi.num_pages();
        let layout = self.config.page_layout;
        for i in 0..n {
            let page = (st.page_cursor + i) % n;
            let is_new = self.abi.is_page_free(page) && self.abi.try_partition_page(page, layout);
            let mut free = if is_new {
                (1u32 << layout.num_chunks()) - 1
            } else {
                self.abi.free_chunks(page)
            };
            let mut idx = 0;
            while free != 0 {
                if free & 1 != 0 {
                    if let Some(c) = self.abi.try_acquire_chunk_for_writing(page, idx, header) {
                        st.page_cursor = page;
                        return Some(c);
                    }
                }
                free >>= 1;
                idx += 1;
            }
        }
        None
    }

    /// Acquires a free chunk with `header`, applying `policy` when none is
    /// free. `None` means "drop".
    pub fn get_new_chunk(
        &self,
        header: &ChunkHeader,
        policy: BufferExhaustedPolicy,
    ) -> Option<Chunk> {
        let mut stalls = 0u32;
        let mut sleep_us = 0u64;
        loop {
            if let Some(c) = self.try_get_chunk(header) {
                return Some(c);
            }
            if policy == BufferExhaustedPolicy::Drop {
                self.counters
                    .chunk_requests_failed
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
            if stalls >= self.config.max_stall_attempts {
                self.counters.stall_give_ups.fetch_add(1, Ordering::Relaxed);
                self.counters
                    .chunk_requests_failed
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
            stalls += 1;
            self.counters.stalls.fetch_add(1, Ordering::Relaxed);
            // The service can only free what it has been told about.
            self.flush_pending_commits();
            std::thread::sleep(Duration::from_micros(sleep_us));
            sleep_us = next_stall_sleep_us(sleep_us, self.config.max_stall_sleep);
        }
    }

    /// A writer gives back a filled chunk, plus whatever patches are ready.
    pub(crate) fn return_completed_chunk(
        &self,
        chunk: Chunk,
        writer_id: WriterId,
        target_buffer: BufferId,
        patches: &mut PatchList,
    ) {
        let send_now = {
            let mut st = lock(&self.state);
            st.bytes_pending += chunk.size();
            let ctm = ChunkToMove {
                page: chunk.page_idx() as u32,
                chunk: chunk.chunk_idx() as u32,
                target_buffer,
            };
            let needs_patching =
                self.abi.chunk_header(&chunk).flags & FLAG_CHUNK_NEEDS_PATCHING != 0;
            if !(needs_patching && self.direct_patching.load(Ordering::Relaxed)) {
                // Our own chunk in BeingWritten: cannot fail unless the
                // service corrupted the bitmap; then the chunk is lost.
                let _ = self.abi.release_chunk_as_complete(chunk);
            }
            st.pending.chunks_to_move.push(ctm);
            self.counters
                .chunks_committed
                .fetch_add(1, Ordering::Relaxed);
            let added_patches = self.take_ready_patches(&mut st, writer_id, target_buffer, patches);
            self.should_send(&st, added_patches)
        };
        if send_now {
            self.flush_pending_commits();
        }
    }

    /// A writer has filled patches but no chunk to return.
    pub(crate) fn send_patches(
        &self,
        writer_id: WriterId,
        target_buffer: BufferId,
        patches: &mut PatchList,
    ) {
        let send_now = {
            let mut st = lock(&self.state);
            let added = self.take_ready_patches(&mut st, writer_id, target_buffer, patches);
            self.should_send(&st, added)
        };
        if send_now {
            self.flush_pending_commits();
        }
    }

    fn should_send(&self, st: &State, added_patches: bool) -> bool {
        let batching = self.config.batch_commits || self.holds.load(Ordering::Relaxed) > 0;
        !batching || added_patches || st.bytes_pending >= self.abi.size() / 2
    }

    /// Batches commits until the returned guard drops (then sends them
    /// in one CommitData), as `batch_commits` does for the whole arbiter:
    /// for a burst of writes, e.g. one ftrace drain that fills many chunks,
    /// so the service wakes once instead of once per chunk.
    pub fn hold_commits(self: &Arc<Self>) -> CommitHold {
        self.holds.fetch_add(1, Ordering::Relaxed);
        CommitHold {
            arbiter: self.clone(),
        }
    }

    /// Moves ready patches into the pending batch (or into the SMB).
    /// Returns true if any went into the batch.
    fn take_ready_patches(
        &self,
        st: &mut State,
        writer_id: WriterId,
        target_buffer: BufferId,
        patches: &mut PatchList,
    ) -> bool {
        let direct = self.direct_patching.load(Ordering::Relaxed);
        let mut added = false;
        let mut last: Option<usize> = None; // index into chunks_to_patch
        while let Some(p) = patches.pop_ready() {
            let more_for_chunk = patches.front().is_some_and(|n| n.chunk_id == p.chunk_id);
            if direct
                && self.try_direct_patch(
                    st,
                    writer_id,
                    p.chunk_id,
                    p.offset,
                    p.data,
                    more_for_chunk,
                )
            {
                self.counters
                    .patches_applied_in_smb
                    .fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let ctp = &mut st.pending.chunks_to_patch;
            let reuse = last.is_some_and(|i| ctp[i].chunk_id == p.chunk_id);
            if !reuse {
                ctp.push(ChunkToPatch {
                    target_buffer,
                    writer_id,
                    chunk_id: p.chunk_id,
                    patches: Vec::new(),
                    has_more_patches: false,
                });
                last = Some(ctp.len() - 1);
            }
            let i = last.unwrap_or(0);
            ctp[i].patches.push(Patch {
                offset: u32::from(p.offset),
                data: p.data,
            });
            self.counters.patches_sent.fetch_add(1, Ordering::Relaxed);
            added = true;
        }
        if let Some(i) = last {
            let ctp = &mut st.pending.chunks_to_patch[i];
            ctp.has_more_patches = patches.front().is_some_and(|n| n.chunk_id == ctp.chunk_id);
        }
        added
    }

    /// Writes a patch into a chunk still held back in the pending batch.
    fn try_direct_patch(
        &self,
        st: &State,
        writer_id: WriterId,
        chunk_id: u32,
        offset: u16,
        data: [u8; PATCH_SIZE],
        more_for_chunk: bool,
    ) -> bool {
        for ctm in st.pending.chunks_to_move.iter().rev() {
            let Ok((state, chunk)) = self.abi.chunk_at(ctm.page as usize, ctm.chunk as usize)
            else {
                continue;
            };
            if state != ChunkState::BeingWritten {
                continue;
            }
            let h = self.abi.chunk_header(&chunk);
            if h.writer_id != writer_id || h.chunk_id != chunk_id {
                continue;
            }
            if offset as usize + PATCH_SIZE > chunk.payload_size() {
                return false;
            }
            self.abi
                .mem()
                .write(chunk.payload_offset() + offset as usize, &data);
            if !more_for_chunk {
                self.abi
                    .clear_chunk_flags(&chunk, FLAG_CHUNK_NEEDS_PATCHING);
                let _ = self.abi.release_chunk_as_complete(chunk);
            }
            return true;
        }
        false
    }

    /// Sends the pending batch, if any. Chunks held back for direct
    /// patching are released as Complete first.
    pub fn flush_pending_commits(&self) {
        let _order = lock(&self.send_lock);
        let batch = {
            let mut st = lock(&self.state);
            if st.pending.is_empty() {
                return;
            }
            for ctm in &st.pending.chunks_to_move {
                if let Ok((ChunkState::BeingWritten, chunk)) =
                    self.abi.chunk_at(ctm.page as usize, ctm.chunk as usize)
                {
                    let _ = self.abi.release_chunk_as_complete(chunk);
                }
            }
            st.bytes_pending = 0;
            std::mem::take(&mut st.pending)
        };
        self.counters
            .commit_batches_sent
            .fetch_add(1, Ordering::Relaxed);
        self.transport.commit_data(batch);
    }
}

/// The sleep after a stall iteration that slept `us`: 0, 8, 72, 584 us...
/// (Perfetto's schedule) up to `cap`.
fn next_stall_sleep_us(us: u64, cap: Duration) -> u64 {
    let cap_us = u64::try_from(cap.as_micros()).unwrap_or(u64::MAX);
    (us + 1).saturating_mul(8).min(cap_us)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::shared_mem::SharedMem;

    #[test]
    fn stall_sleeps_grow_to_the_configured_cap() {
        let schedule = |cap: Duration| {
            let mut us = 0;
            (0..8)
                .map(|_| {
                    us = next_stall_sleep_us(us, cap);
                    us
                })
                .collect::<Vec<_>>()
        };
        let upstream = schedule(ArbiterConfig::default().max_stall_sleep);
        assert_eq!(
            upstream,
            [8, 72, 584, 4680, 37448, 100_000, 100_000, 100_000]
        );
        let short = schedule(Duration::from_millis(1));
        assert_eq!(short, [8, 72, 584, 1000, 1000, 1000, 1000, 1000]);
    }

    /// Counts the CommitData batches and chunks the arbiter sends.
    #[derive(Default)]
    struct Sent(Mutex<Vec<usize>>);
    impl ProducerTransport for Sent {
        fn commit_data(&self, batch: CommitBatch) {
            lock(&self.0).push(batch.chunks_to_move.len());
        }
        fn register_trace_writer(&self, _: WriterId, _: BufferId) {}
        fn unregister_trace_writer(&self, _: WriterId) {}
    }

    #[test]
    fn held_commits_go_out_in_one_batch() {
        let abi = SmbAbi::new(Arc::new(SharedMem::new_heap(64 * 4096).unwrap()), 4096).unwrap();
        let sent = Arc::new(Sent::default());
        let arbiter = Arbiter::new(abi, ArbiterConfig::default(), sent.clone());
        let mut w = arbiter
            .create_trace_writer(1, BufferExhaustedPolicy::Drop)
            .unwrap();
        let packet = vec![7u8; 3000];
        // Unheld: one batch per filled chunk.
        for _ in 0..4 {
            w.write_packet(&packet);
        }
        let unheld = lock(&sent.0).len();
        assert!(unheld >= 2, "{unheld}");
        // Held: nothing until the guard drops, then one batch.
        {
            let _outer = arbiter.hold_commits();
            {
                let _inner = arbiter.hold_commits();
                for _ in 0..4 {
                    w.write_packet(&packet);
                }
            }
            assert_eq!(lock(&sent.0).len(), unheld, "inner guard released early");
        }
        let batches = lock(&sent.0).clone();
        assert_eq!(batches.len(), unheld + 1);
        assert!(*batches.last().unwrap() >= 2, "{batches:?}");
    }
}
