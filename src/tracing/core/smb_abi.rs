//! Shared-memory buffer (SMB) ABI, byte-compatible with Perfetto.
//!
//! # Layout
//!
//! The SMB is a run of equal pages (4 KiB..64 KiB, a multiple of 4 KiB; the
//! service uses at most 32 KiB). Each page starts with an 8-byte header and
//! is cut into 1, 2, 4, 7 or 14 equal chunks; each chunk starts with an
//! 8-byte header followed by its payload. Everything is little-endian and
//! fixed-width, so 32- and 64-bit processes agree.
//!
//! ```text
//!  SMB:   | page 0 | page 1 | page 2 | ...                 (page_size each)
//!
//!  page:  +--------------------+---------+---------+-----+---------+------+
//!         | bitmap u32 | rsvd  | chunk 0 | chunk 1 | ... | chunk n | tail |
//!         +--------------------+---------+---------+-----+---------+------+
//!          8 bytes               chunk_size = ((page_size - 8) / n) & !3
//!
//!  bitmap: bit 31     reserved
//!          bits 30-28 layout: 0 unpartitioned, 1..5 => 1,2,4,7,14 chunks,
//!                     6 and 7 reserved (invalid)
//!          bits 2i+1..2i  state of chunk i (i < 14):
//!                     0 Free, 1 BeingWritten, 2 BeingRead, 3 Complete
//!
//!  chunk: +----------------+--------------+-----------------------+--------
//!         | chunk_id u32   | writer_id u16| packets u16           | payload
//!         +----------------+--------------+-----------------------+--------
//!          offset 0          offset 4       offset 6: bits 0-9 count,
//!                                           bits 10-15 flags
//! ```
//!
//! # State machine (one chunk)
//!
//! ```text
//!   Free --producer CAS--> BeingWritten --producer--> Complete
//!    ^                                                   |
//!    +------service (header zeroed)---- BeingRead <--service CAS
//! ```
//!
//! A free page (bitmap 0) is partitioned by a CAS 0 -> `layout << 28`. When
//! the last busy chunk of a page is freed the whole bitmap drops back to 0.
//!
//! Producer-side methods trust the memory (it is ours to write). The
//! service-side entry points ([`SmbAbi::try_acquire_chunk_for_reading`],
//! [`SmbAbi::read_chunk`], [`SmbAbi::release_chunk_as_free`]) take indices
//! named `_untrusted` and return errors for anything a hostile producer can
//! put in the bitmap or headers; they never panic and never leave the
//! mapping (all accesses go through [`SharedMem`]).

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};
use std::sync::Arc;

use super::shared_mem::SharedMem;

/// Size of the header at the start of every page: `u32 header_bitmap` +
/// `u32 reserved`.
pub const PAGE_HEADER_SIZE: usize = 8;
/// Size of the header at the start of every chunk.
pub const CHUNK_HEADER_SIZE: usize = 8;

/// Chunk states, two bits per chunk in the page header bitmap.
pub const CHUNK_FREE: u32 = 0;
pub const CHUNK_BEING_WRITTEN: u32 = 1;
pub const CHUNK_BEING_READ: u32 = 2;
pub const CHUNK_COMPLETE: u32 = 3;

/// Number of chunks for each page layout value (bits 28..30 of the bitmap).
pub const CHUNKS_FOR_LAYOUT: [usize; 8] = [0, 1, 2, 4, 7, 14, 0, 0];
pub const LAYOUT_SHIFT: u32 = 28;
pub const LAYOUT_MASK: u32 = 0x7 << LAYOUT_SHIFT;
/// Bits of the bitmap holding chunk states (14 chunks x 2 bits).
pub const ALL_CHUNKS_MASK: u32 = 0x0FFF_FFFF;
/// Bits per chunk state and the mask of one state.
pub const CHUNK_STATE_SHIFT: u32 = 2;
pub const CHUNK_STATE_MASK: u32 = 0x3;
pub const MAX_CHUNKS_PER_PAGE: usize = 14;
/// Chunks start 4-byte aligned.
pub const CHUNK_ALIGNMENT: usize = 4;

