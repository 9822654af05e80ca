//! Reading back: order, fragments, continuity (FACTS §d.2).

use super::test_util::*;
use crate::tracing::core::smb_abi::{
    FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK as FC,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK as LC,
};

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
    assert_eq!(p.slices().collect::<Vec<_>>(), [b"A".as_slice()]);
    let (p, info) = b.read_next_trace_packet().unwrap();
    assert_eq!(p.slices().collect::<Vec<_>>(), [b"B1".as_slice(), b"B2"]);
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
    assert_eq!(
        pk,
        [
            b"p0".to_vec(),
            b"p1ap1bp1c".to_vec(),
            b"p2".to_vec(),
            b"p3".to_vec()
        ]
    );
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
    assert_eq!(
        read_bytes(&mut b),
        [b"x".to_vec(), b"z".to_vec(), b"y".to_vec()]
    );
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
    assert_eq!(
        r.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        [b"c1".to_vec(), b"c2".to_vec()]
    );
    assert!(r.iter().all(|(_, i)| !i.previous_packet_dropped));
}

#[test]
fn continuation_without_its_start_is_dropped_and_flagged() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 5, &[b"tail", b"next", b"more"], FC);
    let r = read_pass(&mut b);
    assert_eq!(
        r.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        [b"next".to_vec(), b"more".to_vec()]
    );
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
        put(
            &mut b,
            p,
            w,
            0,
            &[
                format!("{p}{w}a").as_bytes(),
                format!("{p}{w}b1").as_bytes(),
            ],
            LC,
        );
    }
    for (p, w) in [(1u16, 1u16), (2, 1), (1, 2)] {
        put(
            &mut b,
            p,
            w,
            1,
            &[
                format!("{p}{w}b2").as_bytes(),
                format!("{p}{w}c").as_bytes(),
            ],
            FC,
        );
    }
    let r = read_pass(&mut b);
    let got: Vec<_> = r
        .iter()
        .map(|(pk, i)| {
            (
                i.producer_id,
                i.writer_id,
                String::from_utf8(pk.clone()).unwrap(),
            )
        })
        .collect();
    let mut expected = Vec::new();
    for (p, w) in [(1u16, 1u16), (1, 2), (2, 1)] {
        for s in ["a", "b1b2", "c"] {
            let s = if s == "b1b2" {
                format!("{p}{w}b1{p}{w}b2")
            } else {
                format!("{p}{w}{s}")
            };
            expected.push((p, w, s));
        }
    }
    assert_eq!(got, expected);
    assert_eq!(r[6].1.client, client(200));
    // Each sequence's first packet is flagged, the rest are not.
    let flags: Vec<bool> = r.iter().map(|(_, i)| i.previous_packet_dropped).collect();
    assert_eq!(
        flags,
        [true, false, false, true, false, false, true, false, false]
    );
}

#[test]
fn empty_packets_are_skipped() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[b"", b"a", b"", b"", b"b", b""], 0);
    let r = read_pass(&mut b);
    assert_eq!(
        r.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        [b"a".to_vec(), b"b".to_vec()]
    );
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

