//! Verifies a trace file written by a consumer against what sdk-producer
//! wrote: per writer thread, which packets are present, their order within
//! their packet sequence, and their payload bytes; and relates the counts to
//! the service's own trace_stats in the same file.

use crate::payload::*;
use crate::pbread::{fields, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// What the buffer is expected to have kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Every packet, each sequence complete.
    All,
    /// RING_BUFFER: a contiguous tail of each sequence (may be all).
    Tail,
    /// DISCARD: a contiguous head of each sequence (may be all).
    Head,
}

impl std::str::FromStr for Expect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all" | "full" => Ok(Expect::All),
            "ring" | "tail" => Ok(Expect::Tail),
            "discard" | "head" => Ok(Expect::Head),
            _ => Err(format!("unknown mode {s:?} (all|ring|discard)")),
        }
    }
}

pub struct Params {
    pub threads: u32,
    pub packets_per_thread: u32,
    pub payload_size: usize,
    pub expect: Expect,
    /// Every packet of a thread carries the payload of its seq 0.
    pub fixed_payload: bool,
    /// The scenario is sized to overflow the buffer: require missing packets.
    pub expect_loss: bool,
}

/// Buffer stats of one trace buffer, by TraceStats.BufferStats field number.
#[derive(Debug, Default, Clone)]
pub struct BufferStats(pub BTreeMap<u32, u64>);

const BUFFER_STAT_NAMES: &[(u32, &str)] = &[
    (12, "buffer_size"),
    (1, "bytes_written"),
    (13, "bytes_overwritten"),
    (14, "bytes_read"),
    (15, "padding_bytes_written"),
    (16, "padding_bytes_cleared"),
    (2, "chunks_written"),
    (10, "chunks_rewritten"),
    (3, "chunks_overwritten"),
    (18, "chunks_discarded"),
    (17, "chunks_read"),
    (11, "chunks_committed_out_of_order"),
    (4, "write_wrap_count"),
    (5, "patches_succeeded"),
    (6, "patches_failed"),
    (7, "readaheads_succeeded"),
    (8, "readaheads_failed"),
    (9, "abi_violations"),
    (19, "trace_writer_packet_loss"),
];

const TRACE_STAT_NAMES: &[(u32, &str)] = &[
    (2, "producers_connected"),
    (3, "producers_seen"),
    (4, "data_sources_registered"),
    (5, "data_sources_seen"),
    (6, "tracing_sessions"),
    (7, "total_buffers"),
    (8, "chunks_discarded"),
    (9, "patches_discarded"),
    (10, "invalid_packets"),
    (12, "flushes_requested"),
    (13, "flushes_succeeded"),
    (14, "flushes_failed"),
    (15, "final_flush_outcome"),
];

impl BufferStats {
    pub fn get(&self, name: &str) -> u64 {
        BUFFER_STAT_NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .and_then(|(f, _)| self.0.get(f).copied())
            .unwrap_or(0)
    }
}

#[derive(Debug, Default)]
pub struct TraceStats {
    pub buffers: Vec<BufferStats>,
    pub global: BTreeMap<u32, u64>,
}

#[derive(Default)]
struct ThreadSeen {
    seq_ids: Vec<u64>,
    seqs: Vec<u32>,
    bytes: u64,
    is_last_seen: bool,
}

pub struct Report {
    pub pass: bool,
    pub text: String,
    pub found: u64,
    pub stats: Option<TraceStats>,
}

fn decode_trace_stats(buf: &[u8]) -> Result<TraceStats, String> {
    let mut ts = TraceStats::default();
    for item in fields(buf) {
        let (f, v) = item.map_err(|e| format!("trace_stats: {e:?}"))?;
        match (f, v) {
            (1, Value::Bytes(b)) => {
                let mut bs = BufferStats::default();
                for item in fields(b) {
                    let (bf, bv) = item.map_err(|e| format!("buffer_stats: {e:?}"))?;
                    if let Some(x) = bv.as_u64() {
                        bs.0.insert(bf, x);
                    }
                }
                ts.buffers.push(bs);
            }
            (f, v) => {
                if let Some(x) = v.as_u64() {
                    ts.global.insert(f, x);
                }
            }
        }
    }
    Ok(ts)
}

