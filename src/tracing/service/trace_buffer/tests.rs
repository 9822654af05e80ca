//! Behaviour of the trace buffer, one rule per test (see FACTS §d).

use super::test_util::*;
use super::*;
use crate::tracing::core::smb_abi::{
    FLAG_CHUNK_NEEDS_PATCHING as NP, FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK as FC,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK as LC,
};

fn ring(size: usize) -> TraceBuffer {
    TraceBuffer::new(size, OverwritePolicy::Overwrite).unwrap()
}

/// 1008 payload bytes make a 1024-byte record.
const P1K: usize = 1008;

#[test]
fn rejects_bad_sizes() {
    assert_eq!(TraceBuffer::new(0, OverwritePolicy::Overwrite).unwrap_err(), BufferSizeError::Misaligned(0));
    assert!(TraceBuffer::new(1000, OverwritePolicy::Overwrite).is_err());
    assert!(TraceBuffer::new(16, OverwritePolicy::Discard).is_ok());
    let b = ring(4096);
    assert_eq!(b.size(), 4096);
    assert_eq!(b.stats().buffer_size, 4096);
    assert!(!b.has_data());
}

#[test]
fn empty_buffer_reads_nothing() {
    let mut b = ring(4096);
    assert!(read_pass(&mut b).is_empty());
    assert!(b.read_next_trace_packet().is_none());
}

#[test]
fn single_chunk_packets_in_order() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[b"one", b"two", b"three"], 0);
    let r = read_pass(&mut b);
    let pk: Vec<_> = r.iter().map(|(p, _)| p.as_slice()).collect();
    assert_eq!(pk, [b"one".as_slice(), b"two", b"three"]);
    let (_, info) = r[0];
    assert_eq!((info.producer_id, info.writer_id), (1, 1));
    assert_eq!(info.client, client(100));
    // First packet of a sequence: we cannot know what came before.
    assert!(r[0].1.previous_packet_dropped);
    assert!(!r[1].1.previous_packet_dropped && !r[2].1.previous_packet_dropped);
    assert_eq!(b.stats().chunks_read, 1);
    assert_eq!(b.stats().bytes_read, 32); // 16 header + 14 payload, aligned
    // Reads are destructive.
    assert!(read_pass(&mut b).is_empty());
}

#[test]
fn continuity_carries_across_passes() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[b"a"], 0);
    assert!(read_pass(&mut b)[0].1.previous_packet_dropped);
    put(&mut b, 1, 1, 1, &[b"b"], 0);
    let r = read_pass(&mut b);
    assert_eq!(r[0].0, b"b");
    assert!(!r[0].1.previous_packet_dropped);
}

#[test]
fn packet_spanning_two_chunks_is_returned_as_two_slices() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[b"A", b"B1"], LC);
    put(&mut b, 1, 1, 1, &[b"B2", b"C"], FC);
    b.begin_read();
    let (p, _) = b.read_next_trace_packet().unwrap();
    assert_eq!(p.slices(), [b"A".as_slice()]);
    let (p, info) = b.read_next_trace_packet().unwrap();
    assert_eq!(p.slices(), [b"B1".as_slice(), b"B2"]);
    assert!(!info.previous_packet_dropped);
    let (p, _) = b.read_next_trace_packet().unwrap();
    assert_eq!(p.to_vec(), b"C");
    assert!(b.read_next_trace_packet().is_none());
    assert_eq!(b.stats().readaheads_succeeded, 1);
    assert_eq!(b.stats().chunks_read, 2);
}

#[test]
fn packet_spanning_many_chunks() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 0, &[b"A", b"B1"], LC);
    put(&mut b, 1, 1, 1, &[b"B2"], FC | LC);
    put(&mut b, 1, 1, 2, &[b"B3"], FC | LC);
    put(&mut b, 1, 1, 3, &[b"B4", b"C"], FC);
    let r = read_bytes(&mut b);
    assert_eq!(r, [b"A".to_vec(), b"B1B2B3B4".to_vec(), b"C".to_vec()]);
}

#[test]
fn first_chunk_that_is_a_middle_piece_is_skipped() {
    let mut b = ring(8192);
    // Chunk 0 holds only the start of a packet that continues through 1.
    put(&mut b, 1, 1, 0, &[b"B1"], LC);
    put(&mut b, 1, 1, 1, &[b"B2"], FC | LC);
    assert!(read_pass(&mut b).is_empty());
    assert_eq!(b.stats().readaheads_failed, 1);
    put(&mut b, 1, 1, 2, &[b"B3"], FC);
    assert_eq!(read_bytes(&mut b), [b"B1B2B3".to_vec()]);
}

