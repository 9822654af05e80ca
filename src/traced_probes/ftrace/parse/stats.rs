//! `TracePacket.ftrace_stats` (start/end-of-trace snapshots) and the
//! bundle clock fields. Pure: the caller supplies what it read from tracefs.

use super::bundle::ClockSnapshot;
use super::page_parser::ParseError;
use crate::protozero::{begin_nested, end_nested, put_double, put_str, put_varint, Stream};

/// Counters from `per_cpu/cpuN/stats`. Missing lines stay 0.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CpuStats {
    pub entries: u64,
    pub overrun: u64,
    pub commit_overrun: u64,
    pub bytes: u64,
    /// Seconds as printed by the kernel (e.g. `1234.567890`).
    pub oldest_event_ts: f64,
    pub now_ts: f64,
    pub dropped_events: u64,
    pub read_events: u64,
}

impl CpuStats {
    /// Parses the text of a `per_cpu/cpuN/stats` file. Unknown lines are ignored.
    pub fn parse(text: &str) -> CpuStats {
        let mut s = CpuStats::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let int = || value.parse::<u64>().unwrap_or(0);
            let decimal = |v| crate::protozero::decimal::parse_decimal(v).unwrap_or(0.0);
            match key.trim() {
                "entries" => s.entries = int(),
                "overrun" => s.overrun = int(),
                "commit overrun" => s.commit_overrun = int(),
                "bytes" => s.bytes = int(),
                "oldest event ts" => s.oldest_event_ts = decimal(value),
                "now ts" => s.now_ts = decimal(value),
                "dropped events" => s.dropped_events = int(),
                "read events" => s.read_events = int(),
                _ => {}
            }
        }
        // An empty buffer has no oldest event, but the kernel prints the
        // time stamp of the page it would read next, which a reset leaves
        // as it was: a cleared buffer would claim an event from before.
        if s.entries == 0 {
            s.oldest_event_ts = 0.0;
        }
        s
    }
}

/// `TracePacket.ftrace_stats`.
pub const TRACE_PACKET_FTRACE_STATS: u32 = 34;

/// `FtraceStats.Phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    StartOfTrace = 1,
    EndOfTrace = 2,
}

/// Everything an `FtraceStats` message carries that we track.
#[derive(Debug, Default, Clone)]
pub struct StatsSnapshot<'a> {
    /// Index = cpu.
    pub cpu_stats: &'a [CpuStats],
    /// Switches the kernel never recorded, per cpu (index = cpu; see
    /// `CpuState::unrecorded_switches`).
    pub unrecorded_switches: &'a [u64],
    pub unknown_ftrace_events: &'a [String],
    pub failed_ftrace_events: &'a [String],
    pub atrace_errors: Option<&'a str>,
    /// Why the data source could not set up (`exclusive_feature_error`:
    /// e.g. its instance is owned by another live traced_probes).
    pub setup_error: Option<&'a str>,
    pub preserve_ftrace_buffer: bool,
    /// Distinct parse errors seen (order kept).
    pub parse_errors: &'a [ParseError],
    /// Per-cpu buffer size as tracefs reports it at the snapshot.
    pub cpu_buffer_size_pages: Option<u32>,
    /// The size we set at setup (differs if the buffer was resized under us).
    pub cached_cpu_buffer_size_pages: Option<u32>,
    /// With `symbolize_ksyms`: (symbols parsed, table memory in KiB).
    pub kernel_symbols: Option<(u32, u32)>,
    /// With `kprobe_events`: (hits, misses) of its kprobes.
    pub kprobe_stats: Option<(u64, u64)>,
}

/// Writes `ftrace_stats` (field 34) into an open TracePacket.
pub fn write_ftrace_stats<S: Stream + ?Sized>(s: &mut S, phase: Phase, st: &StatsSnapshot<'_>) {
    let n = begin_nested(s, TRACE_PACKET_FTRACE_STATS);
    put_varint(s, 1, phase as u64);
    for (cpu, c) in st.cpu_stats.iter().enumerate() {
        let m = begin_nested(s, 2);
        put_varint(s, 1, cpu as u64);
        put_varint(s, 2, c.entries);
        put_varint(s, 3, c.overrun);
        put_varint(s, 4, c.commit_overrun);
        put_varint(s, 5, c.bytes);
        put_double(s, 6, c.oldest_event_ts);
        put_double(s, 7, c.now_ts);
        put_varint(s, 8, c.dropped_events);
        put_varint(s, 9, c.read_events);
        end_nested(s, m);
    }
    if let Some((parsed, kb)) = st.kernel_symbols {
        put_varint(s, 3, parsed as u64);
        put_varint(s, 4, kb as u64);
    }
    if let Some(e) = st.atrace_errors {
        put_str(s, 5, e);
    }
    if let Some(e) = st.setup_error {
        put_str(s, 13, e);
    }
    for e in st.unknown_ftrace_events {
        put_str(s, 6, e);
    }
    for e in st.failed_ftrace_events {
        put_str(s, 7, e);
    }
    if st.preserve_ftrace_buffer {
        put_varint(s, 8, 1);
    }
    let mut seen: Vec<ParseError> = Vec::new();
    for e in st.parse_errors {
        if !seen.contains(e) {
            seen.push(*e);
            put_varint(s, 9, e.status() as u64);
        }
    }
    if let Some((hits, misses)) = st.kprobe_stats {
        let m = begin_nested(s, 10);
        put_varint(s, 1, hits);
        put_varint(s, 2, misses);
        end_nested(s, m);
    }
    if let Some(p) = st.cpu_buffer_size_pages {
        put_varint(s, 11, p as u64);
    }
    if let Some(p) = st.cached_cpu_buffer_size_pages {
        put_varint(s, 12, p as u64);
    }
    end_nested(s, n);
}