#[test]
fn previous_packet_dropped_through_a_sessions_life() {
    let pk = |c: u8, n: usize| vec![c; n];
    let mut b = ring(4096);
    put(
        &mut b,
        1,
        1,
        0,
        &[&pk(b'a', 9), &pk(b'b', 9), &pk(b'c', 9)],
        LC,
    );
    // Producer 2: "v" gets a zero size header, so its body is parsed as a
    // bogus size and the rest of the chunk is given up.
    let mut c = Chunk::new(0, &[&pk(b'u', 9), &pk(b'v', 9), &pk(b'w', 9)], 0, 0);
    c.payload[10] = 0;
    commit(&mut b, 2, 1, &c);

    let r = read_pass(&mut b);
    let got: Vec<_> = r
        .iter()
        .map(|(p, i)| (p[0], i.previous_packet_dropped))
        .collect();
    assert_eq!(got, [(b'a', true), (b'b', false), (b'u', true)]);
    assert_eq!(b.stats().abi_violations, 1);

    put(&mut b, 2, 1, 1, &[&pk(b'x', 9), &pk(b'y', 9)], 0);
    put(&mut b, 1, 1, 1, &[&pk(b'd', 9), &pk(b'e', 9)], FC);
    let r = read_pass(&mut b);
    let got: Vec<_> = r
        .iter()
        .map(|(p, i)| (p[0], p.len(), i.previous_packet_dropped))
        .collect();
    // c+d reassembled after b: continuous. x follows the lost v and w.
    assert_eq!(
        got,
        [
            (b'c', 18, false),
            (b'e', 9, false),
            (b'x', 9, true),
            (b'y', 9, false)
        ]
    );

    // Two big chunks that cannot both fit: f is overwritten unread.
    put(&mut b, 1, 1, 2, &[&pk(b'f', 2000)], 0);
    put(&mut b, 1, 1, 3, &[&pk(b'g', 3000)], 0);
    let r = read_pass(&mut b);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0[0], r[0].1.previous_packet_dropped), (b'g', true));
    // Producer 2's chunks were all evicted, but chunk 1 had been read whole
    // before: z follows y with nothing lost (the evicted tail remembers).
    put(&mut b, 2, 1, 2, &[&pk(b'z', 9)], 0);
    let r = read_pass(&mut b);
    assert_eq!((r[0].0[0], r[0].1.previous_packet_dropped), (b'z', false));
    // A gap in the ids after an eviction is a loss.
    put(&mut b, 2, 1, 4, &[&pk(b'q', 3000)], 0);
    put(&mut b, 2, 1, 5, &[&pk(b'r', 3000)], 0);
    let r = read_pass(&mut b);
    assert_eq!((r[0].0[0], r[0].1.previous_packet_dropped), (b'r', true));
}

#[test]
fn empty_chunks_inside_a_fragmented_packet_are_stepped_over() {
    let mut b = ring(8192);
    put(&mut b, 1, 1, 0, &[b"A1"], LC);
    // A chunk with no fragments between two pieces (a writer that flushed
    // an empty chunk); upstream steps over it while reading ahead.
    put(&mut b, 1, 1, 1, &[], 0);
    put(&mut b, 1, 1, 2, &[b"A2", b"B"], FC);
    // The empty chunk breaks nothing but is not a continuation either:
    // the id sequence is contiguous, so the packet completes.
    assert_eq!(read_bytes(&mut b), [b"A1A2".to_vec(), b"B".to_vec()]);
}

#[test]
fn empty_chunk_at_the_start_or_end_of_a_sequence() {
    let mut b = ring(4096);
    put(&mut b, 1, 1, 0, &[], 0);
    put(&mut b, 1, 1, 1, &[b"a", b"b1"], LC);
    put(&mut b, 1, 1, 2, &[b"b2", b"c1"], FC | LC);
    let r = read_pass(&mut b);
    assert_eq!(
        r.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        [b"a".to_vec(), b"b1b2".to_vec()]
    );
    assert!(r[0].1.previous_packet_dropped);
    // An empty chunk after a pending continuation does not complete it.
    put(&mut b, 1, 1, 3, &[], 0);
    assert!(read_pass(&mut b).is_empty());
}

#[test]
fn writer_stats_record_how_full_read_chunks_were() {
    let mut b = ring(8192);
    // 2 + 3 bytes used of a 1000-byte payload; then a scraped chunk, which
    // only counts once complete.
    commit(&mut b, 1, 1, &Chunk::new(0, &[b"a", b"bc"], 0, 1000));
    let c1 = Chunk::new(1, &[&[7u8; 40], b"x"], 0, 1000);
    b.copy_chunk_untrusted(1, client(1), 1, 1, 2, 0, false, &c1.payload);
    commit(&mut b, 2, 3, &Chunk::new(0, &[&[1u8; 200]], 0, 1000));
    read_pass(&mut b);
    let stats: Vec<_> = b
        .writer_stats()
        .map(|(k, h)| (k, h.counts, h.sums))
        .collect();
    assert_eq!(stats.len(), 2);
    let ((p, w), counts, sums) = stats[0];
    assert_eq!((p, w), (1, 1));
    assert_eq!((counts[0], sums[0]), (1, 5));
    assert_eq!(counts.iter().sum::<u64>(), 1);
    let (_, counts, sums) = stats[1];
    assert_eq!((counts[3], sums[3]), (1, 204)); // 4-byte size header + 200
    commit(&mut b, 1, 1, &c1);
    read_pass(&mut b);
    let h = b.writer_stats().next().unwrap().1;
    assert_eq!((h.counts[2], h.sums[2]), (1, 43));
}