#[test]
fn read_ahead_waits_for_the_missing_piece() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[b"A", b"B1"], LC);
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 1);
    assert_eq!(b.stats().readaheads_failed, 1);
    put(&mut b, 1, 1, 1, &[b"B2"], FC);
    let r = read_pass(&mut b);
    assert_eq!(r[0].0, b"B1B2");
    assert!(!r[0].1.previous_packet_dropped);
}

#[test]
fn chunk_ids_wrap_around_u32_max() {
    let mut b = ring(8192);
    let m = u32::MAX;
    put(&mut b, 1, 1, m - 1, &[b"p0", b"p1a"], LC);
    put(&mut b, 1, 1, m, &[b"p1b"], FC | LC);
    put(&mut b, 1, 1, 0, &[b"p1c", b"p2"], FC);
    put(&mut b, 1, 1, 1, &[b"p3"], 0);
    assert_eq!(b.stats().chunks_committed_out_of_order, 0);
    let r = read_pass(&mut b);
    let pk: Vec<_> = r.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(pk, [b"p0".to_vec(), b"p1ap1bp1c".to_vec(), b"p2".to_vec(), b"p3".to_vec()]);
    assert!(r[1..].iter().all(|(_, i)| !i.previous_packet_dropped));
    // New chunks after the wrap continue the sequence.
    put(&mut b, 1, 1, 2, &[b"p4"], 0);
    let r = read_pass(&mut b);
    assert_eq!(r[0].0, b"p4");
    assert!(!r[0].1.previous_packet_dropped);
}

#[test]
fn out_of_order_commit_across_the_wrap_is_counted() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 1, &[b"y"], 0);
    put(&mut b, 1, 1, u32::MAX, &[b"x"], 0);
    assert_eq!(b.stats().chunks_committed_out_of_order, 1);
    put(&mut b, 1, 1, 0, &[b"z"], 0);
    assert_eq!(b.stats().chunks_committed_out_of_order, 2);
    // Oldest first: MAX, 0, 1.
    assert_eq!(read_bytes(&mut b), [b"x".to_vec(), b"z".to_vec(), b"y".to_vec()]);
}

#[test]
fn gap_stops_the_sequence_until_the_late_chunk_arrives() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 0, &[b"c0"], 0);
    put(&mut b, 1, 1, 2, &[b"c2"], 0);
    assert_eq!(read_bytes(&mut b), [b"c0".to_vec()]);
    assert!(read_pass(&mut b).is_empty());
    put(&mut b, 1, 1, 1, &[b"c1"], 0);
    assert_eq!(b.stats().chunks_committed_out_of_order, 1);
    let r = read_pass(&mut b);
    assert_eq!(r.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(), [b"c1".to_vec(), b"c2".to_vec()]);
    assert!(r.iter().all(|(_, i)| !i.previous_packet_dropped));
}

#[test]
fn continuation_without_its_start_is_dropped_and_flagged() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 5, &[b"tail", b"next", b"more"], FC);
    let r = read_pass(&mut b);
    assert_eq!(r.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(), [b"next".to_vec(), b"more".to_vec()]);
    assert!(r[0].1.previous_packet_dropped);
    assert!(!r[1].1.previous_packet_dropped);
    // The orphan stays skipped: the next pass returns nothing more.
    assert!(read_pass(&mut b).is_empty());
    // And the skip bit tells a later pass that the last packet was lost.
    let mut b = ring(4096);
    put(&mut b, 1, 1, 5, &[b"tail"], FC);
    assert!(read_pass(&mut b).is_empty());
    put(&mut b, 1, 1, 6, &[b"next"], 0);
    let r = read_pass(&mut b);
    assert!(r[0].1.previous_packet_dropped);
}

