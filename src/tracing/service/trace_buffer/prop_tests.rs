//! Seeded randomized tests: a reference writer fragments random packets
//! into chunks, which are committed in a perturbed order (with scrapes and
//! retransmits) while reads happen at random points.

use super::test_util::*;
use super::*;
use std::collections::BTreeMap;

struct Sequence {
    producer: u16,
    writer: u16,
    packets: Vec<Vec<u8>>,
    chunks: Vec<Chunk>,
}

/// Packets are tagged with a unique prefix so they can be identified.
fn random_packet(rng: &mut Rng, serial: &mut u32, chunk_payload: usize) -> Vec<u8> {
    if rng.chance(5) {
        return Vec::new();
    }
    let len = match rng.below(10) {
        0..=6 => 4 + rng.below(120) as usize,
        7 | 8 => 4 + rng.below(chunk_payload as u64 * 2) as usize,
        _ => 4 + rng.below(chunk_payload as u64 * 6) as usize,
    };
    *serial += 1;
    let mut p = serial.to_le_bytes().to_vec();
    p.extend(rng.bytes(len - 4));
    p
}

fn random_sequences(rng: &mut Rng) -> Vec<Sequence> {
    let n = 1 + rng.below(4) as usize;
    let mut serial = 0u32;
    let mut seqs: Vec<Sequence> = Vec::new();
    while seqs.len() < n {
        let producer = 1 + rng.below(3) as u16;
        let writer = 1 + rng.below(3) as u16;
        if seqs
            .iter()
            .any(|s| (s.producer, s.writer) == (producer, writer))
        {
            continue;
        }
        let chunk_payload = 32 + rng.below(1500) as usize;
        let first_id = match rng.below(3) {
            0 => 0,
            1 => u32::MAX - rng.below(6) as u32,
            _ => rng.next() as u32,
        };
        let mut w = RefWriter::new(chunk_payload, first_id);
        let mut packets = Vec::new();
        for _ in 0..1 + rng.below(50) {
            let p = random_packet(rng, &mut serial, chunk_payload);
            w.write_packet(&p);
            packets.push(p);
        }
        packets.retain(|p| !p.is_empty());
        seqs.push(Sequence {
            producer,
            writer,
            packets,
            chunks: w.finish(),
        });
    }
    seqs
}

/// Commit order per sequence: mostly in order, with neighbours swapped;
/// the first chunk always goes first (a sequence's start must not arrive
/// after its continuation, or the reader rightly gives up on it).
fn perturbed_order(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in 1..n.saturating_sub(1) {
        if rng.chance(30) {
            order.swap(i, i + 1);
        }
    }
    order
}

type Seen = BTreeMap<(u16, u16), Vec<(Vec<u8>, bool)>>;

fn drain(buf: &mut TraceBuffer, seen: &mut Seen) {
    for (p, info) in read_pass(buf) {
        seen.entry((info.producer_id, info.writer_id))
            .or_default()
            .push((p, info.previous_packet_dropped));
    }
}

#[test]
fn lossless_round_trip_with_reordering_scrapes_and_retransmits() {
    for seed in 0..60 {
        let mut rng = Rng::new(seed);
        let seqs = random_sequences(&mut rng);
        let mut buf = TraceBuffer::new(8 << 20, OverwritePolicy::Overwrite).unwrap();
        let mut queues: Vec<Vec<usize>> = seqs
            .iter()
            .map(|s| perturbed_order(&mut rng, s.chunks.len()))
            .collect();
        for q in &mut queues {
            q.reverse();
        }
        let mut seen = Seen::new();
        let mut committed: Vec<(usize, usize)> = Vec::new();
        while queues.iter().any(|q| !q.is_empty()) {
            let s = rng.below(seqs.len() as u64) as usize;
            let Some(ci) = queues[s].pop() else { continue };
            let (seq, chunk) = (&seqs[s], &seqs[s].chunks[ci]);
            if rng.chance(10) {
                buf.copy_chunk_untrusted(
                    seq.producer,
                    client(seq.producer as u32 * 100),
                    seq.writer,
                    chunk.id,
                    chunk.num_fragments,
                    chunk.flags,
                    false,
                    &chunk.payload,
                );
                if rng.chance(50) {
                    drain(&mut buf, &mut seen);
                }
            }
            commit(&mut buf, seq.producer, seq.writer, chunk);
            committed.push((s, ci));
            if rng.chance(10) {
                let (s, ci) = committed[rng.below(committed.len() as u64) as usize];
                commit(
                    &mut buf,
                    seqs[s].producer,
                    seqs[s].writer,
                    &seqs[s].chunks[ci],
                );
            }
            if rng.chance(15) {
                drain(&mut buf, &mut seen);
            }
        }
        drain(&mut buf, &mut seen);

        for seq in &seqs {
            let got = seen.remove(&(seq.producer, seq.writer)).unwrap_or_default();
            let bytes: Vec<&Vec<u8>> = got.iter().map(|(p, _)| p).collect();
            let want: Vec<&Vec<u8>> = seq.packets.iter().collect();
            assert_eq!(bytes.len(), want.len(), "seed {seed}: packet count");
            assert!(bytes == want, "seed {seed}: packets differ");
            for (i, (_, dropped)) in got.iter().enumerate() {
                assert_eq!(
                    *dropped,
                    i == 0,
                    "seed {seed}: previous_packet_dropped of packet {i}"
                );
            }
        }
        assert!(seen.is_empty());
        assert_eq!(buf.stats().abi_violations, 0, "seed {seed}");
        assert_eq!(buf.stats().chunks_overwritten, 0, "seed {seed}");
    }
}

