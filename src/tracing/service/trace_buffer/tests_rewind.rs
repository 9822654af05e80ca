//! The early wrap of a drained buffer, with records still needed moved
//! to the front (see `rewind`).

use super::test_util::*;
use super::*;
use crate::tracing::core::smb_abi::{
    FLAG_CHUNK_NEEDS_PATCHING as NP, FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK as FC,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK as LC,
};

/// Commits one 1 KiB record of sequence (2, 1) per id.
fn filler(b: &mut TraceBuffer, ids: std::ops::Range<u32>) {
    for id in ids {
        commit(b, 2, 1, &Chunk::new(id, &[&id.to_le_bytes()], 0, P1K));
    }
}

fn filler_packets(ids: std::ops::Range<u32>) -> Vec<Vec<u8>> {
    ids.map(|id| id.to_le_bytes().to_vec()).collect()
}

#[test]
fn a_writer_streaming_across_chunks_stays_at_the_front() {
    // Packets of 2.5 chunks each, committed chunk by chunk and read after
    // every commit: the newest chunk always waits for its continuation.
    let mut b = ring(256 << 10);
    let mut w = RefWriter::new(P1K, 0);
    let packets: Vec<Vec<u8>> = (0..60u32)
        .map(|i| {
            let mut p = i.to_le_bytes().to_vec();
            p.resize(2500, i as u8);
            p
        })
        .collect();
    for p in &packets {
        w.write_packet(p);
    }
    let mut got = Vec::new();
    for c in w.finish() {
        commit(&mut b, 1, 1, &c);
        for (p, info) in read_pass(&mut b) {
            assert_eq!(info.previous_packet_dropped, got.is_empty());
            got.push(p);
        }
    }
    assert_eq!(got, packets);
    // Without the move, 150 chunks would have used 150 KiB. With it, the
    // waiting chunk and the one before it (2 KiB) move once 8 KiB are used.
    assert!(b.used_size() <= 10 << 10, "used {}", b.used_size());
    assert_eq!(b.stats().chunks_overwritten, 0);
    assert_eq!(b.stats().write_wrap_count, 0);
}

#[test]
fn a_moved_scraped_chunk_takes_its_commit_in_the_new_place() {
    let mut b = ring(64 << 10);
    filler(&mut b, 0..8);
    let c = Chunk::new(0, &[b"x", b"y"], 0, P1K);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, 0, false, &c.payload);
    // Reading `x` leaves the scraped chunk (it may grow) as the only
    // record needed: it moves to offset 0, with the filler's newest chunk.
    let mut want = vec![b"x".to_vec()];
    want.extend(filler_packets(0..8));
    assert_eq!(read_bytes(&mut b), want);
    assert_eq!(b.write_offset(), 2048);
    b.copy_chunk_untrusted(1, client(1), 1, 0, 2, 0, true, &c.payload);
    assert_eq!(b.stats().chunks_rewritten, 1);
    put(&mut b, 3, 1, 0, &[b"z"], 0);
    assert_eq!(b.write_offset(), 2048 + 32);
    assert_eq!(read_bytes(&mut b), [b"y".to_vec(), b"z".to_vec()]);
}

#[test]
fn a_moved_chunk_can_still_be_patched() {
    let mut b = ring(64 << 10);
    filler(&mut b, 0..8);
    put(&mut b, 1, 1, 0, &[b"....", b"tail"], NP);
    assert_eq!(
        read_bytes(&mut b),
        filler_packets(0..8),
        "blocked until patched"
    );
    assert_eq!(b.write_offset(), 32 + 1024, "moved to the front");
    assert!(b.try_patch_chunk_contents(1, 1, 0, &[patch(1, *b"abcd")], false));
    assert_eq!(read_bytes(&mut b), [b"abcd".to_vec(), b"tail".to_vec()]);
}

fn patch(offset: u32, data: [u8; 4]) -> write::Patch {
    write::Patch {
        offset_untrusted: offset,
        data,
    }
}

