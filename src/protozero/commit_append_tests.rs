//! Every state a kill can leave the file in parses, and shows either all
//! of a batch or none of it.

use super::*;

/// A file in memory that logs its writes.
#[derive(Default, Clone)]
struct MemFile {
    bytes: Vec<u8>,
    writes: Vec<(u64, Vec<u8>)>,
}

impl WriteAt for MemFile {
    type Error = ();
    fn write_all_at(&mut self, buf: &[u8], at: u64) -> Result<(), ()> {
        apply(&mut self.bytes, at, buf);
        self.writes.push((at, buf.to_vec()));
        Ok(())
    }
}

fn apply(image: &mut Vec<u8>, at: u64, buf: &[u8]) {
    let end = at as usize + buf.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[at as usize..end].copy_from_slice(buf);
}

fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for k in 0..10 {
        let c = *b.get(*i)?;
        *i += 1;
        v |= u64::from(c & 0x7f) << (7 * k);
        if c & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The packets of a file that must parse whole: complete fields only,
/// packets and padding only.
fn packets(image: &[u8]) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < image.len() {
        let at = i;
        let tag = varint(image, &mut i).ok_or(format!("torn tag at {at}"))?;
        let field = tag >> 3;
        match tag & 7 {
            0 if field == u64::from(PAD_FIELD) => {
                varint(image, &mut i).ok_or(format!("torn varint at {at}"))?;
            }
            2 if field == 1 || field == u64::from(PAD_FIELD) => {
                let n = varint(image, &mut i).ok_or(format!("torn length at {at}"))? as usize;
                if i + n > image.len() {
                    return Err(format!(
                        "field at {at} runs {} bytes past the end",
                        i + n - image.len()
                    ));
                }
                if field == 1 {
                    out.push(&image[i..i + n]);
                }
                i += n;
            }
            _ => return Err(format!("unexpected tag {tag:#x} at {at}")),
        }
    }
    Ok(out)
}

/// Whole packets of the given payload sizes, numbered from `first`.
fn batch(sizes: &[usize], first: &mut u32) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut out = Vec::new();
    let mut list = Vec::new();
    for &len in sizes {
        let mut p = first.to_le_bytes().to_vec();
        p.resize(len.max(4), (*first % 251) as u8);
        *first += 1;
        out.push(PACKET_TAG);
        let mut l = p.len() as u64;
        while l >= 0x80 {
            out.push(l as u8 | 0x80);
            l >>= 7;
        }
        out.push(l as u8);
        out.extend_from_slice(&p);
        list.push(p);
    }
    (out, list)
}

fn random_sizes(rounds: usize, seed: u64, max: usize, per_batch: usize) -> Vec<Vec<usize>> {
    let mut rng = seed | 1;
    (0..rounds)
        .map(|round| {
            (0..1 + round % per_batch)
                .map(|_| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    4 + rng as usize % max
                })
                .collect()
        })
        .collect()
}

/// Every image a kill during `writes` can leave: before each write, and
/// cut at each page boundary inside it.
fn kill_points(start: &[u8], writes: &[(u64, Vec<u8>)]) -> Vec<Vec<u8>> {
    let mut out = vec![start.to_vec()];
    let mut image = start.to_vec();
    for (at, buf) in writes {
        let end = at + buf.len() as u64;
        let mut cut = (at / PAGE + 1) * PAGE;
        while cut < end {
            let mut torn = image.clone();
            apply(&mut torn, *at, &buf[..(cut - at) as usize]);
            out.push(torn);
            cut += PAGE;
        }
        apply(&mut image, *at, buf);
        out.push(image.clone());
    }
    out
}

fn run(start_len: usize, rounds: usize, seed: u64, max_packet: usize, per_batch: usize) {
    check(
        start_len,
        &random_sizes(rounds, seed, max_packet, per_batch),
    );
}

