//! Writing: sizes, patches, re-commits, wrap, overwrite and discard (FACTS §d.1).

use super::test_util::*;
use super::*;
use crate::tracing::core::smb_abi::{
    FLAG_CHUNK_NEEDS_PATCHING as NP, FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK as FC,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK as LC,
};

#[test]
fn rejects_bad_sizes() {
    assert_eq!(
        TraceBuffer::new(0, OverwritePolicy::Overwrite).unwrap_err(),
        BufferSizeError::Misaligned(0)
    );
    assert!(TraceBuffer::new(1000, OverwritePolicy::Overwrite).is_err());
    assert!(TraceBuffer::new(16, OverwritePolicy::Discard).is_ok());
    let b = ring(4096);
    assert_eq!(b.size(), 4096);
    assert_eq!(b.stats().buffer_size, 4096);
    assert!(!b.has_data());
}

#[test]
fn chunk_needing_patches_blocks_its_sequence_only() {
    let mut b = ring(8192);
    // "B" has a 4-byte length placeholder at payload offset 3 + 1 (after
    // fragment A = [01 'A'] and B's own size byte).
    let c0 = Chunk::new(0, &[b"A", b"\x00\x00\x00\x00tail"], LC | NP, 0);
    commit(&mut b, 1, 1, &c0);
    put(&mut b, 1, 1, 1, &[b"end"], FC);
    put(&mut b, 2, 1, 0, &[b"other"], 0);
    // Sequence (1,1) is skipped entirely, even packet A before the hole.
    assert_eq!(read_bytes(&mut b), [b"other".to_vec()]);

    let patch = Patch {
        offset_untrusted: 3,
        data: *b"WXYZ",
    };
    assert!(b.try_patch_chunk_contents(1, 1, 0, &[patch], true));
    assert!(read_pass(&mut b).is_empty(), "more patches pending");
    assert!(b.try_patch_chunk_contents(1, 1, 0, &[], false));
    assert_eq!(read_bytes(&mut b), [b"A".to_vec(), b"WXYZtailend".to_vec()]);
    assert_eq!(b.stats().patches_succeeded, 1);
    assert_eq!(b.stats().patches_failed, 0);
}

#[test]
fn pending_patch_on_a_continuation_chunk_defers_the_read_ahead() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 0, &[b"B1"], LC);
    put(&mut b, 1, 1, 1, &[b"B2"], FC | NP);
    assert!(read_pass(&mut b).is_empty());
    assert!(b.try_patch_chunk_contents(
        1,
        1,
        1,
        &[Patch {
            offset_untrusted: 1,
            data: *b"b2!!"
        }],
        false
    ));
    // The patch overran fragment B2 (2 bytes) into the zero padding.
    assert_eq!(read_bytes(&mut b), [b"B1b2".to_vec()]);
}

#[test]
fn patch_bounds_and_unknown_chunks() {
    let mut b = ring(8192);
    // 100-byte payload: record 128 bytes, payload area 112 bytes.
    commit(&mut b, 1, 1, &Chunk::new(0, &[b"x"], 0, 100));
    let p = |off| Patch {
        offset_untrusted: off,
        data: [1, 2, 3, 4],
    };
    assert!(b.try_patch_chunk_contents(1, 1, 0, &[p(0), p(108)], false));
    assert_eq!(b.stats().patches_succeeded, 2);
    assert!(!b.try_patch_chunk_contents(1, 1, 0, &[p(109)], false));
    assert!(!b.try_patch_chunk_contents(1, 1, 0, &[p(u32::MAX)], false));
    assert!(!b.try_patch_chunk_contents(1, 1, 7, &[p(0)], false));
    assert!(!b.try_patch_chunk_contents(1, 2, 0, &[p(0)], false));
    assert!(!b.try_patch_chunk_contents(9, 1, 0, &[p(0)], false));
    assert_eq!(b.stats().patches_failed, 5);
    assert_eq!(b.stats().patches_succeeded, 2);
}