#[test]
fn sequences_never_mix_and_are_visited_in_key_order() {
    let mut b = ring(16384);
    // Interleaved commits from three writers, each with a spanning packet.
    for (p, w) in [(2u16, 1u16), (1, 2), (1, 1)] {
        put(&mut b, p, w, 0, &[format!("{p}{w}a").as_bytes(), format!("{p}{w}b1").as_bytes()], LC);
    }
    for (p, w) in [(1u16, 1u16), (2, 1), (1, 2)] {
        put(&mut b, p, w, 1, &[format!("{p}{w}b2").as_bytes(), format!("{p}{w}c").as_bytes()], FC);
    }
    let r = read_pass(&mut b);
    let got: Vec<_> = r.iter().map(|(pk, i)| (i.producer_id, i.writer_id, String::from_utf8(pk.clone()).unwrap())).collect();
    let mut expected = Vec::new();
    for (p, w) in [(1u16, 1u16), (1, 2), (2, 1)] {
        for s in ["a", "b1b2", "c"] {
            let s = if s == "b1b2" { format!("{p}{w}b1{p}{w}b2") } else { format!("{p}{w}{s}") };
            expected.push((p, w, s));
        }
    }
    assert_eq!(got, expected);
    assert_eq!(r[6].1.client, client(200));
    // Each sequence's first packet is flagged, the rest are not.
    let flags: Vec<bool> = r.iter().map(|(_, i)| i.previous_packet_dropped).collect();
    assert_eq!(flags, [true, false, false, true, false, false, true, false, false]);
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

    let patch = Patch { offset_untrusted: 3, data: *b"WXYZ" };
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
    assert!(b.try_patch_chunk_contents(1, 1, 1, &[Patch { offset_untrusted: 1, data: *b"b2!!" }], false));
    // The patch overran fragment B2 (2 bytes) into the zero padding.
    assert_eq!(read_bytes(&mut b), [b"B1b2".to_vec()]);
}

#[test]
fn patch_bounds_and_unknown_chunks() {
    let mut b = ring(8192);
    // 100-byte payload: record 128 bytes, payload area 112 bytes.
    commit(&mut b, 1, 1, &Chunk::new(0, &[b"x"], 0, 100));
    let p = |off| Patch { offset_untrusted: off, data: [1, 2, 3, 4] };
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
    b.copy_chunk_untrusted(1, client(100), 1, 0, c0.num_fragments, c0.flags, false, &c0.payload);
    commit(&mut b, 1, 1, &c1);
    // Only the first two packets are known complete, and the reader must
    // not run past an incomplete chunk.
    assert_eq!(read_bytes(&mut b), [b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(b.stats().chunks_read, 0, "incomplete chunks are not counted as read");
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
    assert_eq!((b.stats().chunks_rewritten, b.stats().abi_violations), (0, 0));
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
    let names: Vec<_> = r.iter().map(|(p, _)| String::from_utf8(p.clone()).unwrap()).collect();
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
    assert_eq!(read_bytes(&mut b).len(), b.num_chunks());
}

#[test]
fn discard_policy_is_sticky() {
    let mut b = TraceBuffer::new(4096, OverwritePolicy::Discard).unwrap();
    for id in 0..4 {
        commit(&mut b, 1, 1, &Chunk::new(id, &[format!("{id}").as_bytes()], 0, P1K));
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
        commit(&mut b, 1, w, &Chunk::new(id, &[&rng.bytes(len.min(2000))], 0, len));
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
fn oversized_chunks_are_abi_violations() {
    let mut b = ring(4096);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 1, 0, true, &[0u8; 4096 - 15]);
    assert_eq!(b.stats().abi_violations, 1);
    let mut big = ring(256 * 1024);
    big.copy_chunk_untrusted(1, client(1), 1, 0, 1, 0, true, &vec![0u8; 65535]);
    assert_eq!(big.stats().abi_violations, 1);
    big.copy_chunk_untrusted(1, client(1), 1, 0, 1, 0, true, &vec![0u8; 65520 - 16]);
    assert_eq!(big.stats().chunks_written, 1);
    assert_eq!(b.num_chunks() + big.num_chunks(), 1);
}

#[test]
fn more_fragments_than_bytes() {
    // Claims 5 fragments, holds 1 followed by zero padding: the zeros read
    // as empty packets and are skipped.
    let mut b = ring(4096);
    let c = Chunk::new(0, &[b"only"], 0, 32);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 5, 0, true, &c.payload);
    assert_eq!(read_bytes(&mut b), [b"only".to_vec()]);
    assert_eq!(b.stats().abi_violations, 0);
    // Claims 100 fragments in 16 bytes: running off the record is a violation.
    let mut b = ring(4096);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 100, 0, true, &[1, b'x', 0, 0]);
    put(&mut b, 1, 1, 1, &[b"after"], 0);
    let r = read_pass(&mut b);
    assert_eq!(r[0].0, b"x");
    assert_eq!(r[1].0, b"after");
    assert!(r[1].1.previous_packet_dropped);
    assert_eq!(b.stats().abi_violations, 1);
    assert_eq!(b.stats().chunks_read, 2);
}

#[test]
fn zero_fragments_with_data_reads_nothing() {
    let mut b = ring(4096);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 0, 0, true, &frag(b"ghost"));
    put(&mut b, 1, 1, 1, &[b"real"], 0);
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, b"real");
    assert_eq!(b.stats().abi_violations, 0);
}