/// Chunk flags (the top 6 bits of the chunk header's `packets` u16, i.e.
/// `packets >> 10`).
/// The first fragment continues the last packet of chunk_id - 1.
pub const FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK: u8 = 1 << 0;
/// The last fragment continues in chunk_id + 1.
pub const FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK: u8 = 1 << 1;
/// Some size field in the last fragment awaits an out-of-band patch.
pub const FLAG_CHUNK_NEEDS_PATCHING: u8 = 1 << 2;

/// Packet count occupies the low 10 bits of the `packets` field.
pub const PACKET_COUNT_BITS: u32 = 10;
pub const MAX_PACKET_COUNT: u16 = (1 << PACKET_COUNT_BITS) - 1;
/// Writers start a new chunk once a chunk holds this many packets.
pub const MAX_PACKETS_PER_CHUNK: u16 = MAX_PACKET_COUNT - 1;

/// Writer ids are 1..=MAX_WRITER_ID; 0 is invalid.
pub const MAX_WRITER_ID: u16 = (1 << 15) - 1;

/// Fragment size marking a packet the writer abandoned (2^28 - 1).
pub const PACKET_SIZE_DROP_PACKET: u32 = (1 << 28) - 1;
/// Bytes reserved for a fragment's size (a 4-byte redundant varint).
pub const PACKET_HEADER_SIZE: usize = 4;

/// Patches carry exactly this many bytes.
pub const PATCH_SIZE: usize = 4;

/// SMB size limits and defaults (bytes).
pub const DEFAULT_SHM_SIZE: usize = 256 * 1024;
pub const DEFAULT_SHM_PAGE_SIZE: usize = 4096;
pub const MAX_SHM_SIZE: usize = 32 * 1024 * 1024;
pub const MAX_SERVICE_PAGE_SIZE: usize = 32 * 1024;
pub const MAX_ABI_PAGE_SIZE: usize = 64 * 1024;
pub const MIN_PAGE_SIZE: usize = 4096;

/// CAS retries before giving up on a contended page header.
const RETRY_ATTEMPTS: u32 = 64;

/// The page header as laid out in memory (documentation and size checks
/// only; the live header is accessed through atomics).
#[repr(C)]
pub struct PageHeaderLayout {
    /// Chunk states and layout, see the module docs. Atomic.
    pub header_bitmap: u32,
    /// Unused, kept zero.
    pub reserved: u32,
}

/// The chunk header as laid out in memory (documentation and size checks
/// only; the live header is accessed through atomics).
#[repr(C)]
pub struct ChunkHeaderLayout {
    /// Monotonic per (producer, writer); wraps at 2^32.
    pub chunk_id: u32,
    /// 1..=[`MAX_WRITER_ID`]; 0 means "not initialised".
    pub writer_id: u16,
    /// Bits 0-9: number of fragments begun in the chunk. Bits 10-15: flags.
    pub packets: u16,
}

const _: () = assert!(size_of::<PageHeaderLayout>() == PAGE_HEADER_SIZE);
const _: () = assert!(size_of::<ChunkHeaderLayout>() == CHUNK_HEADER_SIZE);
const _: () = assert!(offset_of!(ChunkHeaderLayout, chunk_id) == CHUNK_ID_OFFSET);
const _: () = assert!(offset_of!(ChunkHeaderLayout, writer_id) == WRITER_ID_OFFSET);
const _: () = assert!(offset_of!(ChunkHeaderLayout, packets) == PACKETS_OFFSET);
const _: () = assert!(size_of::<AtomicU32>() == 4 && size_of::<AtomicU16>() == 2);
const _: () = assert!(CHUNK_FREE == 0, "zeroed memory must read as free");
const _: () = assert!(MAX_CHUNKS_PER_PAGE * CHUNK_STATE_SHIFT as usize <= LAYOUT_SHIFT as usize);
const _: () = assert!(ALL_CHUNKS_MASK == (1 << LAYOUT_SHIFT) - 1);
const _: () = assert!(chunk_size_for(4096, 1) == 4088);
const _: () = assert!(chunk_size_for(4096, 2) == 2044);
const _: () = assert!(chunk_size_for(4096, 4) == 1020);
const _: () = assert!(chunk_size_for(4096, 7) == 584);
const _: () = assert!(chunk_size_for(4096, 14) == 292);
const _: () = assert!(chunk_size_for(32768, 1) == 32760);
// Chunk sizes fit the u16 the ABI uses for them.
const _: () = assert!(chunk_size_for(MAX_ABI_PAGE_SIZE, 1) <= u16::MAX as usize);