#[test]
fn scraped_chunk_hides_its_last_fragment_and_blocks_the_sequence() {
    let mut b = ring(8192);
    let c0 = Chunk::new(0, &[b"a", b"b", b"c-in-progress"], LC, 64);
    let c1 = Chunk::new(1, &[b"z"], FC, 64);
    b.copy_chunk_untrusted(
        1,
        client(100),
        1,
        0,
        c0.num_fragments,
        c0.flags,
        false,
        &c0.payload,
    );
    commit(&mut b, 1, 1, &c1);
    // Only the first two packets are known complete, and the reader must
    // not run past an incomplete chunk.
    assert_eq!(read_bytes(&mut b), [b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(
        b.stats().chunks_read,
        0,
        "incomplete chunks are not counted as read"
    );
    // The real commit later rewrites the record in place.
    commit(&mut b, 1, 1, &c0);
    assert_eq!(b.stats().chunks_rewritten, 1);
    assert_eq!(b.stats().chunks_written, 2);
    let r = read_pass(&mut b);
    assert_eq!(r[0].0, b"c-in-progressz");
    assert!(!r[0].1.previous_packet_dropped);
}

#[test]
fn recommit_rules() {
    let base = Chunk::new(0, &[b"a", b"b"], 0, 64);
    let setup = || {
        let mut b = ring(8192);
        b.copy_chunk_untrusted(1, client(1), 1, 0, 2, LC, false, &base.payload);
        b
    };
    // Identical recommit: nothing to do.
    let mut b = setup();
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, LC, false, &base.payload);
    assert_eq!(
        (b.stats().chunks_rewritten, b.stats().abi_violations),
        (0, 0)
    );
    // Different record size.
    let mut b = setup();
    b.copy_chunk_untrusted(1, client(1), 1, 0, 3, LC, true, &[0u8; 200]);
    assert_eq!(b.stats().abi_violations, 1);
    // Fewer fragments.
    let mut b = setup();
    b.copy_chunk_untrusted(1, client(1), 1, 0, 0, 0, true, &base.payload);
    assert_eq!(b.stats().abi_violations, 1);
    // Flags dropped (stored flags are 0 for the scrape: any later set is a
    // superset; so start from a complete chunk with FC).
    let mut b = ring(8192);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 1, FC, true, &base.payload);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, 0, true, &base.payload);
    assert_eq!(b.stats().abi_violations, 1);
    // Growing fragments with a flag superset is a rewrite.
    let mut b = setup();
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, 0, true, &base.payload);
    assert_eq!(b.stats().chunks_rewritten, 1);
    assert_eq!(read_bytes(&mut b), [b"a".to_vec(), b"b".to_vec()]);
}

#[test]
fn recommit_after_the_next_chunk_was_read_is_refused() {
    let mut b = ring(8192);
    let c5 = Chunk::new(5, &[b"x", b"y"], 0, 64);
    b.copy_chunk_untrusted(1, client(1), 1, 5, 2, 0, false, &c5.payload);
    // Chunk 6 is the newest; reading wraps to 5 and stops there, since 5
    // is incomplete.
    put(&mut b, 1, 1, 6, &[b"late"], 0);
    let got = read_bytes(&mut b);
    assert_eq!(got, [b"x".to_vec()]);
    // Nothing from 6 was read: the rewrite of 5 is fine.
    b.copy_chunk_untrusted(1, client(1), 1, 5, 2, 0, true, &c5.payload);
    assert_eq!(b.stats().chunks_rewritten, 1);
    assert_eq!(read_bytes(&mut b), [b"y".to_vec(), b"late".to_vec()]);

    // Now the hostile order: chunk 8 read through a fresh sequence start,
    // then a rewrite of chunk 7 arrives.
    let mut b = ring(8192);
    let c7 = Chunk::new(7, &[b"p", b"q"], 0, 64);
    put(&mut b, 1, 1, 8, &[b"eight"], 0);
    assert_eq!(read_bytes(&mut b), [b"eight".to_vec()]);
    b.copy_chunk_untrusted(1, client(1), 1, 7, 1, 0, false, &c7.payload);
    b.copy_chunk_untrusted(1, client(1), 1, 7, 2, 0, true, &c7.payload);
    assert_eq!(b.stats().chunks_rewritten, 0);
    assert_eq!(b.stats().abi_violations, 1);
}

#[test]
fn ring_buffer_overwrites_oldest_and_flags_the_survivor() {
    let mut b = ring(4096);
    let mk = |id: u32| Chunk::new(id, &[format!("c{id}").as_bytes()], 0, P1K);
    commit(&mut b, 1, 1, &mk(0));
    commit(&mut b, 1, 1, &mk(1));
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 2);
    // c2..c5 fill the buffer and replace c0 and c1, which were read: no
    // loss. c6 replaces c2, unread: one chunk lost.
    for id in 2..=5 {
        commit(&mut b, 1, 1, &mk(id));
    }
    assert_eq!(b.stats().chunks_overwritten, 0);
    assert_eq!(b.stats().write_wrap_count, 1);
    commit(&mut b, 1, 1, &mk(6));
    assert_eq!(b.stats().chunks_overwritten, 1);
    assert_eq!(b.stats().bytes_overwritten, 1024);
    let r = read_pass(&mut b);
    let names: Vec<_> = r
        .iter()
        .map(|(p, _)| String::from_utf8(p.clone()).unwrap())
        .collect();
    assert_eq!(names, ["c3", "c4", "c5", "c6"]);
    assert!(r[0].1.previous_packet_dropped, "c2 was lost before c3");
    assert!(r[1..].iter().all(|(_, i)| !i.previous_packet_dropped));
    assert_eq!(b.stats().bytes_written, 7 * 1024);
    assert_eq!(b.stats().chunks_written, 7);
}

