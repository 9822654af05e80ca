//! Unit tests for `smb_abi` (kept apart to keep the ABI file short).

use super::*;
use crate::mem::shared_mem::SharedMem;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn abi(size: usize, page: usize) -> SmbAbi {
    SmbAbi::new(Arc::new(SharedMem::new_heap(size).unwrap()), page).unwrap()
}

fn set_bitmap(a: &SmbAbi, page: usize, v: u32) {
    a.mem()
        .atomic_u32(page * a.page_size())
        .unwrap()
        .store(v, Ordering::Relaxed);
}

#[test]
fn geometry_is_validated() {
    let mem = |n| Arc::new(SharedMem::new_heap(n).unwrap());
    assert!(SmbAbi::new(mem(8192), 4096).is_ok());
    assert!(SmbAbi::new(mem(65536), 65536).is_ok());
    for (size, page) in [
        (8192, 2048),
        (8192, 6144),
        (12288, 8192),
        (4096, 8192),
        (131072, 131072),
    ] {
        assert_eq!(
            SmbAbi::new(mem(size), page).unwrap_err(),
            SmbError::BadGeometry {
                size,
                page_size: page
            }
        );
    }
}

#[test]
fn header_words_match_upstream_bit_layout() {
    let h = ChunkHeader {
        chunk_id: 7,
        writer_id: 3,
        packet_count: 1022,
        flags: 0b101,
    };
    assert_eq!(h.packets_word(), 1022 | (0b101 << 10));
    let a = abi(4096, 4096);
    assert!(a.try_partition_page(0, PageLayout::Div2));
    let c = a.try_acquire_chunk_for_writing(0, 1, &h).unwrap();
    assert_eq!((c.offset(), c.size()), (8 + 2044, 2044));
    let mut raw = [0u8; 8];
    assert!(a.mem().read(c.offset(), &mut raw));
    assert_eq!(raw, [7, 0, 0, 0, 3, 0, 0xfe, 0x17]);
    assert_eq!(
        a.page_bitmap(0).unwrap(),
        (2 << 28) | (CHUNK_BEING_WRITTEN << 2)
    );
}

#[test]
fn full_chunk_life_cycle_resets_page() {
    let a = abi(2 * 4096, 4096);
    assert!(a.try_partition_page(1, PageLayout::Div4));
    assert!(
        !a.try_partition_page(1, PageLayout::Div1),
        "already partitioned"
    );
    assert_eq!(a.free_chunks(1), 0b1111);
    let hdr = ChunkHeader {
        chunk_id: 1,
        writer_id: 1,
        ..Default::default()
    };
    let c0 = a.try_acquire_chunk_for_writing(1, 0, &hdr).unwrap();
    let c3 = a.try_acquire_chunk_for_writing(1, 3, &hdr).unwrap();
    assert!(a.try_acquire_chunk_for_writing(1, 3, &hdr).is_none());
    assert_eq!(a.free_chunks(1), 0b0110);
    // The service cannot take a chunk that is still being written.
    assert_eq!(
        a.try_acquire_chunk_for_reading(1, 0).unwrap_err(),
        SmbError::UnexpectedState {
            page: 1,
            chunk: 0,
            found: ChunkState::BeingWritten
        }
    );
    assert_eq!(a.increment_packet_count(&c0), 1);
    a.set_chunk_flags(
        &c0,
        FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK | FLAG_CHUNK_NEEDS_PATCHING,
    );
    a.clear_chunk_flags(&c0, FLAG_CHUNK_NEEDS_PATCHING);
    assert!(a.mem().write(c0.payload_offset(), &[3, 1, 2, 3]));
    assert_eq!(a.release_chunk_as_complete(c0).unwrap(), 1);
    assert_eq!(a.release_chunk_as_complete(c3).unwrap(), 1);

    let r0 = a.try_acquire_chunk_for_reading(1, 0).unwrap();
    let mut payload = Vec::new();
    let h = a.read_chunk(&r0, &mut payload);
    assert_eq!(
        h,
        ChunkHeader {
            chunk_id: 1,
            writer_id: 1,
            packet_count: 1,
            flags: 2
        }
    );
    assert_eq!(payload.len(), 1020 - 8);
    assert_eq!(&payload[..4], &[3, 1, 2, 3]);
    assert_eq!(a.release_chunk_as_free(r0).unwrap(), 1);
    assert_ne!(a.page_bitmap(1).unwrap(), 0, "chunk 3 still complete");
    let r3 = a.try_acquire_chunk_for_reading(1, 3).unwrap();
    a.release_chunk_as_free(r3).unwrap();
    assert_eq!(a.page_bitmap(1).unwrap(), 0, "page unpartitioned again");
    let mut raw = [0xffu8; 8];
    assert!(a.mem().read(8, &mut raw));
    assert_eq!(raw, [0; 8], "freed chunk header zeroed");
    assert_eq!(a.stats().pages_free, 2);
}