/// Checks `trace` (a serialized Trace) against `p`.
pub fn check(trace: &[u8], p: &Params) -> Report {
    let mut errors: Vec<String> = Vec::new();
    let mut threads: BTreeMap<u32, ThreadSeen> = BTreeMap::new();
    let mut other_packets = 0u64;
    let mut total_packets = 0u64;
    let mut stats: Option<TraceStats> = None;
    let mut expected_buf = vec![0u8; p.payload_size];

    'packets: for item in fields(trace) {
        let (f, v) = match item {
            Ok(x) => x,
            Err(e) => {
                errors.push(format!("trace framing: {e:?}"));
                break;
            }
        };
        let (TRACE_PACKET_FIELD, Value::Bytes(packet)) = (f, v) else {
            errors.push(format!("unexpected top-level field {f}"));
            continue;
        };
        total_packets += 1;
        let mut seq_id = None;
        let mut test_event = None;
        // Bytes of the for_testing field as the producer wrote them (the
        // service appends trusted_* fields of its own to each packet).
        let mut producer_bytes = 0usize;
        let mut it = fields(packet);
        let mut field_start = 0;
        while let Some(item) = it.next() {
            let field_end = it.position();
            match item {
                Ok((TRUSTED_SEQ_ID_FIELD, v)) => seq_id = v.as_u64(),
                Ok((FOR_TESTING_FIELD, Value::Bytes(b))) => {
                    test_event = Some(b);
                    producer_bytes = field_end - field_start;
                }
                Ok((TRACE_STATS_FIELD, Value::Bytes(b))) => match decode_trace_stats(b) {
                    Ok(s) => stats = Some(s),
                    Err(e) => errors.push(e),
                },
                Ok(_) => {}
                Err(e) => {
                    errors.push(format!("packet #{total_packets}: {e:?}"));
                    continue 'packets;
                }
            }
            field_start = field_end;
        }
        let Some(te) = test_event else {
            other_packets += 1;
            continue;
        };
        let (mut s, mut seq, mut thread, mut is_last) = (None, None, None, false);
        for item in fields(te) {
            match item {
                Ok((TEST_EVENT_STR, Value::Bytes(b))) => s = Some(b),
                Ok((TEST_EVENT_SEQ_VALUE, v)) => seq = v.as_u64(),
                Ok((TEST_EVENT_COUNTER, v)) => thread = v.as_u64(),
                Ok((TEST_EVENT_IS_LAST, v)) => is_last = v.as_u64() == Some(1),
                Ok(_) => {}
                Err(e) => {
                    errors.push(format!("test event in packet #{total_packets}: {e:?}"));
                    continue 'packets;
                }
            }
        }
        let (Some(s), Some(seq), Some(thread)) = (s, seq, thread) else {
            errors.push(format!(
                "packet #{total_packets}: test event lacks str/seq/counter"
            ));
            continue;
        };
        let (Ok(seq), Ok(thread)) = (u32::try_from(seq), u32::try_from(thread)) else {
            errors.push(format!("packet #{total_packets}: seq/thread out of range"));
            continue;
        };
        if thread >= p.threads || seq >= p.packets_per_thread {
            errors.push(format!(
                "packet #{total_packets}: thread {thread} seq {seq} not written"
            ));
            continue;
        }
        fill_payload(
            thread,
            if p.fixed_payload { 0 } else { seq },
            &mut expected_buf,
        );
        if s != expected_buf.as_slice() {
            errors.push(format!("thread {thread} seq {seq}: payload differs"));
        }
        let should_be_last = seq + 1 == p.packets_per_thread;
        if is_last != should_be_last {
            errors.push(format!("thread {thread} seq {seq}: is_last={is_last}"));
        }
        let t = threads.entry(thread).or_default();
        t.seq_ids.push(seq_id.unwrap_or(0));
        t.seqs.push(seq);
        t.bytes += producer_bytes as u64;
        t.is_last_seen |= is_last;
    }

    let mut text = String::new();
    let mut found = 0u64;
    let mut seen_seq_ids = BTreeMap::new();
    for thread in 0..p.threads {
        let t = threads.remove(&thread).unwrap_or_default();
        found += t.seqs.len() as u64;
        let first = t.seqs.first().copied();
        let last = t.seqs.last().copied();
        let mut ids = t.seq_ids.clone();
        ids.dedup();
        if ids.len() > 1 {
            errors.push(format!(
                "thread {thread}: packets on {} sequences {ids:?}",
                ids.len()
            ));
        }
        if let Some(&id) = ids.first() {
            if id == 0 {
                errors.push(format!("thread {thread}: no trusted_packet_sequence_id"));
            } else if let Some(other) = seen_seq_ids.insert(id, thread) {
                errors.push(format!("threads {other} and {thread} share sequence {id}"));
            }
        }
        // In order and without holes: each seq is the previous + 1.
        if let Some(bad) = t.seqs.windows(2).find(|w| w[1] != w[0] + 1) {
            errors.push(format!(
                "thread {thread}: seq {} followed by {}",
                bad[0], bad[1]
            ));
        }
        let n = p.packets_per_thread;
        match p.expect {
            Expect::All if t.seqs.len() as u32 != n || first != Some(0) => {
                errors.push(format!("thread {thread}: {} of {n} packets", t.seqs.len()))
            }
            Expect::Tail if !t.seqs.is_empty() && last != Some(n - 1) => errors.push(format!(
                "thread {thread}: ring tail ends at {last:?}, not {}",
                n - 1
            )),
            Expect::Head if !t.seqs.is_empty() && first != Some(0) => {
                errors.push(format!("thread {thread}: discard head starts at {first:?}"))
            }
            _ => {}
        }
        let _ = writeln!(
            text,
            "thread={thread} seq_id={} found={} first_seq={} last_seq={} bytes={}",
            ids.first().copied().unwrap_or(0),
            t.seqs.len(),
            first.map_or(-1, i64::from),
            last.map_or(-1, i64::from),
            t.bytes
        );
    }

    let expected_total = u64::from(p.threads) * u64::from(p.packets_per_thread);
    let missing = expected_total - found.min(expected_total);
    match &stats {
        None => errors.push("no trace_stats packet in the trace".into()),
        Some(ts) => {
            for (i, b) in ts.buffers.iter().enumerate() {
                let mut line = format!("trace_stats buffer={i}");
                for (f, name) in BUFFER_STAT_NAMES {
                    if let Some(v) = b.0.get(f) {
                        let _ = write!(line, " {name}={v}");
                    }
                }
                let _ = writeln!(text, "{line}");
            }
            let mut line = String::from("trace_stats global");
            for (f, name) in TRACE_STAT_NAMES {
                if let Some(v) = ts.global.get(f) {
                    let _ = write!(line, " {name}={v}");
                }
            }
            let _ = writeln!(text, "{line}");
            let b0 = ts.buffers.first().cloned().unwrap_or_default();
            let (overwritten, discarded) =
                (b0.get("chunks_overwritten"), b0.get("chunks_discarded"));
            // Losses must be explained by the buffer's own accounting, and
            // accounting that reports losses must show up as missing packets.
            match p.expect {
                Expect::All if overwritten + discarded != 0 => errors.push(format!(
                    "all packets expected but chunks_overwritten={overwritten} chunks_discarded={discarded}"
                )),
                Expect::Tail if (missing > 0) != (overwritten > 0) => errors.push(format!(
                    "ring: {missing} packets missing but chunks_overwritten={overwritten}"
                )),
                Expect::Head if (missing > 0) != (discarded > 0) => errors.push(format!(
                    "discard: {missing} packets missing but chunks_discarded={discarded}"
                )),
                _ => {}
            }
            let payload_bytes: u64 = text_bytes_sum(&text);
            let written = b0.get("bytes_written");
            if payload_bytes > written {
                errors.push(format!(
                    "found {payload_bytes} producer bytes but bytes_written={written}"
                ));
            }
        }
    }
    if p.expect_loss && missing == 0 {
        errors.push("scenario should have overflowed the buffer but nothing is missing".into());
    }
    if !threads.is_empty() {
        errors.push(format!("packets from unknown threads {:?}", threads.keys()));
    }

    let pass = errors.is_empty();
    let mut head = format!(
        "trace-check result={} mode={:?} found={found} expected_written={expected_total} missing={missing} \
         threads={} trace_packets={total_packets} other_packets={other_packets} errors={}\n",
        if pass { "PASS" } else { "FAIL" },
        p.expect,
        p.threads,
        errors.len()
    );
    head.push_str(&text);
    for e in errors.iter().take(20) {
        let _ = writeln!(head, "error: {e}");
    }
    Report {
        pass,
        text: head,
        found,
        stats,
    }
}

