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
    /// Producer-side loss (SMB exhausted, drop policy): packets in order but
    /// with holes, and every hole flagged by previous_packet_dropped on the
    /// packet after it.
    Gaps,
}

impl std::str::FromStr for Expect {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all" | "full" => Ok(Expect::All),
            "ring" | "tail" => Ok(Expect::Tail),
            "discard" | "head" => Ok(Expect::Head),
            "gaps" | "smb-loss" => Ok(Expect::Gaps),
            _ => Err(format!("unknown mode {s:?} (all|ring|discard|gaps)")),
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
    /// When known, every producer packet's trusted_pid must equal it.
    pub producer_pid: Option<u32>,
}

/// TracePacket fields that frame a packet rather than say what it is.
const ENVELOPE_FIELDS: &[u32] = &[
    TRUSTED_UID_FIELD,
    TRUSTED_PID_FIELD,
    TRUSTED_SEQ_ID_FIELD,
    PREVIOUS_PACKET_DROPPED_FIELD,
    FIRST_PACKET_ON_SEQUENCE_FIELD,
    8,  // timestamp
    13, // sequence_flags
    58, // timestamp_clock_id
];

fn packet_field_name(f: u32) -> String {
    let name = match f {
        0 => "envelope_only",
        6 => "clock_snapshot",
        33 => "trace_config",
        35 => "trace_stats",
        36 => "synchronization_marker",
        45 => "system_info",
        69 => "service_event",
        89 => "trace_uuid",
        124 => "trace_provenance",
        _ => return format!("field{f}"),
    };
    name.to_string()
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
    /// Seqs of packets that carry previous_packet_dropped.
    dropped_flag_at: Vec<u32>,
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

const TRACEBOX_PAD_FIELD: u32 = 15;

/// Checks `trace` (a serialized Trace) against `p`.
pub fn check(trace: &[u8], p: &Params) -> Report {
    let mut errors: Vec<String> = Vec::new();
    let mut threads: BTreeMap<u32, ThreadSeen> = BTreeMap::new();
    let mut other_packets = 0u64;
    let mut total_packets = 0u64;
    let mut stats: Option<TraceStats> = None;
    // previous_packet_dropped value (a DATA_LOSS_* bit mask) -> count.
    let mut dropped_values: BTreeMap<u64, u64> = BTreeMap::new();
    // Packets not from the producer, by their payload field (service packets).
    let mut service_kinds: BTreeMap<u32, u64> = BTreeMap::new();
    let (mut missing_trusted_uid, mut missing_trusted_pid, mut wrong_trusted_pid) =
        (0u64, 0u64, 0u64);
    let mut first_on_seq_count = 0u64;
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
            // tracebox's traced pads its output files with field 15 (readers
            // skip it, as trace_processor skips every non-packet field).
            if f != TRACEBOX_PAD_FIELD {
                errors.push(format!("unexpected top-level field {f}"));
            }
            continue;
        };
        total_packets += 1;
        let mut seq_id = None;
        let mut test_event = None;
        let mut dropped_flag = false;
        let (mut trusted_uid, mut trusted_pid, mut first_on_seq) = (None, None, false);
        let mut kind = None;
        // Bytes of the for_testing field as the producer wrote them (the
        // service appends trusted_* fields of its own to each packet).
        let mut producer_bytes = 0usize;
        let mut it = fields(packet);
        let mut field_start = 0;
        while let Some(item) = it.next() {
            let field_end = it.position();
            match item {
                Ok((TRUSTED_SEQ_ID_FIELD, v)) => seq_id = v.as_u64(),
                Ok((PREVIOUS_PACKET_DROPPED_FIELD, v)) => {
                    dropped_flag = v.as_u64().unwrap_or(0) != 0;
                    if let Some(x) = v.as_u64() {
                        *dropped_values.entry(x).or_insert(0u64) += 1;
                    }
                }
                Ok((FOR_TESTING_FIELD, Value::Bytes(b))) => {
                    test_event = Some(b);
                    producer_bytes = field_end - field_start;
                }
                Ok((TRACE_STATS_FIELD, Value::Bytes(b))) => {
                    kind = Some(TRACE_STATS_FIELD);
                    match decode_trace_stats(b) {
                        Ok(s) => stats = Some(s),
                        Err(e) => errors.push(e),
                    }
                }
                Ok((TRUSTED_UID_FIELD, v)) => trusted_uid = v.as_u64(),
                Ok((TRUSTED_PID_FIELD, v)) => trusted_pid = v.as_u64(),
                Ok((FIRST_PACKET_ON_SEQUENCE_FIELD, v)) => first_on_seq = v.as_u64() == Some(1),
                Ok((f, _)) if !ENVELOPE_FIELDS.contains(&f) => kind = Some(f),
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
            *service_kinds.entry(kind.unwrap_or(0)).or_insert(0u64) += 1;
            continue;
        };
        if trusted_uid.is_none() {
            missing_trusted_uid += 1;
        }
        match (trusted_pid, p.producer_pid) {
            (None, _) => missing_trusted_pid += 1,
            (Some(got), Some(want)) if got != u64::from(want) => wrong_trusted_pid += 1,
            _ => {}
        }
        first_on_seq_count += u64::from(first_on_seq);
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
        if dropped_flag {
            t.dropped_flag_at.push(seq);
        }
    }

    let mut text = String::new();
    let mut found = 0u64;
    let mut found_bytes = 0u64;
    let mut unflagged_holes = 0u64;
    let mut seen_seq_ids = BTreeMap::new();
    for thread in 0..p.threads {
        let t = threads.remove(&thread).unwrap_or_default();
        found += t.seqs.len() as u64;
        found_bytes += t.bytes;
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
        // The service marks the first packet it emits for a sequence, and the
        // first one after any hole, with previous_packet_dropped; no others.
        let mut holes: Vec<u32> = Vec::new();
        let mut prev: Option<u32> = None;
        for &s in &t.seqs {
            match prev {
                Some(pv) if s <= pv => {
                    errors.push(format!("thread {thread}: seq {pv} followed by {s}"));
                    break;
                }
                Some(pv) if s > pv + 1 => holes.push(s),
                None => holes.push(s),
                _ => {}
            }
            prev = Some(s);
        }
        if p.expect != Expect::Gaps && holes.len() > 1 {
            errors.push(format!(
                "thread {thread}: packets missing before seqs {:?}",
                first_few(&holes[1..])
            ));
        }
        if p.expect == Expect::Gaps {
            // A packet the writer abandoned half-way (kPacketSizeDropPacket)
            // is counted in trace_writer_packet_loss instead of flagged; the
            // total is checked against the stats below.
            let unflagged = holes
                .iter()
                .filter(|s| t.dropped_flag_at.binary_search(s).is_err())
                .count();
            if holes.first() != t.dropped_flag_at.first() {
                errors.push(format!(
                    "thread {thread}: first packet seq {first:?} lacks previous_packet_dropped"
                ));
            }
            if let Some(extra) = t
                .dropped_flag_at
                .iter()
                .find(|s| holes.binary_search(s).is_err())
            {
                errors.push(format!(
                    "thread {thread}: previous_packet_dropped on seq {extra} but nothing was lost"
                ));
            }
            unflagged_holes += unflagged as u64;
        } else if holes != t.dropped_flag_at {
            errors.push(format!(
                "thread {thread}: previous_packet_dropped on seqs {:?}, expected on {:?}",
                first_few(&t.dropped_flag_at),
                first_few(&holes)
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
            "thread={thread} seq_id={} found={} first_seq={} last_seq={} bytes={} \
             dropped_flags={} first_dropped_flags={:?}",
            ids.first().copied().unwrap_or(0),
            t.seqs.len(),
            first.map_or(-1, i64::from),
            last.map_or(-1, i64::from),
            t.bytes,
            t.dropped_flag_at.len(),
            first_few(&t.dropped_flag_at),
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
            let writer_loss: u64 = ts
                .buffers
                .iter()
                .map(|b| b.get("trace_writer_packet_loss"))
                .sum();
            if unflagged_holes > writer_loss {
                errors.push(format!(
                    "{unflagged_holes} holes without previous_packet_dropped but \
                     trace_writer_packet_loss={writer_loss}"
                ));
            }
            let written = b0.get("bytes_written");
            if found_bytes > written {
                errors.push(format!(
                    "found {found_bytes} producer bytes but bytes_written={written}"
                ));
            }
        }
    }
    // The service stamps every producer packet with the writer's uid and pid.
    if missing_trusted_uid + missing_trusted_pid + wrong_trusted_pid > 0 {
        errors.push(format!(
            "producer packets without trusted_uid: {missing_trusted_uid}, without \
             trusted_pid: {missing_trusted_pid}, with a pid other than {:?}: {wrong_trusted_pid}",
            p.producer_pid
        ));
    }
    let kinds: Vec<String> = service_kinds
        .iter()
        .map(|(f, n)| format!("{}:{n}", packet_field_name(*f)))
        .collect();
    let _ = writeln!(
        text,
        "service_packets={} first_packet_on_sequence={first_on_seq_count}",
        kinds.join(",")
    );
    if p.expect_loss && missing == 0 {
        errors.push("scenario should have overflowed the buffer but nothing is missing".into());
    }
    if !threads.is_empty() {
        errors.push(format!("packets from unknown threads {:?}", threads.keys()));
    }

    let pass = errors.is_empty();
    let mut head = format!(
        "trace-check result={} mode={:?} found={found} expected_written={expected_total} missing={missing} \
         threads={} trace_packets={total_packets} other_packets={other_packets} \
         unflagged_holes={unflagged_holes} previous_packet_dropped_values={dropped_values:?} errors={}\n",
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

fn first_few(v: &[u32]) -> &[u32] {
    &v[..v.len().min(4)]
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

    fn packet(thread: u32, seq: u32, n: u32, size: usize, dropped_flag: bool) -> Vec<u8> {
        let mut te = Vec::new();
        field_bytes(&mut te, TEST_EVENT_STR, &payload(thread, seq, size));
        field_varint(&mut te, TEST_EVENT_SEQ_VALUE, seq.into());
        field_varint(&mut te, TEST_EVENT_COUNTER, thread.into());
        if seq + 1 == n {
            field_varint(&mut te, TEST_EVENT_IS_LAST, 1);
        }
        let mut p = Vec::new();
        field_varint(&mut p, TRUSTED_UID_FIELD, 0);
        field_varint(&mut p, TRUSTED_SEQ_ID_FIELD, u64::from(thread) + 5);
        field_varint(&mut p, TRUSTED_PID_FIELD, 77);
        field_bytes(&mut p, FOR_TESTING_FIELD, &te);
        if dropped_flag {
            field_varint(&mut p, PREVIOUS_PACKET_DROPPED_FIELD, 1);
        }
        p
    }

    fn stats_packet(overwritten: u64, discarded: u64) -> Vec<u8> {
        stats_packet_with_loss(overwritten, discarded, 0)
    }

    fn stats_packet_with_loss(overwritten: u64, discarded: u64, writer_loss: u64) -> Vec<u8> {
        let mut bs = Vec::new();
        field_varint(&mut bs, 1, 1 << 20);
        field_varint(&mut bs, 3, overwritten);
        field_varint(&mut bs, 18, discarded);
        field_varint(&mut bs, 19, writer_loss);
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
            producer_pid: None,
        }
    }

    fn all_packets(range: std::ops::Range<u32>) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        let first = range.start;
        for seq in range {
            for thread in 0..2 {
                v.push(packet(thread, seq, 5, 16, seq == first));
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

        // A sequence's first packet must carry previous_packet_dropped.
        let mut pk = all_packets(0..5);
        pk.push(stats_packet(0, 0));
        pk[0] = packet(0, 0, 5, 16, false);
        assert!(!check(&trace(&pk), &params(Expect::All)).pass);

        // Truncated trace file.
        let mut pk = all_packets(0..5);
        pk.push(stats_packet(0, 0));
        let t = trace(&pk);
        assert!(!check(&t[..t.len() - 3], &params(Expect::All)).pass);
    }

    #[test]
    fn trusted_pid_is_checked_when_known() {
        let mut pk = vec![stats_packet(0, 0)];
        pk.extend(all_packets(0..5));
        let mut p = params(Expect::All);
        p.producer_pid = Some(77);
        assert!(check(&trace(&pk), &p).pass);
        p.producer_pid = Some(78);
        assert!(!check(&trace(&pk), &p).pass);
    }

    #[test]
    fn producer_side_holes_must_be_flagged() {
        let mut pk = vec![stats_packet(0, 0)];
        for (seq, flag) in [(0, true), (1, false), (3, true), (4, false)] {
            for thread in 0..2 {
                pk.push(packet(thread, seq, 5, 16, flag));
            }
        }
        let r = check(&trace(&pk), &params(Expect::Gaps));
        assert!(r.pass, "{}", r.text);
        assert!(!check(&trace(&pk), &params(Expect::All)).pass);
        // seq 3 of thread 0 (index 5) loses its flag: only fine if the
        // service counted an abandoned packet.
        pk[5] = packet(0, 3, 5, 16, false);
        assert!(!check(&trace(&pk), &params(Expect::Gaps)).pass);
        pk[0] = stats_packet_with_loss(0, 0, 1);
        assert!(check(&trace(&pk), &params(Expect::Gaps)).pass);
        // A flag where nothing is missing.
        pk[3] = packet(1, 1, 5, 16, true);
        assert!(!check(&trace(&pk), &params(Expect::Gaps)).pass);
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