#[test]
fn hostile_indices_and_layouts_are_errors() {
    let a = abi(3 * 4096, 4096);
    assert!(matches!(
        a.try_acquire_chunk_for_reading(3, 0),
        Err(SmbError::PageOutOfRange { .. })
    ));
    assert!(matches!(
        a.try_acquire_chunk_for_reading(usize::MAX, 0),
        Err(SmbError::PageOutOfRange { .. })
    ));
    assert!(matches!(
        a.try_acquire_chunk_for_reading(0, 0),
        Err(SmbError::ChunkOutOfRange { .. })
    ));
    for layout in [6u32, 7] {
        set_bitmap(&a, 0, (layout << 28) | ALL_CHUNKS_MASK);
        assert_eq!(
            a.try_acquire_chunk_for_reading(0, 0).unwrap_err(),
            SmbError::ReservedLayout { page: 0, layout }
        );
        assert_eq!(a.free_chunks(0), 0);
    }
    // 14 chunks, all complete, plus the reserved bit 31.
    set_bitmap(&a, 1, 0x8000_0000 | (5 << 28) | ALL_CHUNKS_MASK);
    for chunk in 0..14 {
        let c = a.try_acquire_chunk_for_reading(1, chunk).unwrap();
        assert!(c.end() <= 2 * 4096);
        a.release_chunk_as_free(c).unwrap();
    }
    assert!(matches!(
        a.try_acquire_chunk_for_reading(1, 14),
        Err(SmbError::ChunkOutOfRange { .. })
    ));
    assert_eq!(a.page_bitmap(1).unwrap(), 0);

    // A producer that re-partitions a page while the service reads it.
    set_bitmap(&a, 2, (1 << 28) | CHUNK_COMPLETE);
    let c = a.try_acquire_chunk_for_reading(2, 0).unwrap();
    set_bitmap(&a, 2, (5 << 28) | CHUNK_BEING_READ);
    assert_eq!(
        a.release_chunk_as_free(c).unwrap_err(),
        SmbError::LayoutChanged { page: 2 }
    );
    let s = a.stats();
    assert_eq!((s.chunks_being_read, s.chunks_free), (1, 13));
}