/// Packets with their continuity flag, read `per_pass` at a time, each
/// batch in a new pass (as ReadBuffers does), until nothing is left.
fn read_in_passes(b: &mut super::TraceBuffer, per_pass: usize) -> Vec<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    loop {
        b.begin_read();
        let mut n = 0;
        while n < per_pass {
            let Some((p, info)) = b.read_next_trace_packet() else {
                break;
            };
            out.push((p.to_vec(), info.previous_packet_dropped));
            n += 1;
        }
        if n == 0 {
            return out;
        }
    }
}

#[test]
fn many_small_passes_read_what_one_pass_reads() {
    // Several sequences: one with a packet whose start was lost (skipped,
    // flagged on the next), one with a packet spanning chunks, one with a
    // gap in chunk ids (nothing after it is readable yet).
    let fill = |b: &mut super::TraceBuffer| {
        for id in 0..40u32 {
            let p = format!("a{id}");
            put(b, 1, 1, id, &[p.as_bytes(), b"x"], 0);
        }
        for id in 0..30u32 {
            let flags = if id == 13 { FC } else { 0 };
            let p = format!("b{id}");
            put(b, 1, 2, id, &[p.as_bytes(), b"y", b""], flags);
        }
        for id in 0..20u32 {
            let flags = match id {
                7 => LC,
                8 => FC,
                _ => 0,
            };
            let p = format!("c{id}");
            put(b, 2, 1, id, &[p.as_bytes()], flags);
        }
        for id in (0..10u32).filter(|&id| id != 6) {
            let p = format!("d{id}");
            put(b, 2, 2, id, &[p.as_bytes()], 0);
        }
    };
    let mut whole = ring(64 * 1024);
    fill(&mut whole);
    let want = read_in_passes(&mut whole, usize::MAX);
    assert_eq!(want.len(), 80 + (30 * 2 - 1) + (20 - 1) + 6);
    assert!(want.iter().any(|(p, dropped)| p == b"y" && *dropped));
    for per_pass in [1, 2, 3, 7, 50] {
        let mut b = ring(64 * 1024);
        fill(&mut b);
        assert_eq!(
            read_in_passes(&mut b, per_pass),
            want,
            "{per_pass} per pass"
        );
        // Writes between passes invalidate what earlier passes learnt.
        let mut b = ring(64 * 1024);
        fill(&mut b);
        b.begin_read();
        let first = b.read_next_trace_packet().unwrap().0.to_vec();
        put(&mut b, 3, 1, 0, &[b"late"], 0);
        let mut got = vec![(first, true)];
        got.extend(read_in_passes(&mut b, per_pass));
        let mut expected = want.clone();
        expected.push((b"late".to_vec(), true));
        assert_eq!(got, expected, "{per_pass} per pass, with a write");
    }
}

#[test]
fn a_write_between_reads_cannot_redirect_the_reader() {
    // The reader remembers its chunk's index slot. Here that chunk is
    // overwritten mid-pass and its slot goes to the chunk that replaced
    // it: the reader must notice, not read on in the newcomer.
    let mut b = ring(2048);
    commit(&mut b, 1, 1, &Chunk::new(0, &[b"a1", b"a2"], 0, P1K));
    commit(&mut b, 2, 1, &Chunk::new(0, &[b"b1"], 0, P1K));
    b.begin_read();
    let (p, info) = b.read_next_trace_packet().unwrap();
    assert_eq!((p.to_vec(), info.producer_id), (b"a1".to_vec(), 1));
    commit(&mut b, 3, 1, &Chunk::new(0, &[b"c1"], 0, P1K));
    assert_eq!(b.stats().chunks_overwritten, 1);
    let mut rest = Vec::new();
    while let Some((p, info)) = b.read_next_trace_packet() {
        rest.push((p.to_vec(), info.producer_id));
    }
    assert_eq!(rest, [(b"b1".to_vec(), 2), (b"c1".to_vec(), 3)]);
}