#[test]
fn lossy_ring_never_loses_silently() {
    for seed in 0..60 {
        let mut rng = Rng::new(1000 + seed);
        let seqs = random_sequences(&mut rng);
        let size = 16 * (256 + rng.below(1024) as usize);
        let mut buf = TraceBuffer::new(size, OverwritePolicy::Overwrite).unwrap();
        let mut next: Vec<usize> = vec![0; seqs.len()];
        let mut seen = Seen::new();
        while next.iter().zip(&seqs).any(|(n, s)| *n < s.chunks.len()) {
            let s = rng.below(seqs.len() as u64) as usize;
            if next[s] == seqs[s].chunks.len() {
                continue;
            }
            commit(
                &mut buf,
                seqs[s].producer,
                seqs[s].writer,
                &seqs[s].chunks[next[s]],
            );
            next[s] += 1;
            if rng.chance(10) {
                drain(&mut buf, &mut seen);
            }
        }
        drain(&mut buf, &mut seen);
        assert!(buf.size() == size && buf.storage_capacity() == size);

        for seq in &seqs {
            let got = seen.remove(&(seq.producer, seq.writer)).unwrap_or_default();
            let mut expect_next = 0usize;
            for (p, dropped) in &got {
                let idx = seq.packets.iter().position(|w| w == p);
                let idx =
                    idx.unwrap_or_else(|| panic!("seed {seed}: returned a packet never written"));
                assert!(
                    idx >= expect_next,
                    "seed {seed}: out of order or duplicated"
                );
                if idx > expect_next || expect_next == 0 {
                    assert!(
                        *dropped,
                        "seed {seed}: packet {idx} follows a loss but is not flagged"
                    );
                }
                expect_next = idx + 1;
            }
        }
    }
}

/// Hostile producer: random ids, counts, flags, payload bytes, patches and
/// recommits. Nothing may panic, memory stays bounded, and whatever is
/// returned lies inside what was written.
#[test]
fn hostile_input_never_panics() {
    for seed in 0..40 {
        let mut rng = Rng::new(5000 + seed);
        let size = 16 * (1 + rng.below(2048) as usize);
        let policy = if rng.chance(50) {
            OverwritePolicy::Overwrite
        } else {
            OverwritePolicy::Discard
        };
        let mut buf = TraceBuffer::new(size, policy).unwrap();
        for _ in 0..400 {
            let producer = rng.below(3) as u16;
            let writer = rng.below(3) as u16;
            let id = if rng.chance(80) {
                rng.below(8) as u32
            } else {
                rng.next() as u32
            };
            match rng.below(10) {
                0..=5 => {
                    let len = if rng.chance(5) {
                        rng.below(70_000)
                    } else {
                        rng.below(300)
                    } as usize;
                    let mut payload = rng.bytes(len);
                    // Sometimes plausible fragments, sometimes garbage.
                    if rng.chance(50) && len > 8 {
                        let n = rng.below(len as u64 - 5) as usize;
                        let f = frag(&rng.bytes(n));
                        payload[..f.len().min(len)].copy_from_slice(&f[..f.len().min(len)]);
                    }
                    let nf = if rng.chance(80) {
                        rng.below(6) as u16
                    } else {
                        rng.next() as u16
                    };
                    let flags = rng.next() as u8;
                    buf.copy_chunk_untrusted(
                        producer,
                        client(1),
                        writer,
                        id,
                        nf,
                        flags,
                        rng.chance(80),
                        &payload,
                    );
                }
                6 | 7 => {
                    let patches: Vec<Patch> = (0..rng.below(4))
                        .map(|_| Patch {
                            offset_untrusted: rng.below(400) as u32,
                            data: [0xff, 0xff, 0xff, 0x7f],
                        })
                        .collect();
                    buf.try_patch_chunk_contents(producer, writer, id, &patches, rng.chance(30));
                }
                _ => {
                    buf.begin_read();
                    for _ in 0..rng.below(20) {
                        let Some((p, _)) = buf.read_next_trace_packet() else {
                            break;
                        };
                        assert!(p.size() > 0 && p.size() <= size);
                    }
                }
            }
            assert_eq!(buf.storage_capacity(), size);
            assert!(buf.num_chunks() <= size / 16);
        }
        // Draining always terminates.
        for _ in 0..3 {
            read_pass(&mut buf);
        }
        let _ = buf.clone_read_only();
    }
}