const CHUNK_ID_OFFSET: usize = 0;
const WRITER_ID_OFFSET: usize = 4;
const PACKETS_OFFSET: usize = 6;

/// Largest 4-byte aligned chunk size for `num_chunks` chunks in a page.
pub const fn chunk_size_for(page_size: usize, num_chunks: usize) -> usize {
    if num_chunks == 0 || page_size < PAGE_HEADER_SIZE {
        return 0;
    }
    ((page_size - PAGE_HEADER_SIZE) / num_chunks) & !3
}

/// State of one chunk, as stored in its two bitmap bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ChunkState {
    Free = CHUNK_FREE,
    BeingWritten = CHUNK_BEING_WRITTEN,
    BeingRead = CHUNK_BEING_READ,
    Complete = CHUNK_COMPLETE,
}

impl ChunkState {
    fn from_bits(bits: u32) -> ChunkState {
        match bits & CHUNK_STATE_MASK {
            CHUNK_FREE => ChunkState::Free,
            CHUNK_BEING_WRITTEN => ChunkState::BeingWritten,
            CHUNK_BEING_READ => ChunkState::BeingRead,
            _ => ChunkState::Complete,
        }
    }
}

/// Valid page layouts (bitmap bits 28..30).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum PageLayout {
    Div1 = 1,
    Div2 = 2,
    Div4 = 3,
    Div7 = 4,
    Div14 = 5,
}

impl PageLayout {
    /// All valid layouts, fewest chunks first.
    pub const ALL: [PageLayout; 5] = [
        PageLayout::Div1,
        PageLayout::Div2,
        PageLayout::Div4,
        PageLayout::Div7,
        PageLayout::Div14,
    ];

    pub fn num_chunks(self) -> usize {
        CHUNKS_FOR_LAYOUT[self as usize]
    }
}

/// Layout bits of a bitmap (0..=7; 6 and 7 are invalid).
#[inline]
pub fn bitmap_layout(bitmap: u32) -> u32 {
    (bitmap & LAYOUT_MASK) >> LAYOUT_SHIFT
}

/// Number of chunks a bitmap declares (0 for unpartitioned or invalid).
#[inline]
pub fn bitmap_num_chunks(bitmap: u32) -> usize {
    CHUNKS_FOR_LAYOUT[bitmap_layout(bitmap) as usize]
}

/// State of chunk `chunk_idx` in a bitmap (`chunk_idx` < 14).
#[inline]
pub fn bitmap_chunk_state(bitmap: u32, chunk_idx: usize) -> ChunkState {
    ChunkState::from_bits(bitmap >> ((chunk_idx as u32 % 14) * CHUNK_STATE_SHIFT))
}

fn with_chunk_state(bitmap: u32, chunk_idx: usize, state: ChunkState) -> u32 {
    let shift = chunk_idx as u32 * CHUNK_STATE_SHIFT;
    (bitmap & !(CHUNK_STATE_MASK << shift)) | ((state as u32) << shift)
}

/// Decoded chunk header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChunkHeader {
    pub chunk_id: u32,
    pub writer_id: u16,
    /// Low 10 bits of `packets`.
    pub packet_count: u16,
    /// High 6 bits of `packets` (`FLAG_*`).
    pub flags: u8,
}

