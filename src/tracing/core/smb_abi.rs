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
use std::sync::atomic::{AtomicU16, AtomicU32};

pub use super::smb_pages::{Chunk, SmbAbi, SmbStats};

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
pub const MAX_SERVICE_PAGE_SIZE: usize = 32 * 1024;
pub const MAX_ABI_PAGE_SIZE: usize = 64 * 1024;
pub use crate::mem::shared_mem::{MAX_SHM_SIZE, MIN_PAGE_SIZE};

/// CAS retries before giving up on a contended page header.
pub(super) const RETRY_ATTEMPTS: u32 = 64;

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

pub(super) const CHUNK_ID_OFFSET: usize = 0;
pub(super) const WRITER_ID_OFFSET: usize = 4;
pub(super) const PACKETS_OFFSET: usize = 6;

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
    pub(super) fn from_bits(bits: u32) -> ChunkState {
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

pub(super) fn with_chunk_state(bitmap: u32, chunk_idx: usize, state: ChunkState) -> u32 {
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

    pub(super) fn split_packets_word(w: u16) -> (u16, u8) {
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
        match self {
            SmbError::BadGeometry { size, page_size } => write!(
                f,
                "shared memory of {size} bytes cannot hold pages of {page_size} bytes"
            ),
            SmbError::PageOutOfRange { page, num_pages } => {
                write!(f, "page {page} of a buffer of {num_pages} pages")
            }
            SmbError::ReservedLayout { page, layout } => {
                write!(f, "page {page} has the reserved layout {layout}")
            }
            SmbError::ChunkOutOfRange {
                page,
                chunk,
                num_chunks,
            } => write!(f, "chunk {chunk} of page {page}, which has {num_chunks}"),
            SmbError::UnexpectedState { page, chunk, found } => {
                let state = match found {
                    ChunkState::Free => "free",
                    ChunkState::BeingWritten => "being written",
                    ChunkState::BeingRead => "being read",
                    ChunkState::Complete => "complete",
                };
                write!(f, "chunk {chunk} of page {page} is {state}")
            }
            SmbError::LayoutChanged { page } => {
                write!(f, "page {page} was re-partitioned while in use")
            }
            SmbError::Contention { page } => {
                write!(f, "page {page}'s chunk states kept changing")
            }
        }
    }
}

impl std::error::Error for SmbError {}

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
