//! Counts the ftrace events in a Perfetto trace file, for the ftrace bench.
//!
//! Walks Trace.packet -> TracePacket.ftrace_events (FtraceEventBundle) and
//! counts `event` entries plus compact_sched switch/waking entries (one per
//! packed timestamp). Also sums the last END_OF_TRACE ftrace_stats overruns.
//! Prints one line:
//! `ftrace_count events=.. generic_events=.. compact_switch=.. compact_waking=..
//!  bundles=.. lost_bundles=.. stats_overrun=.. trace_bytes=..`
//!
//! Usage: bench_count_ftrace TRACE_FILE

use std::process::ExitCode;

// Field numbers (trace_packet.proto, ftrace_event_bundle.proto, ftrace_stats.proto).
const TRACE_PACKET: u32 = 1;
const PACKET_FTRACE_EVENTS: u32 = 1;
const PACKET_FTRACE_STATS: u32 = 34;
const BUNDLE_EVENT: u32 = 2;
const BUNDLE_LOST_EVENTS: u32 = 3;
const BUNDLE_COMPACT_SCHED: u32 = 4;
const COMPACT_SWITCH_TS: u32 = 1;
const COMPACT_WAKING_TS: u32 = 7;
const STATS_PHASE: u32 = 1;
const STATS_CPU_STATS: u32 = 2;
const CPU_STATS_OVERRUN: u32 = 3;
const PHASE_END_OF_TRACE: u64 = 2;

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Iterates (field, value) over one message; stops at the first malformed byte.
fn fields(buf: &[u8]) -> impl Iterator<Item = (u32, Value<'_>)> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos >= buf.len() {
            return None;
        }
        let tag = varint(buf, &mut pos)?;
        let field = (tag >> 3) as u32;
        let value = match tag & 7 {
            0 => Value::Varint(varint(buf, &mut pos)?),
            1 => {
                pos = pos.checked_add(8).filter(|&p| p <= buf.len())?;
                Value::Fixed
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).ok()?;
                let end = pos.checked_add(len).filter(|&e| e <= buf.len())?;
                let b = &buf[pos..end];
                pos = end;
                Value::Bytes(b)
            }
            5 => {
                pos = pos.checked_add(4).filter(|&p| p <= buf.len())?;
                Value::Fixed
            }
            _ => return None,
        };
        Some((field, value))
    })
}

fn count_varints(buf: &[u8]) -> u64 {
    let mut pos = 0;
    let mut n = 0;
    while pos < buf.len() && varint(buf, &mut pos).is_some() {
        n += 1;
    }
    n
}

#[derive(Default)]
struct Counts {
    events: u64,
    compact_switch: u64,
    compact_waking: u64,
    bundles: u64,
    lost_bundles: u64,
    stats_overrun: u64,
}

fn bundle(b: &[u8], c: &mut Counts) {
    c.bundles += 1;
    for (f, v) in fields(b) {
        match (f, v) {
            (BUNDLE_EVENT, Value::Bytes(_)) => c.events += 1,
            (BUNDLE_LOST_EVENTS, Value::Varint(x)) if x != 0 => c.lost_bundles += 1,
            (BUNDLE_COMPACT_SCHED, Value::Bytes(cs)) => {
                for (f, v) in fields(cs) {
                    match (f, v) {
                        (COMPACT_SWITCH_TS, Value::Bytes(p)) => {
                            c.compact_switch += count_varints(p)
                        }
                        (COMPACT_WAKING_TS, Value::Bytes(p)) => {
                            c.compact_waking += count_varints(p)
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
}

fn stats(s: &[u8], c: &mut Counts) {
    let mut end = false;
    let mut overrun = 0;
    for (f, v) in fields(s) {
        match (f, v) {
            (STATS_PHASE, Value::Varint(p)) => end = p == PHASE_END_OF_TRACE,
            (STATS_CPU_STATS, Value::Bytes(cpu)) => {
                for (f, v) in fields(cpu) {
                    if let (CPU_STATS_OVERRUN, Value::Varint(o)) = (f, v) {
                        overrun += o;
                    }
                }
            }
            _ => {}
        }
    }
    if end {
        c.stats_overrun = overrun;
    }
}

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: bench_count_ftrace TRACE_FILE");
        return ExitCode::from(2);
    };
    let data = match std::fs::read(&path) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench_count_ftrace: {path}: {e}");
            return ExitCode::from(1);
        }
    };
    let mut c = Counts::default();
    for (f, v) in fields(&data) {
        let (TRACE_PACKET, Value::Bytes(p)) = (f, v) else {
            continue;
        };
        for (f, v) in fields(p) {
            match (f, v) {
                (PACKET_FTRACE_EVENTS, Value::Bytes(b)) => bundle(b, &mut c),
                (PACKET_FTRACE_STATS, Value::Bytes(s)) => stats(s, &mut c),
                _ => {}
            }
        }
    }
    println!(
        "ftrace_count events={} generic_events={} compact_switch={} compact_waking={} bundles={} \
         lost_bundles={} stats_overrun={} trace_bytes={}",
        c.events + c.compact_switch + c.compact_waking,
        c.events,
        c.compact_switch,
        c.compact_waking,
        c.bundles,
        c.lost_bundles,
        c.stats_overrun,
        data.len()
    );
    ExitCode::SUCCESS
}
