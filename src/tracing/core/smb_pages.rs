//! [`SmbAbi`]: typed, bounds-checked access to one SMB (the page and
//! chunk state machine of `smb_abi`). Producer-side methods trust the
//! memory; the service-side ones take `_untrusted` indices and return
//! errors instead of panicking.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use super::smb_abi::*;
use super::smb_abi::{CHUNK_ID_OFFSET, PACKETS_OFFSET, RETRY_ATTEMPTS, WRITER_ID_OFFSET};
use crate::mem::shared_mem::SharedMem;

/// An acquired chunk: an ownership token for one chunk's memory, valid for
/// the [`SmbAbi`] that made it. Not `Clone`: exactly one party owns a chunk
/// between acquire and release.
#[derive(Debug, PartialEq, Eq)]
pub struct Chunk {
    page_idx: usize,
    chunk_idx: u8,
    /// Absolute offset of the chunk header in the SMB.
    offset: usize,
    size: u16,
}

impl Chunk {
    pub fn page_idx(&self) -> usize {
        self.page_idx
    }
    pub fn chunk_idx(&self) -> usize {
        self.chunk_idx as usize
    }
    /// Absolute SMB offset of the chunk header.
    pub fn offset(&self) -> usize {
        self.offset
    }
    /// Chunk size including its header.
    pub fn size(&self) -> usize {
        self.size as usize
    }
    /// Absolute SMB offset of the first payload byte.
    pub fn payload_offset(&self) -> usize {
        self.offset + CHUNK_HEADER_SIZE
    }
    pub fn payload_size(&self) -> usize {
        self.size as usize - CHUNK_HEADER_SIZE
    }
    /// Absolute SMB offset one past the chunk.
    pub fn end(&self) -> usize {
        self.offset + self.size as usize
    }
}

/// Chunk counts by state over the whole SMB (see [`SmbAbi::stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmbStats {
    pub pages_free: usize,
    pub pages_invalid_layout: usize,
    pub chunks_free: usize,
    pub chunks_being_written: usize,
    pub chunks_being_read: usize,
    pub chunks_complete: usize,
}

/// Typed access to an SMB. Cheap to clone (shares the mapping).
#[derive(Debug, Clone)]
pub struct SmbAbi {
    mem: Arc<SharedMem>,
    page_size: usize,
    num_pages: usize,
    chunk_sizes: [u16; 8],
}

impl SmbAbi {
    /// Checks the geometry: page size 4 KiB..=64 KiB and a multiple of
    /// 4 KiB, SMB size a non-zero multiple of the page size.
    pub fn new(mem: Arc<SharedMem>, page_size: usize) -> Result<SmbAbi, SmbError> {
        let size = mem.len();
        let ok = (MIN_PAGE_SIZE..=MAX_ABI_PAGE_SIZE).contains(&page_size)
            && page_size.is_multiple_of(MIN_PAGE_SIZE)
            && size >= page_size
            && size.is_multiple_of(page_size);
        if !ok {
            return Err(SmbError::BadGeometry { size, page_size });
        }
        let mut chunk_sizes = [0u16; 8];
        for (layout, n) in CHUNKS_FOR_LAYOUT.iter().enumerate() {
            chunk_sizes[layout] = chunk_size_for(page_size, *n) as u16;
        }
        Ok(SmbAbi {
            mem,
            page_size,
            num_pages: size / page_size,
            chunk_sizes,
        })
    }

    pub fn mem(&self) -> &Arc<SharedMem> {
        &self.mem
    }
    pub fn page_size(&self) -> usize {
        self.page_size
    }
    pub fn num_pages(&self) -> usize {
        self.num_pages
    }
    pub fn size(&self) -> usize {
        self.mem.len()
    }

    /// Chunk size (with header) for a layout value 0..=7; 0 if invalid.
    pub fn chunk_size_for_layout(&self, layout: u32) -> usize {
        self.chunk_sizes[(layout & 7) as usize] as usize
    }