#[test]
fn the_old_place_of_a_moved_chunk_is_overwritten_as_padding() {
    // 16 KiB: the moved chunk's old record (at 8 KiB) is overwritten on
    // the way round without evicting the chunk itself.
    let mut b = ring(16 << 10);
    filler(&mut b, 0..8);
    put(&mut b, 1, 1, 0, &[b"head"], LC);
    assert_eq!(read_bytes(&mut b), filler_packets(0..8));
    assert_eq!(b.write_offset(), 32 + 1024);
    filler(&mut b, 8..22);
    assert!(b.stats().padding_bytes_cleared >= 32);
    put(&mut b, 1, 1, 1, &[b"-end"], FC);
    let mut want = vec![b"head-end".to_vec()];
    want.extend(filler_packets(8..22));
    assert_eq!(read_bytes(&mut b), want);
    assert_eq!(b.stats().chunks_overwritten, 0);
}

#[test]
fn nothing_moves_when_the_records_needed_are_large() {
    // Unread data worth more than a quarter of what was written stays put.
    let mut b = ring(64 << 10);
    filler(&mut b, 0..2);
    put(&mut b, 1, 1, 0, &[b"a"], LC);
    commit(&mut b, 3, 1, &Chunk::new(0, &[b"b"], LC, P1K));
    assert_eq!(read_bytes(&mut b), filler_packets(0..2));
    assert_eq!(b.write_offset(), 2048 + 32 + 1024);
}

#[test]
fn a_chunk_committed_out_of_order_is_still_read_in_order_after_a_move() {
    // Chunk 1 of (1, 1) is missing: the consumed chunk 0 moves along with
    // chunk 2, or the reader would take chunk 2 as the sequence's start.
    let mut b = ring(64 << 10);
    filler(&mut b, 0..8);
    put(&mut b, 1, 1, 0, &[b"a"], 0);
    put(&mut b, 1, 1, 2, &[b"c"], 0);
    let mut want = vec![b"a".to_vec()];
    want.extend(filler_packets(0..8));
    assert_eq!(read_bytes(&mut b), want);
    assert_eq!(b.write_offset(), 64 + 1024);
    put(&mut b, 1, 1, 1, &[b"b"], 0);
    let r = read_pass(&mut b);
    let got: Vec<&[u8]> = r.iter().map(|(p, _)| &p[..]).collect();
    assert_eq!(got, [&b"b"[..], &b"c"[..]]);
    assert!(r.iter().all(|(_, info)| !info.previous_packet_dropped));
}

#[test]
fn a_sequence_continues_without_a_loss_flag_after_its_chunks_moved() {
    let mut b = ring(64 << 10);
    filler(&mut b, 0..8);
    put(&mut b, 1, 1, 0, &[b"a"], 0);
    put(&mut b, 1, 1, 1, &[b"b"], 0);
    put(&mut b, 1, 1, 2, &[b"c"], NP);
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 10);
    assert_eq!(b.write_offset(), 64 + 1024, "chunks 1, 2 and 7 moved");
    assert!(b.try_patch_chunk_contents(1, 1, 2, &[], false));
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].0, b"c");
    assert!(!r[0].1.previous_packet_dropped);
    // Nothing was written since: no sequence needs a guard any more.
    assert_eq!(b.write_offset(), 0);
    put(&mut b, 1, 1, 3, &[b"d"], 0);
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 1);
    assert!(!r[0].1.previous_packet_dropped, "continuity kept");
}

#[test]
fn a_late_copy_of_a_consumed_chunk_is_not_read_twice() {
    let mut b = ring(64 << 10);
    filler(&mut b, 0..8);
    put(&mut b, 1, 1, 0, &[b"a"], 0);
    put(&mut b, 1, 1, 1, &[b"b"], 0);
    assert_eq!(read_pass(&mut b).len(), 10);
    // Chunk 0 left the index; a second commit of it is stale.
    put(&mut b, 1, 1, 0, &[b"a"], 0);
    assert!(read_bytes(&mut b).is_empty());
    assert_eq!(b.stats().chunks_committed_out_of_order, 1);
    // A new writer registered with the same id starts over at chunk 0.
    b.forget_evicted(1, 1);
    put(&mut b, 1, 1, 0, &[b"new"], 0);
    assert_eq!(read_bytes(&mut b), [b"new".to_vec()]);
}