#[test]
fn fragment_size_beyond_the_chunk_drops_it_and_flags_the_next() {
    let mut b = ring(4096);
    // 0x7f = 127 bytes claimed, 3 present.
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, 0, true, &[0x7f, 1, 2, 3]);
    put(&mut b, 1, 1, 1, &[b"ok"], 0);
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 1);
    assert!(r[0].1.previous_packet_dropped);
    assert_eq!(b.stats().abi_violations, 1);
    // A size varint that does not end within 4 bytes.
    let mut b = ring(4096);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 1, 0, true, &[0xff, 0xff, 0xff, 0xff, 0x01, 0]);
    assert!(read_pass(&mut b).is_empty());
    assert_eq!(b.stats().abi_violations, 1);
    // Huge 4-byte size.
    let mut b = ring(4096);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 1, 0, true, &[0xfe, 0xff, 0xff, 0x7f, 0]);
    assert!(read_pass(&mut b).is_empty());
    assert_eq!(b.stats().abi_violations, 1);
}

#[test]
fn drop_packet_marker_is_packet_loss_not_a_violation() {
    let mut b = ring(8192);
    // The writer aborted packet B (spanning chunks 0..1): chunk 1 starts
    // with the drop marker.
    put(&mut b, 1, 1, 0, &[b"A", b"B1"], LC);
    let mut c1 = vec![0xff, 0xff, 0xff, 0x7f];
    c1.extend(frag(b"C"));
    b.copy_chunk_untrusted(1, client(1), 1, 1, 2, FC, true, &c1);
    put(&mut b, 1, 1, 2, &[b"D"], 0);
    let r = read_pass(&mut b);
    let pk: Vec<_> = r.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(pk, [b"A".to_vec(), b"D".to_vec()]);
    assert!(r[1].1.previous_packet_dropped);
    assert_eq!(b.stats().trace_writer_packet_loss, 1);
    assert_eq!(b.stats().abi_violations, 0);
}

#[test]
fn corrupt_middle_piece_drops_the_whole_packet() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 0, &[b"A", b"B1"], LC);
    b.copy_chunk_untrusted(1, client(1), 1, 1, 1, FC | LC, true, &[0x7f, 0]);
    put(&mut b, 1, 1, 2, &[b"B3", b"C"], FC);
    let r = read_pass(&mut b);
    let pk: Vec<_> = r.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(pk, [b"A".to_vec(), b"C".to_vec()]);
    assert!(r[1].1.previous_packet_dropped);
    assert_eq!(b.stats().abi_violations, 1);
}

#[test]
fn continuation_chain_broken_by_missing_flag_stops() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 0, &[b"A", b"B1"], LC);
    // Chunk 1 does not say it continues anything: the packet never
    // completes and the sequence stalls (retried later), like upstream.
    put(&mut b, 1, 1, 1, &[b"X"], 0);
    assert_eq!(read_bytes(&mut b), [b"A".to_vec()]);
    assert_eq!(b.stats().readaheads_failed, 1);
}

#[test]
fn empty_packets_are_skipped() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[b"", b"a", b"", b"", b"b", b""], 0);
    let r = read_pass(&mut b);
    assert_eq!(r.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(), [b"a".to_vec(), b"b".to_vec()]);
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
fn empty_packets_do_not_hide_a_loss_or_a_sequence_start() {
    // Start of sequence: the first real packet is flagged even when an
    // empty packet was consumed in an earlier pass.
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[b"", b"A1"], LC);
    assert!(read_pass(&mut b).is_empty());
    put(&mut b, 1, 1, 1, &[b"A2"], FC);
    let r = read_pass(&mut b);
    assert_eq!(r[0].0, b"A1A2");
    assert!(r[0].1.previous_packet_dropped);
    // After an orphan continuation, an empty packet does not clear the loss.
    let mut b = ring(4096);
    put(&mut b, 1, 1, 5, &[b"orphan", b"", b"B1"], FC | LC);
    assert!(read_pass(&mut b).is_empty());
    put(&mut b, 1, 1, 6, &[b"B2"], FC);
    let r = read_pass(&mut b);
    assert_eq!(r[0].0, b"B1B2");
    assert!(r[0].1.previous_packet_dropped);
}