fn text_bytes_sum(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with("thread="))
        .filter_map(|l| l.rsplit("bytes=").next()?.parse::<u64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn field_bytes(out: &mut Vec<u8>, f: u32, b: &[u8]) {
        varint(out, u64::from(f) << 3 | 2);
        varint(out, b.len() as u64);
        out.extend_from_slice(b);
    }
    fn field_varint(out: &mut Vec<u8>, f: u32, v: u64) {
        varint(out, u64::from(f) << 3);
        varint(out, v);
    }

    fn packet(thread: u32, seq: u32, n: u32, size: usize) -> Vec<u8> {
        let mut te = Vec::new();
        field_bytes(&mut te, TEST_EVENT_STR, &payload(thread, seq, size));
        field_varint(&mut te, TEST_EVENT_SEQ_VALUE, seq.into());
        field_varint(&mut te, TEST_EVENT_COUNTER, thread.into());
        if seq + 1 == n {
            field_varint(&mut te, TEST_EVENT_IS_LAST, 1);
        }
        let mut p = Vec::new();
        field_varint(&mut p, TRUSTED_SEQ_ID_FIELD, u64::from(thread) + 5);
        field_bytes(&mut p, FOR_TESTING_FIELD, &te);
        p
    }

    fn stats_packet(overwritten: u64, discarded: u64) -> Vec<u8> {
        let mut bs = Vec::new();
        field_varint(&mut bs, 1, 1 << 20);
        field_varint(&mut bs, 3, overwritten);
        field_varint(&mut bs, 18, discarded);
        let mut ts = Vec::new();
        field_bytes(&mut ts, 1, &bs);
        let mut p = Vec::new();
        field_bytes(&mut p, TRACE_STATS_FIELD, &ts);
        p
    }

    fn trace(packets: &[Vec<u8>]) -> Vec<u8> {
        let mut t = Vec::new();
        for p in packets {
            field_bytes(&mut t, TRACE_PACKET_FIELD, p);
        }
        t
    }

    fn params(expect: Expect) -> Params {
        Params {
            threads: 2,
            packets_per_thread: 5,
            payload_size: 16,
            expect,
            fixed_payload: false,
            expect_loss: false,
        }
    }

    fn all_packets(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        for seq in range {
            for thread in 0..2 {
                v.push(packet(thread, seq, 5, 16));
            }
        }
        v
    }

    #[test]
    fn complete_trace_passes() {
        let mut pk = vec![stats_packet(0, 0)];
        pk.extend(all_packets(0..5));
        let r = check(&trace(&pk), &params(Expect::All));
        assert!(r.pass, "{}", r.text);
        assert_eq!(r.found, 10);
    }

    #[test]
    fn missing_reordered_or_corrupt_packets_fail() {
        let mut pk = all_packets(0..5);
        pk.push(stats_packet(0, 0));
        pk.remove(4);
        assert!(!check(&trace(&pk), &params(Expect::All)).pass);

        let mut pk = all_packets(0..5);
        pk.push(stats_packet(0, 0));
        pk.swap(0, 2);
        assert!(!check(&trace(&pk), &params(Expect::All)).pass);

        let mut pk = all_packets(0..5);
        pk.push(stats_packet(0, 0));
        let last = pk[3].len() - 10;
        pk[3][last] ^= 1;
        assert!(!check(&trace(&pk), &params(Expect::All)).pass);

        // Truncated trace file.
        let mut pk = all_packets(0..5);
        pk.push(stats_packet(0, 0));
        let t = trace(&pk);
        assert!(!check(&t[..t.len() - 3], &params(Expect::All)).pass);
    }

    #[test]
    fn ring_tail_and_discard_head_must_match_stats() {
        let mut pk = all_packets(2..5);
        pk.push(stats_packet(3, 0));
        assert!(check(&trace(&pk), &params(Expect::Tail)).pass);
        // Same losses but the stats do not admit any overwrite.
        let mut pk = all_packets(2..5);
        pk.push(stats_packet(0, 0));
        assert!(!check(&trace(&pk), &params(Expect::Tail)).pass);
        // A head is not a tail.
        let mut pk = all_packets(0..3);
        pk.push(stats_packet(3, 0));
        assert!(!check(&trace(&pk), &params(Expect::Tail)).pass);

        let mut pk = all_packets(0..3);
        pk.push(stats_packet(0, 2));
        assert!(check(&trace(&pk), &params(Expect::Head)).pass);
        let mut p = params(Expect::Head);
        p.expect_loss = true;
        assert!(check(&trace(&pk), &p).pass);
        let mut pk = all_packets(0..5);
        pk.push(stats_packet(0, 0));
        assert!(check(&trace(&pk), &params(Expect::Head)).pass);
        assert!(!check(&trace(&pk), &p).pass);
        let mut pk = all_packets(0..3);
        pk.push(stats_packet(0, 0));
        assert!(!check(&trace(&pk), &params(Expect::Head)).pass);
    }
}
