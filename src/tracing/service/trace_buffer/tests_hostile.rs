//! Malformed chunks from a hostile producer: counted, dropped, never a panic.

use super::test_util::*;
use crate::tracing::core::smb_abi::{
    FLAG_FIRST_PACKET_CONTINUES_FROM_PREV_CHUNK as FC,
    FLAG_LAST_PACKET_CONTINUES_ON_NEXT_CHUNK as LC,
};

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
    b.copy_chunk_untrusted(
        1,
        client(1),
        1,
        0,
        1,
        0,
        true,
        &[0xff, 0xff, 0xff, 0xff, 0x01, 0],
    );
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