/// Events the kernel lost between two snapshots of the per-cpu stats:
/// overwritten before they were read (`overrun`) or dropped for want of
/// room (`dropped events`). A cpu missing from `before` counts from 0.
pub fn kernel_events_lost(before: &[CpuStats], after: &[CpuStats]) -> u64 {
    after
        .iter()
        .enumerate()
        .map(|(cpu, a)| {
            let (overrun, dropped) = before
                .get(cpu)
                .map_or((0, 0), |b| (b.overrun, b.dropped_events));
            a.overrun.saturating_sub(overrun) + a.dropped_events.saturating_sub(dropped)
        })
        .sum()
}

/// `FtraceClock` for a `trace_clock` name; `None` for `boot`, which needs
/// no clock fields in bundles.
pub fn ftrace_clock(name: &str) -> Option<u32> {
    match name {
        "boot" => None,
        "global" => Some(2),
        "local" => Some(3),
        "mono_raw" => Some(4),
        _ => Some(1),
    }
}

/// The bundle clock fields for a pass: `now_ts` of `per_cpu/cpu0/stats`
/// (seconds, in the trace clock) and CLOCK_BOOTTIME read at the same time.
pub fn clock_snapshot(clock_name: &str, now_ts_secs: f64, boot_ns: i64) -> Option<ClockSnapshot> {
    Some(ClockSnapshot {
        ftrace_clock: ftrace_clock(clock_name)?,
        ftrace_timestamp: (now_ts_secs * 1e9) as i64,
        boot_timestamp: boot_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::{FtraceParseStatus, TracePacket};
    use crate::protozero::VecStream;
    use quick_protobuf::{BytesReader, MessageRead};

    #[test]
    fn cpu_stats_parse() {
        let s = CpuStats::parse(
            "entries: 12\noverrun: 3\ncommit overrun: 0\nbytes: 480\n\
             oldest event ts:  1234.500000\nnow ts:  1240.250000\n\
             dropped events: 0\nread events: 7\n",
        );
        assert_eq!(
            (s.entries, s.overrun, s.bytes, s.read_events),
            (12, 3, 480, 7)
        );
        assert_eq!(s.now_ts, 1240.25);
        assert_eq!(s.oldest_event_ts, 1234.5);
        // Empty (e.g. just cleared): no oldest event, whatever is printed.
        let s = CpuStats::parse("entries: 0\noldest event ts:  1234.500000\n");
        assert_eq!(s.oldest_event_ts, 0.0);
    }

    #[test]
    fn lost_events_are_overruns_and_drops_since_the_start() {
        let at = |overrun, dropped_events| CpuStats {
            overrun,
            dropped_events,
            entries: 7,
            ..Default::default()
        };
        let before = [at(5, 1), at(0, 0)];
        assert_eq!(kernel_events_lost(&before, &[at(5, 1), at(0, 0)]), 0);
        assert_eq!(kernel_events_lost(&before, &[at(8, 2), at(10, 0)]), 14);
        // A cpu that came online later; a counter that went back (reset).
        assert_eq!(
            kernel_events_lost(&before, &[at(4, 1), at(0, 0), at(3, 0)]),
            3
        );
    }

    #[test]
    fn stats_decode() {
        let cpus = [
            CpuStats {
                entries: 5,
                overrun: 1,
                read_events: 9,
                now_ts: 12.5,
                ..Default::default()
            },
            CpuStats {
                bytes: 4096,
                ..Default::default()
            },
        ];
        let failed = ["sched/sched_switch: bad".to_string()];
        let errs = [
            ParseError::EndOverflow,
            ParseError::EndOverflow,
            ParseError::NullPadding,
        ];
        let snap = StatsSnapshot {
            cpu_stats: &cpus,
            failed_ftrace_events: &failed,
            parse_errors: &errs,
            cpu_buffer_size_pages: Some(256),
            cached_cpu_buffer_size_pages: Some(512),
            ..Default::default()
        };
        let mut s = VecStream::new();
        write_ftrace_stats(&mut s, Phase::EndOfTrace, &snap);
        let b = s.into_bytes();
        let p = TracePacket::from_reader(&mut BytesReader::from_bytes(&b), &b).unwrap();
        let st = match p.data {
            crate::pb::protos::mod_TracePacket::OneOfdata::ftrace_stats(st) => st,
            _ => panic!(),
        };
        assert_eq!(st.cpu_stats.len(), 2);
        assert_eq!(st.cpu_stats[0].entries, Some(5));
        assert_eq!(st.cpu_stats[0].now_ts, Some(12.5));
        assert_eq!(st.cpu_stats[1].cpu, Some(1));
        assert_eq!(st.failed_ftrace_events, failed);
        assert_eq!(
            st.ftrace_parse_errors,
            [
                FtraceParseStatus::FTRACE_STATUS_ABI_END_OVERFLOW,
                FtraceParseStatus::FTRACE_STATUS_ABI_NULL_PADDING
            ]
        );
        assert_eq!(st.cpu_buffer_size_pages, Some(256));
        assert_eq!(st.cached_cpu_buffer_size_pages, Some(512));
    }

    #[test]
    fn clocks() {
        assert_eq!(ftrace_clock("boot"), None);
        assert_eq!(ftrace_clock("mono_raw"), Some(4));
        assert_eq!(ftrace_clock("x86-tsc"), Some(1));
        let c = clock_snapshot("global", 2.5, 7).unwrap();
        assert_eq!(
            (c.ftrace_clock, c.ftrace_timestamp, c.boot_timestamp),
            (2, 2_500_000_000, 7)
        );
    }
}