/// Appends batches of packets of `sizes`, checking every kill point.
fn check(start_len: usize, sizes: &[Vec<usize>]) {
    let rounds = sizes.len();
    let mut f = MemFile::default();
    // Whatever the file held before: whole packets.
    let mut number = 0;
    let mut all: Vec<Vec<u8>> = Vec::new();
    if start_len > 0 {
        let payload = if start_len < 130 {
            start_len - 2
        } else {
            start_len - 3
        };
        let (bytes, list) = batch(&[payload], &mut number);
        assert_eq!(bytes.len(), start_len);
        f.bytes = bytes;
        all.extend(list);
    }
    let mut app = CommitAppender::new(f.bytes.len() as u64);
    for (round, sizes) in sizes.iter().enumerate() {
        let (bytes, list) = batch(sizes, &mut number);
        let before = f.bytes.clone();
        f.writes.clear();
        app.append(&mut f, &bytes).unwrap();
        let old = all.len();
        all.extend(list);
        for (k, image) in kill_points(&before, &f.writes).iter().enumerate() {
            let got = packets(image).unwrap_or_else(|e| panic!("round {round} kill {k}: {e}"));
            assert!(
                got.len() == old || got.len() == all.len(),
                "round {round} kill {k}: {} packets, want {old} or {}",
                got.len(),
                all.len()
            );
            assert!(
                got.iter().zip(&all).all(|(a, b)| a == b),
                "round {round} kill {k}"
            );
        }
        assert!(app.committed() <= f.bytes.len() as u64);
    }
    let mut clean = f.bytes.clone();
    clean.truncate(app.committed() as usize);
    let got = packets(&clean).unwrap();
    assert_eq!(got.len(), all.len());
    // After a clean finish only rare fillers remain besides packets.
    let overhead = clean.len() - all.iter().map(|p| p.len() + 1).sum::<usize>();
    assert!(
        overhead <= rounds * 12 + 4097,
        "{overhead} bytes of framing"
    );
}

#[test]
fn small_batches_from_an_empty_file() {
    run(0, 300, 7, 40, 5);
}

#[test]
fn page_sized_and_larger_batches() {
    run(0, 60, 11, 9000, 4);
}

#[test]
fn a_batch_larger_than_one_growth_step() {
    check(0, &[vec![9000; 20], vec![100], vec![70_000, 3]]);
}

#[test]
fn every_header_position_near_a_page_end() {
    // Packet sizes 1..64 walk the end of each batch through every offset
    // of a page, so the filler cases (1 to 5 bytes left) all come up.
    for seed in 1..40 {
        run(0, 40, seed * 977, 64, 3);
    }
}

#[test]
fn a_batch_ending_just_before_a_page_boundary() {
    // One packet of 4090 - k payload bytes (a 3-byte header, stripped)
    // ends its batch k bytes before the first page boundary.
    for k in 0..8 {
        check(0, &[vec![4090 - k], vec![10], vec![5000], vec![20]]);
    }
}

#[test]
fn a_file_handed_over_at_an_odd_offset() {
    // Not 4095: a 1-byte gap is the documented exception (see `align`).
    for start in [6, 7, 100, 4090, 4091, 4092, 4094] {
        run(start, 20, 5, 3000, 3);
    }
}

#[test]
fn a_batch_not_starting_with_a_packet_keeps_its_first_field() {
    let mut f = MemFile::default();
    let mut app = CommitAppender::new(0);
    let batch = [0x10, 0x05, PACKET_TAG, 2, 0xaa, 0xbb];
    app.append(&mut f, &batch).unwrap();
    let clean = &f.bytes[..app.committed() as usize];
    assert!(clean.ends_with(&batch[..]));
    assert_eq!(
        packets(&f.bytes[..]).unwrap_err(),
        "unexpected tag 0x10 at 6"
    );
}

#[test]
fn first_packet_reads_the_header() {
    assert_eq!(first_packet(&[PACKET_TAG, 3, 1, 2, 3]), Some((2, 3)));
    assert_eq!(first_packet(&[PACKET_TAG, 0x80, 0x01]), Some((3, 128)));
    assert_eq!(first_packet(&[0x12, 0]), None);
    assert_eq!(first_packet(&[PACKET_TAG, 0x80]), None);
}

/// Why the padding ahead is written, not made of zeros by growing the file:
/// neither order of growing and claiming parses, and a kill keeps the state
/// between the two steps.
#[test]
fn a_file_extended_with_zeros_parses_in_neither_order() {
    let mut number = 0;
    let (whole, _) = batch(&[100, 200], &mut number);
    let at = whole.len();
    // Extended first: zeros follow the last packet.
    let mut extended = whole.clone();
    extended.resize(at + 2 * PAGE as usize, 0);
    assert_eq!(
        packets(&extended).unwrap_err(),
        format!("unexpected tag 0x0 at {at}")
    );
    // The padding's header first: it claims bytes the file lacks.
    let mut claimed = whole.clone();
    push_pad_header(&mut claimed, 2 * PAGE - HDR);
    assert_eq!(
        packets(&claimed).unwrap_err(),
        format!("field at {at} runs {} bytes past the end", 2 * PAGE - HDR)
    );
    // Once both are done it parses: the state between is what a kill keeps.
    extended[at..at + HDR as usize].copy_from_slice(&claimed[at..]);
    assert_eq!(packets(&extended).unwrap().len(), 2);
}