    fn bitmap_word(&self, page: usize) -> Result<&AtomicU32, SmbError> {
        if page >= self.num_pages {
            return Err(SmbError::PageOutOfRange {
                page,
                num_pages: self.num_pages,
            });
        }
        // Cannot fail: pages are 4 KiB aligned and inside the mapping.
        self.mem
            .atomic_u32(page * self.page_size)
            .ok_or(SmbError::PageOutOfRange {
                page,
                num_pages: self.num_pages,
            })
    }

    /// Current bitmap of `page` (acquire), or an error if out of range.
    pub fn page_bitmap(&self, page: usize) -> Result<u32, SmbError> {
        Ok(self.bitmap_word(page)?.load(Ordering::Acquire))
    }

    /// True if the page is unpartitioned (bitmap 0).
    pub fn is_page_free(&self, page: usize) -> bool {
        matches!(self.page_bitmap(page), Ok(0))
    }

    /// Chunk state, or an error if the page/chunk does not exist.
    pub fn chunk_state(&self, page: usize, chunk: usize) -> Result<ChunkState, SmbError> {
        let bitmap = self.page_bitmap(page)?;
        self.check_chunk_idx(page, bitmap, chunk)?;
        Ok(bitmap_chunk_state(bitmap, chunk))
    }

    fn check_chunk_idx(&self, page: usize, bitmap: u32, chunk: usize) -> Result<usize, SmbError> {
        let layout = bitmap_layout(bitmap);
        if layout >= 6 {
            return Err(SmbError::ReservedLayout { page, layout });
        }
        let num_chunks = bitmap_num_chunks(bitmap);
        if chunk >= num_chunks {
            return Err(SmbError::ChunkOutOfRange {
                page,
                chunk,
                num_chunks,
            });
        }
        Ok(num_chunks)
    }

    /// The chunk descriptor for `(page, chunk)` under `bitmap`'s layout.
    /// Both indices must already be validated against `bitmap`.
    fn make_chunk(&self, page: usize, bitmap: u32, chunk: usize) -> Chunk {
        let size = self.chunk_sizes[bitmap_layout(bitmap) as usize];
        let offset = page * self.page_size + PAGE_HEADER_SIZE + chunk * size as usize;
        Chunk {
            page_idx: page,
            chunk_idx: chunk as u8,
            offset,
            size,
        }
    }

    /// Producer: partitions a free page (CAS 0 -> layout). False if the page
    /// was not free (or does not exist).
    pub fn try_partition_page(&self, page: usize, layout: PageLayout) -> bool {
        let Ok(word) = self.bitmap_word(page) else {
            return false;
        };
        let next = (layout as u32) << LAYOUT_SHIFT;
        word.compare_exchange(0, next, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    }

    /// Bit i set if chunk i of `page` is Free (0 for unpartitioned pages).
    pub fn free_chunks(&self, page: usize) -> u32 {
        let Ok(word) = self.bitmap_word(page) else {
            return 0;
        };
        let bitmap = word.load(Ordering::Relaxed);
        let mut res = 0;
        for i in 0..bitmap_num_chunks(bitmap) {
            if bitmap_chunk_state(bitmap, i) == ChunkState::Free {
                res |= 1 << i;
            }
        }
        res
    }

    fn wait_before_retry(attempt: u32, may_sleep: bool) {
        if attempt < RETRY_ATTEMPTS / 2 || !may_sleep {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(u64::from(attempt / 10)));
        }
    }

    /// CAS `expected -> desired` for one chunk; returns the chunk on success.
    fn try_acquire(
        &self,
        page: usize,
        chunk: usize,
        expected: ChunkState,
        desired: ChunkState,
        may_sleep: bool,
    ) -> Result<Chunk, SmbError> {
        let word = self.bitmap_word(page)?;
        for attempt in 0..RETRY_ATTEMPTS {
            let bitmap = word.load(Ordering::Acquire);
            self.check_chunk_idx(page, bitmap, chunk)?;
            let found = bitmap_chunk_state(bitmap, chunk);
            if found != expected {
                return Err(SmbError::UnexpectedState { page, chunk, found });
            }
            let next = with_chunk_state(bitmap, chunk, desired);
            if word
                .compare_exchange(bitmap, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(self.make_chunk(page, bitmap, chunk));
            }
            Self::wait_before_retry(attempt, may_sleep);
        }
        Err(SmbError::Contention { page })
    }