impl ChunkHeader {
    /// The `packets` word: count in bits 0-9, flags in bits 10-15.
    pub fn packets_word(&self) -> u16 {
        (self.packet_count & MAX_PACKET_COUNT) | ((self.flags as u16) << PACKET_COUNT_BITS)
    }

    fn split_packets_word(w: u16) -> (u16, u8) {
        (w & MAX_PACKET_COUNT, (w >> PACKET_COUNT_BITS) as u8)
    }
}

/// Why an SMB operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmbError {
    /// Page size or SMB size does not satisfy the ABI.
    BadGeometry {
        size: usize,
        page_size: usize,
    },
    PageOutOfRange {
        page: usize,
        num_pages: usize,
    },
    /// Layout bits 6 or 7.
    ReservedLayout {
        page: usize,
        layout: u32,
    },
    /// The page is not partitioned or has fewer chunks.
    ChunkOutOfRange {
        page: usize,
        chunk: usize,
        num_chunks: usize,
    },
    /// The chunk is not in the state the transition needs.
    UnexpectedState {
        page: usize,
        chunk: usize,
        found: ChunkState,
    },
    /// The page was re-partitioned under our feet (hostile peer).
    LayoutChanged {
        page: usize,
    },
    /// The bitmap kept changing for [`RETRY_ATTEMPTS`] CAS attempts.
    Contention {
        page: usize,
    },
}

impl std::fmt::Display for SmbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "smb: {self:?}")
    }
}

impl std::error::Error for SmbError {}

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
            && page_size % MIN_PAGE_SIZE == 0
            && size >= page_size
            && size % page_size == 0;
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

/// Validated `(smb_size, page_size)` as the service picks them: 0 means
/// default; page size clamped to 32 KiB, SMB size to 32 MiB; page size must
/// be a power-of-two multiple of 4 KiB and divide the SMB size, otherwise
/// both fall back to 256 KiB / 4 KiB.
pub fn ensure_valid_shm_sizes(shm_size: usize, page_size: usize) -> (usize, usize) {
    let page_size = if page_size == 0 {
        DEFAULT_SHM_PAGE_SIZE
    } else {
        page_size
    };
    let shm_size = if shm_size == 0 {
        DEFAULT_SHM_SIZE
    } else {
        shm_size
    };
    let page_size = page_size.min(MAX_SERVICE_PAGE_SIZE);
    let shm_size = shm_size.min(MAX_SHM_SIZE);
    let units = page_size / MIN_PAGE_SIZE;
    let page_ok =
        page_size >= MIN_PAGE_SIZE && page_size % MIN_PAGE_SIZE == 0 && units.is_power_of_two();
    if !page_ok || shm_size < page_size || shm_size % page_size != 0 {
        return (DEFAULT_SHM_SIZE, DEFAULT_SHM_PAGE_SIZE);
    }
    (shm_size, page_size)
}

/// Sizes for a service-created SMB: `TraceConfig.producers[].{shm_size_kb,
/// page_size_kb}` win over the producer's InitializeConnection hints (bytes);
/// zero means unset. The result is passed through [`ensure_valid_shm_sizes`].
pub fn choose_shm_sizes(
    config_shm_size_kb: u32,
    config_page_size_kb: u32,
    hint_shm_size_bytes: u64,
    hint_page_size_bytes: u64,
) -> (usize, usize) {
    let pick = |config_kb: u32, hint: u64| -> usize {
        if config_kb != 0 {
            (config_kb as usize).saturating_mul(1024)
        } else {
            usize::try_from(hint).unwrap_or(usize::MAX)
        }
    };
    ensure_valid_shm_sizes(
        pick(config_shm_size_kb, hint_shm_size_bytes),
        pick(config_page_size_kb, hint_page_size_bytes),
    )
}

#[cfg(test)]
#[path = "smb_abi_tests.rs"]
mod tests;