#[test]
fn wrap_pads_the_tail_and_overwrites_with_padding() {
    let mut b = ring(4096);
    // 3 x 1024 then a 2048 record does not fit at 3072: pad 1024 and wrap.
    for id in 0..3 {
        commit(&mut b, 1, 1, &Chunk::new(id, &[b"s"], 0, P1K));
    }
    commit(&mut b, 1, 1, &Chunk::new(3, &[b"big"], 0, 2048 - 16));
    assert_eq!(b.stats().padding_bytes_written, 1024);
    assert_eq!(b.stats().write_wrap_count, 1);
    assert_eq!(b.stats().chunks_overwritten, 2);
    // A small record at 2048 overwrites part of chunk 2: chunk 2 is removed
    // whole and padding fills the rest of its old space.
    commit(&mut b, 1, 1, &Chunk::new(4, &[b"t"], 0, 100));
    assert_eq!(b.stats().chunks_overwritten, 3);
    assert_eq!(b.stats().padding_bytes_written, 1024 + 1024 - 128);
    assert_eq!(b.num_chunks(), 2);
    // Next write lands after the padding... and clears the old tail padding.
    commit(&mut b, 1, 1, &Chunk::new(5, &[b"u"], 0, 100));
    let r = read_bytes(&mut b);
    assert_eq!(r, [b"big".to_vec(), b"t".to_vec(), b"u".to_vec()]);
    for _ in 0..20 {
        let id = 6 + b.stats().chunks_written as u32;
        commit(&mut b, 1, 1, &Chunk::new(id, &[b"v"], 0, 700));
    }
    assert!(b.stats().padding_bytes_cleared > 0);
    let chunks = b.num_chunks();
    assert_eq!(read_bytes(&mut b).len(), chunks);
}

#[test]
fn discard_policy_is_sticky() {
    let mut b = TraceBuffer::new(4096, OverwritePolicy::Discard).unwrap();
    for id in 0..4 {
        commit(
            &mut b,
            1,
            1,
            &Chunk::new(id, &[format!("{id}").as_bytes()], 0, P1K),
        );
    }
    assert!(!b.is_discarding());
    commit(&mut b, 1, 1, &Chunk::new(4, &[b"4"], 0, P1K));
    assert!(b.is_discarding());
    assert_eq!(b.stats().chunks_discarded, 1);
    assert_eq!(b.stats().chunks_overwritten, 0);
    assert_eq!(read_bytes(&mut b).len(), 4);
    // Everything was read, but DISCARD never resumes writing.
    commit(&mut b, 1, 1, &Chunk::new(5, &[b"5"], 0, P1K));
    commit(&mut b, 2, 1, &Chunk::new(0, &[b"x"], 0, 10));
    assert_eq!(b.stats().chunks_discarded, 3);
    assert!(read_pass(&mut b).is_empty());
    assert_eq!(b.stats().chunks_written, 4);
}

#[test]
fn discard_allows_overwriting_read_data_before_first_refusal() {
    // Overwriting chunks that were already read loses nothing, so DISCARD
    // only stops at the first unread one.
    let mut b = TraceBuffer::new(4096, OverwritePolicy::Discard).unwrap();
    for id in 0..4 {
        commit(&mut b, 1, 1, &Chunk::new(id, &[b"r"], 0, P1K));
    }
    assert_eq!(read_bytes(&mut b).len(), 4);
    commit(&mut b, 1, 1, &Chunk::new(4, &[b"n"], 0, P1K));
    assert!(!b.is_discarding());
    assert_eq!(read_bytes(&mut b), [b"n".to_vec()]);
}

#[test]
fn memory_stays_bounded() {
    let size = 64 * 1024;
    let mut b = ring(size);
    let mut rng = Rng::new(7);
    for id in 0..20_000u32 {
        let len = rng.below(3000) as usize;
        let w = 1 + rng.below(4) as u16;
        commit(
            &mut b,
            1,
            w,
            &Chunk::new(id, &[&rng.bytes(len.min(2000))], 0, len),
        );
        if id % 1000 == 0 {
            read_pass(&mut b);
        }
    }
    assert_eq!(b.size(), size);
    assert_eq!(b.storage_capacity(), size);
    assert!(b.used_size() <= size);
    assert!(b.num_chunks() <= size / 16);
    assert!(b.stats().write_wrap_count > 10);
    // What remains is still readable.
    let left = read_pass(&mut b);
    assert!(!left.is_empty());
}