    /// Producer: Free -> BeingWritten, then writes `header` into the chunk.
    pub fn try_acquire_chunk_for_writing(
        &self,
        page: usize,
        chunk: usize,
        header: &ChunkHeader,
    ) -> Option<Chunk> {
        let c = self
            .try_acquire(
                page,
                chunk,
                ChunkState::Free,
                ChunkState::BeingWritten,
                true,
            )
            .ok()?;
        self.store_header(&c, header);
        Some(c)
    }

    fn store_header(&self, c: &Chunk, h: &ChunkHeader) {
        if let Some(w) = self.mem.atomic_u16(c.offset + WRITER_ID_OFFSET) {
            w.store(h.writer_id, Ordering::Relaxed);
        }
        if let Some(w) = self.mem.atomic_u32(c.offset + CHUNK_ID_OFFSET) {
            w.store(h.chunk_id, Ordering::Relaxed);
        }
        if let Some(w) = self.mem.atomic_u16(c.offset + PACKETS_OFFSET) {
            w.store(h.packets_word(), Ordering::Release);
        }
    }

    /// Service: Complete -> BeingRead for indices received from a producer.
    /// Never sleeps (a hostile producer could otherwise stall the service).
    pub fn try_acquire_chunk_for_reading(
        &self,
        page_untrusted: usize,
        chunk_untrusted: usize,
    ) -> Result<Chunk, SmbError> {
        self.try_acquire(
            page_untrusted,
            chunk_untrusted,
            ChunkState::Complete,
            ChunkState::BeingRead,
            false,
        )
    }

    /// A descriptor for a chunk without changing its state, for code that
    /// already owns it by protocol (the arbiter re-finding a BeingWritten
    /// chunk it holds back for direct patching; service SMB scraping, which
    /// copies without taking ownership). Errors if the page/chunk does not
    /// exist under the current layout.
    pub fn chunk_at(&self, page: usize, chunk: usize) -> Result<(ChunkState, Chunk), SmbError> {
        let bitmap = self.page_bitmap(page)?;
        self.check_chunk_idx(page, bitmap, chunk)?;
        Ok((
            bitmap_chunk_state(bitmap, chunk),
            self.make_chunk(page, bitmap, chunk),
        ))
    }

    /// Reads the chunk header (relaxed id/writer, acquire on `packets`).
    pub fn chunk_header(&self, c: &Chunk) -> ChunkHeader {
        let packets = self
            .mem
            .atomic_u16(c.offset + PACKETS_OFFSET)
            .map_or(0, |w| w.load(Ordering::Acquire));
        let chunk_id = self
            .mem
            .atomic_u32(c.offset + CHUNK_ID_OFFSET)
            .map_or(0, |w| w.load(Ordering::Relaxed));
        let writer_id = self
            .mem
            .atomic_u16(c.offset + WRITER_ID_OFFSET)
            .map_or(0, |w| w.load(Ordering::Relaxed));
        let (packet_count, flags) = ChunkHeader::split_packets_word(packets);
        ChunkHeader {
            chunk_id,
            writer_id,
            packet_count,
            flags,
        }
    }

    /// Service: header + a copy of the whole payload (chunk size - 8 bytes,
    /// however much the producer actually wrote) appended to `payload`.
    pub fn read_chunk(&self, c: &Chunk, payload: &mut Vec<u8>) -> ChunkHeader {
        let header = self.chunk_header(c);
        self.mem
            .read_append(c.payload_offset(), c.payload_size(), payload);
        header
    }

    /// Producer: bumps the packet count (release); returns the new count.
    /// Saturates at [`MAX_PACKET_COUNT`].
    pub fn increment_packet_count(&self, c: &Chunk) -> u16 {
        let Some(w) = self.mem.atomic_u16(c.offset + PACKETS_OFFSET) else {
            return 0;
        };
        let cur = w.load(Ordering::Relaxed);
        let (count, flags) = ChunkHeader::split_packets_word(cur);
        let count = (count + 1).min(MAX_PACKET_COUNT);
        w.store(
            ChunkHeader {
                packet_count: count,
                flags,
                ..Default::default()
            }
            .packets_word(),
            Ordering::Release,
        );
        count
    }

