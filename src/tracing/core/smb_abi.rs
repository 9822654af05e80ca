//! Shared-memory buffer (SMB) ABI constants, byte-compatible with Perfetto.
//!
//! The full layout documentation and the chunk readers/writers live here
//! too (see the shared-memory issue); this first cut only fixes the numbers
//! every other module agrees on.

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

/// Writer ids are 1..=MAX_WRITER_ID; 0 is invalid.
pub const MAX_WRITER_ID: u16 = (1 << 15) - 1;

/// Fragment size marking a packet the writer abandoned (2^28 - 1).
pub const PACKET_SIZE_DROP_PACKET: u32 = (1 << 28) - 1;

/// Patches carry exactly this many bytes.
pub const PATCH_SIZE: usize = 4;

/// SMB size limits and defaults (bytes).
pub const DEFAULT_SHM_SIZE: usize = 256 * 1024;
pub const DEFAULT_SHM_PAGE_SIZE: usize = 4096;
pub const MAX_SHM_SIZE: usize = 32 * 1024 * 1024;
pub const MAX_SERVICE_PAGE_SIZE: usize = 32 * 1024;
pub const MAX_ABI_PAGE_SIZE: usize = 64 * 1024;