#[test]
fn clone_is_a_read_only_snapshot() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 0, &[b"a", b"b"], 0);
    b.begin_read();
    let first = b.read_next_trace_packet().unwrap().0.to_vec();
    assert_eq!(first, b"a");
    let mut c = b.clone_read_only();
    assert!(c.is_read_only());
    assert_eq!(c.stats().bytes_written, b.stats().bytes_written);
    assert_eq!(c.stats().chunks_read, 0);
    // The clone keeps the read position and ignores writes and patches.
    put(&mut c, 1, 1, 1, &[b"c"], 0);
    assert!(!c.try_patch_chunk_contents(1, 1, 0, &[], false));
    assert_eq!(read_bytes(&mut c), [b"b".to_vec()]);
    // Reading the clone did not consume the original.
    assert_eq!(read_bytes(&mut b), [b"b".to_vec()]);
}

#[test]
fn writes_between_reads_do_not_confuse_the_reader() {
    let mut b = ring(4096);
    for id in 0..3 {
        commit(&mut b, 1, 1, &Chunk::new(id, &[b"x", b"y"], 0, P1K));
    }
    b.begin_read();
    assert!(b.read_next_trace_packet().is_some());
    // Overwrite the chunk under the read cursor, then keep reading.
    commit(&mut b, 1, 1, &Chunk::new(3, &[b"z"], 0, P1K));
    commit(&mut b, 1, 1, &Chunk::new(4, &[b"w"], 0, P1K));
    while b.read_next_trace_packet().is_some() {}
    let r = read_bytes(&mut b);
    assert!(r.len() <= 6);
}

#[test]
fn rewrite_with_other_content_after_read_cannot_derail_the_reader() {
    let mut b = ring(4096);
    commit(
        &mut b,
        1,
        1,
        &Chunk::new(0, &[&[b'a'; 29], &[b'b'; 39]], 0, 512),
    );
    assert_eq!(read_pass(&mut b).len(), 2);
    // Same size, more fragments: accepted as a rewrite, but the read cursor
    // now points into zero padding, which reads as empty packets.
    commit(&mut b, 1, 1, &Chunk::new(0, &[b"x", b"y", b"z"], 0, 512));
    assert_eq!(b.stats().chunks_rewritten, 1);
    assert!(read_pass(&mut b).is_empty());
    put(&mut b, 1, 1, 1, &[b"d", b"e"], 0);
    assert_eq!(read_bytes(&mut b), [b"d".to_vec(), b"e".to_vec()]);
}

#[test]
fn a_drained_buffer_rewinds_and_keeps_continuity() {
    // 64 KiB, written 1 KiB at a time and read after every write: the
    // newest chunk moves to the front whenever it is a quarter of what was
    // written, so only the first four records' memory is used.
    let mut b = ring(64 << 10);
    for id in 0..200u32 {
        commit(&mut b, 1, 1, &Chunk::new(id, &[&id.to_le_bytes()], 0, P1K));
        let r = read_pass(&mut b);
        assert_eq!(r.len(), 1, "chunk {id}");
        assert_eq!(r[0].0, id.to_le_bytes());
        // Only the very first packet follows an unknown past.
        assert_eq!(r[0].1.previous_packet_dropped, id == 0, "chunk {id}");
    }
    assert!(b.used_size() <= 4 * 1024, "used {}", b.used_size());
    assert_eq!(b.stats().write_wrap_count, 0);
    assert_eq!(b.stats().chunks_overwritten, 0);
}

#[test]
fn no_rewind_while_anything_is_unread_or_still_growing() {
    let mut b = ring(64 << 10);
    // Sequence 1 read; sequence 2 left unread: no rewind.
    put(&mut b, 1, 1, 0, &[b"a"], 0);
    put(&mut b, 2, 1, 0, &[b"b"], 0);
    b.begin_read();
    assert!(b.read_next_trace_packet().is_some());
    put(&mut b, 1, 1, 1, &[b"c"], 0);
    // Three 32-byte records side by side.
    assert_eq!(
        b.used_size(),
        3 * 32,
        "third record appended after the others"
    );
    assert_eq!(read_bytes(&mut b), [b"c".to_vec(), b"b".to_vec()]);

    // A scraped (incomplete) chunk may still grow in place: no rewind.
    let mut b = ring(64 << 10);
    let c = Chunk::new(0, &[b"x", b"y"], 0, 64);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, 0, false, &c.payload);
    assert_eq!(read_bytes(&mut b), [b"x".to_vec()]);
    put(&mut b, 2, 1, 0, &[b"z"], 0);
    // The rewrite still lands on the original record.
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, 0, true, &c.payload);
    assert_eq!(b.stats().chunks_rewritten, 1);
    assert_eq!(read_bytes(&mut b), [b"y".to_vec(), b"z".to_vec()]);
}