    /// Producer: ORs `flags` into the chunk flags.
    pub fn set_chunk_flags(&self, c: &Chunk, flags: u8) {
        if let Some(w) = self.mem.atomic_u16(c.offset + PACKETS_OFFSET) {
            let cur = w.load(Ordering::Relaxed);
            w.store(
                cur | ((flags as u16) << PACKET_COUNT_BITS),
                Ordering::Release,
            );
        }
    }

    /// Producer: clears `flags` from the chunk flags.
    pub fn clear_chunk_flags(&self, c: &Chunk, flags: u8) {
        if let Some(w) = self.mem.atomic_u16(c.offset + PACKETS_OFFSET) {
            let cur = w.load(Ordering::Relaxed);
            w.store(
                cur & !((flags as u16) << PACKET_COUNT_BITS),
                Ordering::Release,
            );
        }
    }

    /// Producer: BeingWritten -> Complete. Returns the page index.
    pub fn release_chunk_as_complete(&self, c: Chunk) -> Result<usize, SmbError> {
        self.release(c, ChunkState::BeingWritten, ChunkState::Complete)
    }

    /// Service: BeingRead -> Free, zeroing the chunk header first. When every
    /// chunk of the page is then free the page becomes unpartitioned.
    pub fn release_chunk_as_free(&self, c: Chunk) -> Result<usize, SmbError> {
        self.store_header(&c, &ChunkHeader::default());
        self.release(c, ChunkState::BeingRead, ChunkState::Free)
    }

    /// Shmem emulation (producer frees its own Complete chunks): Complete ->
    /// Free.
    pub fn release_complete_chunk_as_free(&self, c: Chunk) -> Result<usize, SmbError> {
        self.store_header(&c, &ChunkHeader::default());
        self.release(c, ChunkState::Complete, ChunkState::Free)
    }

    fn release(
        &self,
        c: Chunk,
        expected: ChunkState,
        desired: ChunkState,
    ) -> Result<usize, SmbError> {
        let page = c.page_idx;
        let chunk = c.chunk_idx as usize;
        let word = self.bitmap_word(page)?;
        for attempt in 0..RETRY_ATTEMPTS {
            let bitmap = word.load(Ordering::Relaxed);
            self.check_chunk_idx(page, bitmap, chunk)?;
            if self.chunk_sizes[bitmap_layout(bitmap) as usize] != c.size {
                return Err(SmbError::LayoutChanged { page });
            }
            let found = bitmap_chunk_state(bitmap, chunk);
            if found != expected {
                return Err(SmbError::UnexpectedState { page, chunk, found });
            }
            let mut next = with_chunk_state(bitmap, chunk, desired);
            if next & ALL_CHUNKS_MASK == 0 {
                next = 0;
            }
            if word
                .compare_exchange(bitmap, next, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Ok(page);
            }
            Self::wait_before_retry(attempt, desired != ChunkState::Free);
        }
        Err(SmbError::Contention { page })
    }

    /// Chunk counts by state (relaxed snapshot).
    pub fn stats(&self) -> SmbStats {
        let mut s = SmbStats::default();
        for page in 0..self.num_pages {
            let bitmap = self
                .bitmap_word(page)
                .map_or(0, |w| w.load(Ordering::Relaxed));
            match bitmap_layout(bitmap) {
                0 => s.pages_free += 1,
                6 | 7 => s.pages_invalid_layout += 1,
                _ => {}
            }
            for i in 0..bitmap_num_chunks(bitmap) {
                match bitmap_chunk_state(bitmap, i) {
                    ChunkState::Free => s.chunks_free += 1,
                    ChunkState::BeingWritten => s.chunks_being_written += 1,
                    ChunkState::BeingRead => s.chunks_being_read += 1,
                    ChunkState::Complete => s.chunks_complete += 1,
                }
            }
        }
        s
    }
}