#[test]
fn shm_size_rules() {
    const K: usize = 1024;
    // (config page KiB, hint page KiB, config size KiB, hint size KiB) -> (size, page)
    type Case = ((u32, u64, u32, u64), (usize, usize));
    let cases: &[Case] = &[
        ((0, 0, 0, 0), (256 * K, 4 * K)),
        ((16, 0, 16, 0), (16 * K, 16 * K)),
        ((0, 4, 0, 16), (16 * K, 4 * K)),
        ((4, 8, 16, 32), (16 * K, 4 * K)),
        ((8, 4, 32, 16), (32 * K, 8 * K)),
        ((3, 0, 0, 0), (256 * K, 4 * K)),
        ((2, 0, 0, 0), (256 * K, 4 * K)),
        ((4096, 0, 4_096_000, 0), (32 * K * K, 32 * K)),
        ((0, 4096, 0, 4_096_000), (32 * K * K, 32 * K)),
        ((0, 0, 18, 0), (256 * K, 4 * K)),
        ((2, 0, 32, 0), (256 * K, 4 * K)),
        ((16, 0, 18, 0), (256 * K, 4 * K)),
        ((8, 0, 20, 0), (256 * K, 4 * K)),
        ((28, 0, 0, 0), (256 * K, 4 * K)),
        ((12, 0, 48, 0), (256 * K, 4 * K)), // 3 x 4 KiB is not a power of two
    ];
    for &((cp, hp, cs, hs), want) in cases {
        let got = choose_shm_sizes(cs, cp, hs * 1024, hp * 1024);
        assert_eq!(
            got, want,
            "config page {cp} hint page {hp} config size {cs} hint size {hs}"
        );
    }
    assert_eq!(
        ensure_valid_shm_sizes(2 * K * K, 32 * K),
        (2 * K * K, 32 * K)
    );
    assert_eq!(
        ensure_valid_shm_sizes(usize::MAX, usize::MAX),
        (32 * K * K, 32 * K)
    );
}

/// Deterministic stand-in for the fuzz target: random SMB contents, with
/// bitmaps biased towards plausible layouts and Complete chunks, read at
/// every index. Nothing may panic; every acquired chunk lies inside the SMB.
#[test]
fn random_smb_contents_are_read_safely() {
    use crate::tracing::core::chunk_reader::FragmentIter;
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut total_read = 0;
    for round in 0..300 {
        let page_size = if round % 3 == 0 { 8192 } else { 4096 };
        let a = abi(4 * page_size, page_size);
        for off in (0..a.size()).step_by(8) {
            a.mem().write(off, &next().to_le_bytes());
        }
        for page in 0..4 {
            let r = next();
            let mut bitmap = if r % 4 == 0 {
                r as u32
            } else {
                (((r >> 8) % 8) as u32) << 28
            };
            if r % 4 != 0 {
                for c in 0..14 {
                    let st = if next() % 2 == 0 {
                        CHUNK_COMPLETE
                    } else {
                        (next() % 4) as u32
                    };
                    bitmap |= st << (2 * c);
                }
            }
            set_bitmap(&a, page, bitmap);
            // Small counts and first sizes so fragments get parsed too.
            let layout = bitmap_layout(bitmap);
            for c in 0..bitmap_num_chunks(bitmap) {
                let off = page * page_size + 8 + c * a.chunk_size_for_layout(layout);
                let packets = (next() % 6) as u16 | ((next() % 64) as u16) << 10;
                a.mem().write(off + 6, &packets.to_le_bytes());
                a.mem().write(off + 8, &[(next() % 200) as u8]);
            }
        }
        for page in 0..6 {
            for chunk in 0..16 {
                let Ok(c) = a.try_acquire_chunk_for_reading(page, chunk) else {
                    continue;
                };
                assert!(c.end() <= a.size() && c.offset() >= page * page_size + 8);
                let mut payload = Vec::new();
                let h = a.read_chunk(&c, &mut payload);
                assert_eq!(payload.len(), c.payload_size());
                let _ = FragmentIter::new(&payload, h.packet_count).count();
                a.release_chunk_as_free(c).unwrap();
                total_read += 1;
            }
        }
    }
    assert!(total_read > 1000, "{total_read}");
}

/// Errors reach daemon logs: words, not Rust debug structs.
#[test]
fn errors_read_as_words() {
    let e = SmbError::UnexpectedState {
        page: 1,
        chunk: 2,
        found: ChunkState::BeingWritten,
    };
    assert_eq!(e.to_string(), "chunk 2 of page 1 is being written");
    let e = SmbError::BadGeometry {
        size: 100,
        page_size: 4096,
    };
    assert_eq!(
        e.to_string(),
        "shared memory of 100 bytes cannot hold pages of 4096 bytes"
    );
}
