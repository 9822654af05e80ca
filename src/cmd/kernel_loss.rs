//! Events the kernel lost, for the end-of-trace line. traced only sees
//! losses on its side of the shared memory; ftrace events overwritten in the
//! kernel's per-cpu buffers before traced_probes read them are only in the
//! trace, in the `ftrace_stats` packets every ftrace data source writes at
//! its start and at its end. So the client looks at those packets: as they
//! stream by (ReadBuffers) or in the written file (write_into_file).
//!
//! The trace is only as trusted as its producers: stats that do not parse
//! are ignored and counted, they never stop the client.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use super::trace_faults::{Missing, TraceFaults};
use crate::codec;
use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::pb::protos::TraceConfig;
use crate::protozero::decode::{
    field_header, read_varint, FieldHeader, FieldIter, MAX_FIELD_HEADER,
};
use crate::schema::trace_extensions::{self, service_event_from_extension};

/// `Trace.packet`, `TracePacket.trusted_packet_sequence_id`,
/// `TracePacket.ftrace_stats`.
const TRACE_PACKET: u64 = 1;
const TRUSTED_SEQUENCE_ID: u64 = 10;
const FTRACE_STATS: u64 = 34;
/// `compressed_packets` (deflate) and `zstd_compressed_packets`.
const COMPRESSED_PACKETS: u64 = codec::COMPRESSED_PACKETS as u64;
const ZSTD_COMPRESSED_PACKETS: u64 = codec::ZSTD_COMPRESSED_PACKETS as u64;
/// `TracePacket.timestamp`, `.trigger`, `.service_event`.
const TIMESTAMP: u64 = 8;
const TRIGGER: u64 = 46;
const SERVICE_EVENT: u64 = 69;
/// tracebox's TracePacket extensions (schema::trace_extensions).
const TRACEBOX_SERVICE_EVENT: u64 = trace_extensions::TRACEBOX_SERVICE_EVENT as u64;
const TRACEBOX_FTRACE_STATS: u64 = trace_extensions::TRACEBOX_FTRACE_STATS as u64;
/// `TracePacket.machine_id` (a relayed machine's packets), and
/// `.remote_clock_sync` (that machine's clocks against traced's).
const MACHINE_ID: u64 = 98;
const REMOTE_CLOCK_SYNC: u64 = 107;

/// Bounds on one `compressed_packets` or `zstd_compressed_packets` (the
/// service makes them from a read
/// pass of about 1 MiB) and on what it inflates to.
const MAX_COMPRESSED: usize = 16 << 20;
const MAX_INFLATED: usize = 64 << 20;
/// `TracePacket.perf_sample` and `PerfSample.kernel_records_lost`
/// (traced_perf's perf rings that overran).
const PERF_SAMPLE: u64 = 66;
const KERNEL_RECORDS_LOST: u32 = 17;
/// `PerfSample.producer_event.source_stop_reason` PROFILER_STOP_GUARDRAIL:
/// traced_perf stopped the source, over max_daemon_memory_kb.
const PRODUCER_EVENT: u32 = 19;
const STOP_GUARDRAIL: u64 = 1;
/// `PerfSample.unwind_error` (a user stack cut short) and
/// `.sample_skipped_reason` (a sample written without its stack).
const UNWIND_ERROR: u32 = 16;
const SAMPLE_SKIPPED_REASON: u32 = 18;
/// PerfSample packets are tens of bytes; bigger ones are not read.
const MAX_PERF_SAMPLE: u64 = 256;

/// ftrace_stats are small (about 50 bytes per cpu); bigger ones are not
/// read.
const MAX_STATS: usize = 256 << 10;

/// `FtraceStats.phase` (START_OF_TRACE = 1, END_OF_TRACE = 2) and
/// `.cpu_stats`; `FtraceCpuStats.cpu`, `.overrun`, `.dropped_events`.
const PHASE: u32 = 1;
const START_OF_TRACE: u64 = 1;
const END_OF_TRACE: u64 = 2;
const CPU_STATS: u32 = 2;
const CPU: u32 = 1;
const OVERRUN: u32 = 3;
const DROPPED_EVENTS: u32 = 8;
/// `FtraceCpuStats` field 1001: where traces of earlier versions kept the
/// unrecorded switches (now `tracebox_ftrace_stats`).
const UNRECORDED_SWITCHES: u32 = 1001;
/// `FtraceStats.exclusive_feature_error`: why the data source did not
/// set up (its instance is owned by another live traced_probes...).
const SETUP_ERROR: u32 = 13;
/// `FtraceStats.atrace_errors`, `.unknown_ftrace_events`,
/// `.failed_ftrace_events`.
const ATRACE_ERRORS: u32 = 5;
const UNKNOWN_EVENTS: u32 = 6;
const FAILED_EVENTS: u32 = 7;
/// Setup errors kept for the end line (one per ftrace data source).
const MAX_SETUP_ERRORS: usize = 8;
const MAX_SETUP_ERROR_LEN: usize = 512;

/// One cpu's counters in one ftrace_stats.
/// The key of the end line's unrecorded-switches phrase, explained in
/// `perfetto --help` and README.
pub const UNRECORDED_SWITCHES_KEY: &str = "unrecorded-switches";

#[derive(Debug, Default, Clone, Copy)]
struct CpuLoss {
    cpu: u64,
    overrun: u64,
    dropped: u64,
    /// Counted by traced_probes since its data source started.
    unrecorded: u64,
}

#[derive(Debug, Default)]
struct Sequence {
    id: u64,
    start: Option<Vec<CpuLoss>>,
    end: Option<Vec<CpuLoss>>,
}

/// Collects `ftrace_stats` per packet sequence (one per ftrace data source).
#[derive(Debug, Default)]
pub struct KernelLoss {
    /// A handful at most: a linear search is enough.
    sequences: Vec<Sequence>,
    /// ftrace_stats payloads that did not decode.
    pub malformed: u64,
    /// Distinct setup errors of ftrace data sources, in trace order.
    pub setup_errors: Vec<String>,
    /// Service events, triggers and event-setup problems seen on the way.
    pub faults: TraceFaults,
    /// Sum of PerfSample.kernel_records_lost.
    pub perf_records_lost: u64,
    /// linux.perf sources stopped by traced_perf's memory guardrail.
    pub perf_guardrail_stops: u64,
    /// PerfSamples with unwind_error / sample_skipped_reason.
    pub perf_unwind_errors: u64,
    pub perf_samples_skipped: u64,
}

impl KernelLoss {
    /// One TracePacket, in the slices it arrived in (ReadBuffers may split
    /// a packet; the slices are walked in place, not joined).
    pub fn observe_packet<P: AsRef<[u8]>>(&mut self, parts: &[P]) {
        let found = match parts {
            [one] => {
                let mut bytes = one.as_ref();
                let len = bytes.len() as u64;
                stats_in_packet(&mut bytes, 0, len)
            }
            _ => {
                let len = parts.iter().map(|p| p.as_ref().len() as u64).sum();
                stats_in_packet(&mut Parts::new(parts), 0, len)
            }
        };
        if let Ok(bits) = found {
            self.take(bits, true);
        }
    }

    fn take(&mut self, bits: PacketBits, outer: bool) {
        if let Some(stats) = &bits.ftrace_stats {
            self.record(bits.seq, stats, bits.tracebox_ftrace.as_deref());
        }
        if let Some(event) = &bits.service_event {
            self.faults.observe_service_event(bits.timestamp, event);
        }
        self.faults.triggers += bits.trigger as u64;
        if bits.machine_id != 0 {
            self.faults
                .observe_machine(bits.machine_id, bits.clock_sync);
        }
        self.perf_records_lost = self.perf_records_lost.saturating_add(bits.perf_lost);
        self.perf_guardrail_stops += bits.perf_guardrail as u64;
        self.perf_unwind_errors += bits.perf_unwind_error as u64;
        self.perf_samples_skipped += bits.perf_skipped as u64;
        match bits.compressed {
            // Packets compressed by the service (deflate or zstd); never
            // nested in the trace format.
            Some((field, z)) if outer => match codec::decompress_packets(field, &z, MAX_INFLATED) {
                Some(raw) => {
                    let len = raw.len() as u64;
                    let _ = self.scan_inner(&mut raw.as_slice(), len, false);
                }
                None => self.malformed += 1,
            },
            Some(_) => self.malformed += 1,
            None => {}
        }
    }

    /// Every packet of a trace file, reading little more than the packet
    /// and field headers (a long trace is not read again in full).
    pub fn scan_file(&mut self, file: &File) -> io::Result<()> {
        let mut w = FileWindow::new(file)?;
        let len = w.len;
        self.scan(&mut w, len)
    }

    /// Every packet of a trace in memory.
    pub fn scan_trace(&mut self, mut trace: &[u8]) {
        let len = trace.len() as u64;
        let _ = self.scan(&mut trace, len);
    }

    fn scan(&mut self, b: &mut dyn TraceBytes, len: u64) -> io::Result<()> {
        self.scan_inner(b, len, true)
    }

    fn scan_inner(&mut self, b: &mut dyn TraceBytes, len: u64, outer: bool) -> io::Result<()> {
        let mut pos = 0;
        while pos < len {
            let Some(f) = field_at(b, pos, len)? else {
                break; // A truncated tail: what came before still counts.
            };
            if f.number == TRACE_PACKET && f.wire_type == 2 {
                let bits = stats_in_packet(b, f.value_start, f.end)?;
                self.take(bits, outer);
            }
            pos = f.end;
        }
        Ok(())
    }

    /// `ext_untrusted`: the packet's `tracebox_ftrace_stats`, if any.
    fn record(&mut self, seq: u64, stats_untrusted: &[u8], ext_untrusted: Option<&[u8]>) {
        let Some((phase, mut cpus, error)) = parse_stats(stats_untrusted, &mut self.faults) else {
            self.malformed += 1;
            return;
        };
        if let Some(ext) = ext_untrusted {
            merge_unrecorded(ext, &mut cpus);
        }
        if let Some(e) = error {
            if self.setup_errors.len() < MAX_SETUP_ERRORS && !self.setup_errors.contains(&e) {
                self.setup_errors.push(e);
            }
        }
        let at = match self.sequences.iter().position(|s| s.id == seq) {
            Some(i) => i,
            None => {
                self.sequences.push(Sequence {
                    id: seq,
                    ..Default::default()
                });
                self.sequences.len() - 1
            }
        };
        let s = &mut self.sequences[at];
        match phase {
            START_OF_TRACE => s.start = Some(cpus),
            END_OF_TRACE => s.end = Some(cpus),
            _ => {}
        }
    }

    /// Overwritten plus dropped events between the start and the end of
    /// every ftrace data source that has both; `None` if none has (no
    /// ftrace in the trace, or its start was overwritten in a ring buffer).
    pub fn events_lost(&self) -> Option<u64> {
        let mut total = None;
        for s in &self.sequences {
            let (Some(start), Some(end)) = (&s.start, &s.end) else {
                continue;
            };
            let lost: u64 = end
                .iter()
                .map(|e| {
                    let b = start.iter().find(|b| b.cpu == e.cpu).copied();
                    let b = b.unwrap_or_default();
                    e.overrun.saturating_sub(b.overrun) + e.dropped.saturating_sub(b.dropped)
                })
                .sum();
            total = Some(total.unwrap_or(0) + lost);
        }
        total
    }

    /// What the end line notes besides its losses and what is missing
    /// (see [`TraceFaults::notes`]).
    pub fn notes(&self) -> Vec<String> {
        self.faults.notes()
    }

    /// Everything asked for and not obtained that the trace itself shows,
    /// one end-line phrase each, in the line's order. The client and
    /// `tracebox report` both build their end line from it, so a trace
    /// file says what its recording said. `bytes`: the trace's size when
    /// known (an empty trace is named unless a trigger explains it).
    pub fn missing(&self, config: Option<&TraceConfig>, bytes: Option<u64>) -> Vec<String> {
        let mut missing = Vec::new();
        let faults = &self.faults;
        let mode = config
            .map(crate::schema::trigger::trigger_mode)
            .unwrap_or_default();
        if matches!(mode, TriggerMode::STOP_TRACING | TriggerMode::START_TRACING)
            && faults.triggers == 0
        {
            let which = match mode {
                TriggerMode::STOP_TRACING => "STOP",
                _ => "START",
            };
            let ms = config
                .and_then(|c| c.trigger_config.as_ref())
                .and_then(|t| t.trigger_timeout_ms)
                .unwrap_or(0);
            missing.push(format!(
                "the {which} trigger did not fire within trigger_timeout_ms ({ms} ms), \
                 so traced kept no trace"
            ));
        } else if bytes == Some(0) {
            missing.push("the trace is empty (0 bytes)".to_owned());
        }
        missing.extend(faults.phrases());
        missing.extend(self.ftrace_producer_died(config));
        missing.extend(self.unrecorded_switches());
        missing.extend(self.sources_without_end());
        let builtin = config.and_then(|c| c.builtin_data_sources.as_ref());
        if !builtin
            .and_then(|b| b.disable_clock_snapshotting)
            .unwrap_or(false)
        {
            missing.extend(faults.unsynced_machines_phrase());
        }
        for e in &self.setup_errors {
            let why: String = e.chars().filter(|c| !c.is_control()).collect();
            missing.push(format!("linux.ftrace setup error: {why}"));
        }
        missing
    }

    /// The end-line phrase for a traced_probes that vanished while its
    /// `linux.ftrace` ran: what it had read is in the trace, but events of
    /// the last window (see schema::ftrace_reading) may have been in the
    /// kernel buffer still, and nobody read them.
    pub fn ftrace_producer_died(&self, config: Option<&TraceConfig>) -> Option<String> {
        use crate::schema::ftrace_reading::{config_kernel_window_ms, kernel_window_ms};
        let died = self
            .faults
            .vanished
            .iter()
            .any(|v| v.data_sources.iter().any(|d| d == "linux.ftrace"));
        died.then(|| {
            let ms = config
                .and_then(config_kernel_window_ms)
                .unwrap_or_else(|| kernel_window_ms(None));
            format!(
                "linux.ftrace: traced_probes died; events from the last ≤ {:.1} s were in \
                 the kernel buffer and are not in the trace",
                ms as f64 / 1000.0
            )
        })
    }

    /// The end-line phrase for ftrace data sources whose start-of-trace
    /// stats are in the trace and whose end-of-trace stats are not (the
    /// source never made its final flush: its producer died, or the flush
    /// timed out): what the kernel lost there is unknown, not nothing.
    pub fn sources_without_end(&self) -> Option<String> {
        let n = self
            .sequences
            .iter()
            .filter(|s| s.start.is_some() && s.end.is_none())
            .count();
        (n > 0).then(|| {
            format!(
                "{n} linux.ftrace source(s) wrote no end-of-trace ftrace_stats, so what the \
                 kernel lost there is unknown"
            )
        })
    }

    /// sched_switch events the kernel never recorded, per cpu (from each
    /// ftrace data source's last stats), as an end-line phrase.
    pub fn unrecorded_switches(&self) -> Option<String> {
        let mut per_cpu: Vec<(u64, u64)> = Vec::new();
        for c in self
            .sequences
            .iter()
            .filter_map(|s| s.end.as_ref())
            .flatten()
        {
            match per_cpu.iter_mut().find(|(cpu, _)| *cpu == c.cpu) {
                Some((_, n)) => *n += c.unrecorded,
                None => per_cpu.push((c.cpu, c.unrecorded)),
            }
        }
        per_cpu.retain(|(_, n)| *n > 0);
        if per_cpu.is_empty() {
            return None;
        }
        per_cpu.sort_unstable();
        let total: u64 = per_cpu.iter().map(|(_, n)| n).sum();
        let cpus = if per_cpu.len() <= 4 {
            let list: Vec<String> = per_cpu
                .iter()
                .map(|(c, n)| format!("cpu{c}: {n}"))
                .collect();
            list.join(", ")
        } else {
            format!("cpus: {}", per_cpu.len())
        };
        // Short: the explanation is under its key in `perfetto --help` and
        // README (many kernels do this on every trace).
        Some(format!(
            "the kernel never recorded {total} sched_switch events ({cpus}) \
             [{UNRECORDED_SWITCHES_KEY}]"
        ))
    }

    /// The end line with perf records the kernel lost (samples, mostly), and perf sources
    /// stopped by traced_perf's memory guardrail, added to it.
    pub fn with_perf_loss(&self, mut line: String) -> String {
        let n = self.perf_records_lost;
        if n > 0 {
            let what = format!("LOST {n} perf records in the kernel");
            line = if line == "Trace stats: nothing lost" {
                format!(
                    "Trace stats: {what} (perf ring buffers overran before they were read; \
                     more ring_buffer_pages or a shorter ring_buffer_read_period_ms keeps them)"
                )
            } else {
                format!("{line}; {what} (PerfSample.kernel_records_lost)")
            };
        }
        let mut gaps = Vec::new();
        if self.perf_samples_skipped > 0 {
            gaps.push(format!(
                "{} perf samples without their stack (the unwinder's queue was full or the \
                 stop came first; PerfSample.sample_skipped_reason)",
                self.perf_samples_skipped
            ));
        }
        if self.perf_unwind_errors > 0 {
            gaps.push(format!(
                "{} perf stacks cut short (PerfSample.unwind_error)",
                self.perf_unwind_errors
            ));
        }
        for what in gaps {
            line = match line.as_str() {
                "Trace stats: nothing lost" => format!("Trace stats: {what}"),
                _ => format!("{line}; {what}"),
            };
        }
        let g = self.perf_guardrail_stops;
        if g > 0 {
            let what = format!(
                "linux.perf STOPPED early {g}x: traced_perf went over max_daemon_memory_kb, \
                 no samples after that (PerfSample.producer_event)"
            );
            line = match line.as_str() {
                "Trace stats: nothing lost" => format!("Trace stats: {what}"),
                _ => format!("{line}; {what}"),
            };
        }
        line
    }
}

/// The phase, per-cpu counters and setup error of an `FtraceStats`; `None`
/// if the bytes are not a well-formed message.
fn parse_stats(
    bytes: &[u8],
    faults: &mut TraceFaults,
) -> Option<(u64, Vec<CpuLoss>, Option<String>)> {
    let (mut phase, mut cpus, mut error) = (0, Vec::new(), None);
    let mut fields = FieldIter::new(bytes);
    for f in &mut fields {
        match (f.number, f.wire_type) {
            (PHASE, 0) => phase = read_varint(f.value)?.0,
            (CPU_STATS, 2) => {
                let mut c = CpuLoss::default();
                let mut inner = FieldIter::new(f.value);
                for g in &mut inner {
                    let slot = match (g.number, g.wire_type) {
                        (CPU, 0) => &mut c.cpu,
                        (OVERRUN, 0) => &mut c.overrun,
                        (DROPPED_EVENTS, 0) => &mut c.dropped,
                        (UNRECORDED_SWITCHES, 0) => &mut c.unrecorded,
                        _ => continue,
                    };
                    *slot = read_varint(g.value)?.0;
                }
                if inner.error {
                    return None;
                }
                cpus.push(c);
            }
            (UNKNOWN_EVENTS, 2) => faults.add(Missing::UnknownEvent, f.value),
            (FAILED_EVENTS, 2) => faults.add(Missing::FailedEvent, f.value),
            (ATRACE_ERRORS, 2) => faults.add(Missing::AtraceError, f.value),
            (SETUP_ERROR, 2) => {
                let text = &f.value[..f.value.len().min(MAX_SETUP_ERROR_LEN)];
                error = Some(String::from_utf8_lossy(text).into_owned());
            }
            _ => {}
        }
    }
    (!fields.error).then_some((phase, cpus, error))
}

/// Random access to a trace: memory, or a file read through a window.
trait TraceBytes {
    /// Up to `n` bytes at `pos`, fewer only at the end.
    fn at(&mut self, pos: u64, n: usize) -> io::Result<&[u8]>;
}

impl TraceBytes for &[u8] {
    fn at(&mut self, pos: u64, n: usize) -> io::Result<&[u8]> {
        let from = usize::try_from(pos).map_or(self.len(), |p| p.min(self.len()));
        Ok(&self[from..self.len().min(from.saturating_add(n))])
    }
}

/// A packet split in slices: headers that straddle two slices are copied
/// into a scratch buffer, nothing else is.
struct Parts<'a, P> {
    parts: &'a [P],
    scratch: Vec<u8>,
}

impl<'a, P: AsRef<[u8]>> Parts<'a, P> {
    fn new(parts: &'a [P]) -> Self {
        Parts {
            parts,
            scratch: Vec::new(),
        }
    }
}

impl<P: AsRef<[u8]>> TraceBytes for Parts<'_, P> {
    fn at(&mut self, pos: u64, n: usize) -> io::Result<&[u8]> {
        let mut start = 0u64;
        for (i, part) in self.parts.iter().enumerate() {
            let part = part.as_ref();
            let end = start + part.len() as u64;
            if pos >= end {
                start = end;
                continue;
            }
            let off = (pos - start) as usize;
            if part.len() - off >= n {
                return Ok(&part[off..off + n]);
            }
            self.scratch.clear();
            self.scratch.extend_from_slice(&part[off..]);
            for next in &self.parts[i + 1..] {
                let want = n - self.scratch.len();
                if want == 0 {
                    break;
                }
                let next = next.as_ref();
                self.scratch
                    .extend_from_slice(&next[..want.min(next.len())]);
            }
            return Ok(&self.scratch);
        }
        Ok(&[])
    }
}

/// A file read 4 KiB at a time around the position asked for, so walking
/// field headers skips the payloads in between.
struct FileWindow<'f> {
    file: &'f File,
    len: u64,
    start: u64,
    buf: Vec<u8>,
}

const WINDOW: usize = 4096;

impl<'f> FileWindow<'f> {
    fn new(file: &'f File) -> io::Result<Self> {
        Ok(FileWindow {
            file,
            len: file.metadata()?.len(),
            start: 0,
            buf: Vec::new(),
        })
    }
}

impl TraceBytes for FileWindow<'_> {
    fn at(&mut self, pos: u64, n: usize) -> io::Result<&[u8]> {
        let covered = pos >= self.start && pos + n as u64 <= self.start + self.buf.len() as u64;
        let at_end = pos >= self.start && self.start + (self.buf.len() as u64) >= self.len;
        if !(covered || at_end) || n > WINDOW {
            self.start = pos;
            self.buf.resize(n.max(WINDOW), 0);
            let mut got = 0;
            while got < self.buf.len() {
                match self.file.read_at(&mut self.buf[got..], pos + got as u64) {
                    Ok(0) => break,
                    Ok(k) => got += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            self.buf.truncate(got);
        }
        let from = (pos - self.start) as usize;
        let from = from.min(self.buf.len());
        Ok(&self.buf[from..self.buf.len().min(from + n)])
    }
}

/// The field at `pos`, or `None` if it is malformed or runs past `limit`.
fn field_at(b: &mut dyn TraceBytes, pos: u64, limit: u64) -> io::Result<Option<FieldHeader>> {
    let head = b.at(pos, MAX_FIELD_HEADER)?;
    Ok(field_header(head, pos, limit).ok())
}

/// Sets each cpu's `unrecorded` from a `tracebox_ftrace_stats` extension
/// (schema::trace_extensions); malformed parts are skipped.
fn merge_unrecorded(ext_untrusted: &[u8], cpus: &mut [CpuLoss]) {
    use crate::schema::trace_extensions::ftrace;
    for f in FieldIter::new(ext_untrusted) {
        if (f.number, f.wire_type) != (ftrace::CPU_STATS, 2) {
            continue;
        }
        let (mut cpu, mut n) = (None, 0);
        for g in FieldIter::new(f.value) {
            let v = read_varint(g.value).map(|v| v.0);
            match (g.number, g.wire_type) {
                (ftrace::CPU, 0) => cpu = v,
                (ftrace::UNRECORDED_SWITCHES, 0) => n = v.unwrap_or(0),
                _ => {}
            }
        }
        if let Some(c) = cpus.iter_mut().find(|c| Some(c.cpu) == cpu) {
            c.unrecorded = n;
        }
    }
}

/// What the client wants of one packet.
#[derive(Default)]
struct PacketBits {
    seq: u64,
    timestamp: u64,
    ftrace_stats: Option<Vec<u8>>,
    service_event: Option<Vec<u8>>,
    /// `tracebox_ftrace_stats` (schema::trace_extensions).
    tracebox_ftrace: Option<Vec<u8>>,
    trigger: bool,
    /// `compressed_packets` or `zstd_compressed_packets`: field, bytes.
    compressed: Option<(u32, Vec<u8>)>,
    /// `PerfSample.kernel_records_lost`.
    perf_lost: u64,
    /// `PerfSample.producer_event` says the guardrail stopped the source.
    perf_guardrail: bool,
    perf_unwind_error: bool,
    perf_skipped: bool,
    machine_id: u64,
    clock_sync: bool,
}

/// The fields of the packet in `start..end` the client looks at; nothing
/// if the packet is malformed.
fn stats_in_packet(b: &mut dyn TraceBytes, start: u64, end: u64) -> io::Result<PacketBits> {
    let mut bits = PacketBits::default();
    let mut pos = start;
    while pos < end {
        let Some(f) = field_at(b, pos, end)? else {
            return Ok(PacketBits::default());
        };
        let len = f.end - f.value_start;
        match (f.number, f.wire_type) {
            (TRUSTED_SEQUENCE_ID, 0) => bits.seq = f.value,
            (TIMESTAMP, 0) => bits.timestamp = f.value,
            (TRIGGER, 2) => bits.trigger = true,
            (MACHINE_ID, 0) => bits.machine_id = f.value,
            (REMOTE_CLOCK_SYNC, 2) => bits.clock_sync = true,
            (FTRACE_STATS, 2) if len <= MAX_STATS as u64 => {
                bits.ftrace_stats = Some(b.at(f.value_start, len as usize)?.to_vec());
            }
            (SERVICE_EVENT, 2) if len <= MAX_STATS as u64 => {
                let e = b.at(f.value_start, len as usize)?;
                bits.service_event
                    .get_or_insert_with(Vec::new)
                    .extend_from_slice(e);
            }
            (TRACEBOX_SERVICE_EVENT, 2) if len <= MAX_STATS as u64 => {
                let e = service_event_from_extension(b.at(f.value_start, len as usize)?);
                bits.service_event.get_or_insert_with(Vec::new).extend(e);
            }
            (TRACEBOX_FTRACE_STATS, 2) if len <= MAX_STATS as u64 => {
                bits.tracebox_ftrace = Some(b.at(f.value_start, len as usize)?.to_vec());
            }
            (PERF_SAMPLE, 2) if len <= MAX_PERF_SAMPLE => {
                for g in FieldIter::new(b.at(f.value_start, len as usize)?) {
                    match (g.number, g.wire_type) {
                        (KERNEL_RECORDS_LOST, 0) => {
                            let lost = read_varint(g.value).map_or(0, |v| v.0);
                            bits.perf_lost = bits.perf_lost.saturating_add(lost);
                        }
                        (PRODUCER_EVENT, 2) => {
                            let reason = FieldIter::new(g.value).find(|r| r.number == 1);
                            let reason = reason.and_then(|r| read_varint(r.value));
                            bits.perf_guardrail |= reason.map(|r| r.0) == Some(STOP_GUARDRAIL);
                        }
                        (UNWIND_ERROR, 0) => bits.perf_unwind_error = true,
                        (SAMPLE_SKIPPED_REASON, 0) => bits.perf_skipped = true,
                        _ => {}
                    }
                }
            }
            (COMPRESSED_PACKETS | ZSTD_COMPRESSED_PACKETS, 2) if len <= MAX_COMPRESSED as u64 => {
                let z = b.at(f.value_start, len as usize)?.to_vec();
                bits.compressed = Some((f.number as u32, z));
            }
            _ => {}
        }
        pos = f.end;
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::{put_bytes, put_varint, VecStream};
    use crate::traced_probes::ftrace::parse::stats::CpuStats;
    use crate::traced_probes::ftrace::parse::stats::{
        write_ftrace_stats, Phase as P, StatsSnapshot,
    };
    use std::io::Write;

    /// A stats packet as traced_probes writes it, with traced's trailer.
    fn stats_packet(seq: u64, phase: P, lost: &[(u64, u64)]) -> Vec<u8> {
        let cpus: Vec<CpuStats> = lost
            .iter()
            .map(|&(overrun, dropped_events)| CpuStats {
                overrun,
                dropped_events,
                entries: 7,
                ..Default::default()
            })
            .collect();
        let mut s = VecStream::new();
        put_varint(&mut s, 8, 12345); // timestamp
        let snap = StatsSnapshot {
            cpu_stats: &cpus,
            ..Default::default()
        };
        write_ftrace_stats(&mut s, phase, &snap);
        put_varint(&mut s, TRUSTED_SEQUENCE_ID as u32, seq);
        s.into_bytes()
    }

    #[test]
    fn switches_the_kernel_never_recorded_are_named_per_cpu() {
        let mut k = KernelLoss::default();
        assert_eq!(k.unrecorded_switches(), None);
        let cpus = [CpuStats::default(), CpuStats::default()];
        for (seq, unrecorded) in [(1u64, [0u64, 71]), (2, [2, 3])] {
            let mut s = VecStream::new();
            put_varint(&mut s, 8, 12345);
            let snap = StatsSnapshot {
                cpu_stats: &cpus,
                unrecorded_switches: &unrecorded,
                ..Default::default()
            };
            write_ftrace_stats(&mut s, P::EndOfTrace, &snap);
            trace_extensions::write_unrecorded_switches(&mut s, &unrecorded);
            put_varint(&mut s, TRUSTED_SEQUENCE_ID as u32, seq);
            k.observe_packet(&[s.into_bytes()]);
        }
        let p = k.unrecorded_switches().unwrap();
        assert!(
            p.starts_with("the kernel never recorded 76 sched_switch events (cpu0: 2, cpu1: 74)"),
            "{p}"
        );
        assert!(p.ends_with(" [unrecorded-switches]"), "{p}");
        assert!(p.len() < 100, "{p}");
    }

    #[test]
    fn perf_losses_are_summed_and_named() {
        let mut k = KernelLoss::default();
        for (lost, split) in [(5u64, false), (7, true)] {
            let mut s = VecStream::new();
            put_varint(&mut s, 8, 1);
            let n = crate::protozero::begin_nested(&mut s, PERF_SAMPLE as u32);
            put_varint(&mut s, 1, 0);
            put_varint(&mut s, KERNEL_RECORDS_LOST, lost);
            crate::protozero::end_nested(&mut s, n);
            let b = s.into_bytes();
            if split {
                k.observe_packet(&[&b[..3], &b[3..]]);
            } else {
                k.observe_packet(&[&b[..]]);
            }
        }
        assert_eq!(k.perf_records_lost, 12);
        let line = k.with_perf_loss("Trace stats: nothing lost".into());
        assert!(
            line.starts_with("Trace stats: LOST 12 perf records in the kernel"),
            "{line}"
        );
        let line = k.with_perf_loss("Trace stats: LOST 1 chunks dropped".into());
        assert!(
            line.ends_with("; LOST 12 perf records in the kernel (PerfSample.kernel_records_lost)")
        );
        assert_eq!(KernelLoss::default().with_perf_loss("x".into()), "x");
        let mut s = VecStream::new();
        let n = crate::protozero::begin_nested(&mut s, PERF_SAMPLE as u32);
        let e = crate::protozero::begin_nested(&mut s, PRODUCER_EVENT);
        put_varint(&mut s, 1, STOP_GUARDRAIL);
        crate::protozero::end_nested(&mut s, e);
        crate::protozero::end_nested(&mut s, n);
        let mut k = KernelLoss::default();
        k.observe_packet(&[s.into_bytes()]);
        let line = k.with_perf_loss("Trace stats: nothing lost".into());
        assert!(
            line.starts_with("Trace stats: linux.perf STOPPED early 1x"),
            "{line}"
        );
    }

    /// A bundle-sized packet without stats.
    fn data_packet(seq: u64, size: usize) -> Vec<u8> {
        let mut s = VecStream::new();
        put_bytes(&mut s, 1, &vec![0xAB; size]);
        put_varint(&mut s, TRUSTED_SEQUENCE_ID as u32, seq);
        s.into_bytes()
    }

    fn trace_file(packets: &[Vec<u8>]) -> Vec<u8> {
        let mut s = VecStream::new();
        for p in packets {
            put_bytes(&mut s, TRACE_PACKET as u32, p);
        }
        s.into_bytes()
    }

    #[test]
    fn relayed_machines_without_a_clock_sync_are_named() {
        let packet = |machine: u64, sync: bool| {
            let mut s = VecStream::new();
            put_varint(&mut s, TIMESTAMP as u32, 1);
            if sync {
                put_bytes(&mut s, REMOTE_CLOCK_SYNC as u32, &[]);
            }
            put_varint(&mut s, MACHINE_ID as u32, machine);
            s.into_bytes()
        };
        let mut k = KernelLoss::default();
        for p in [
            packet(0, false),
            packet(7, false),
            packet(9, false),
            packet(7, true),
        ] {
            k.observe_packet(&[p]);
        }
        let phrase = k.faults.unsynced_machines_phrase().unwrap();
        assert!(
            phrase.starts_with("no clock sync for relayed machine 9 ("),
            "{phrase}"
        );
        k.observe_packet(&[packet(9, true)]);
        assert_eq!(k.faults.unsynced_machines_phrase(), None);
    }

    #[test]
    fn setup_errors_are_collected_once_each() {
        let mut s = VecStream::new();
        let snap = StatsSnapshot {
            setup_error: Some("the top-level ftrace instance is in use"),
            ..Default::default()
        };
        write_ftrace_stats(&mut s, P::EndOfTrace, &snap);
        put_varint(&mut s, TRUSTED_SEQUENCE_ID as u32, 3);
        let failed = s.into_bytes();
        let mut k = KernelLoss::default();
        k.scan_trace(&trace_file(&[failed.clone(), failed, data_packet(3, 10)]));
        assert_eq!(k.setup_errors, ["the top-level ftrace instance is in use"]);
        assert_eq!(k.events_lost(), None);
    }

    fn two_sources() -> Vec<Vec<u8>> {
        vec![
            stats_packet(1, P::StartOfTrace, &[(5, 0), (0, 1)]),
            stats_packet(2, P::StartOfTrace, &[(0, 0)]),
            data_packet(1, 100_000),
            data_packet(2, 3_000),
            stats_packet(1, P::EndOfTrace, &[(105, 0), (20, 3)]),
            data_packet(2, 50_000),
            stats_packet(2, P::EndOfTrace, &[(4, 0)]),
        ]
    }

    #[test]
    fn zstd_compressed_packets_are_read_once_and_bombs_counted() {
        let z = codec::zstd::compress(&trace_file(&two_sources()), 3);
        let mut s = VecStream::new();
        put_bytes(&mut s, ZSTD_COMPRESSED_PACKETS as u32, &z);
        let packet = s.into_bytes();
        let mut k = KernelLoss::default();
        k.observe_packet(&[packet.as_slice()]);
        assert_eq!((k.events_lost(), k.malformed), (Some(126), 0));
        let mut k = KernelLoss::default();
        k.scan_file(&tempfile_with(&trace_file(std::slice::from_ref(&packet))))
            .unwrap();
        assert_eq!((k.events_lost(), k.malformed), (Some(126), 0));
        // Past MAX_INFLATED: refused while decompressing, counted.
        let bomb = codec::zstd::compress(&vec![0u8; MAX_INFLATED + 1], 1);
        let mut s = VecStream::new();
        put_bytes(&mut s, ZSTD_COMPRESSED_PACKETS as u32, &bomb);
        let mut k = KernelLoss::default();
        k.observe_packet(&[s.into_bytes()]);
        assert_eq!((k.events_lost(), k.malformed), (None, 1));
    }

    #[test]
    fn compressed_packets_are_inflated_once() {
        let z = miniz_oxide::deflate::compress_to_vec_zlib(&trace_file(&two_sources()), 6);
        let mut s = VecStream::new();
        put_bytes(&mut s, COMPRESSED_PACKETS as u32, &z);
        let packet = s.into_bytes();
        let mut k = KernelLoss::default();
        k.observe_packet(&[packet.as_slice()]);
        assert_eq!(k.events_lost(), Some(126));
        let mut k = KernelLoss::default();
        k.scan_file(&tempfile_with(&trace_file(std::slice::from_ref(&packet))))
            .unwrap();
        assert_eq!((k.events_lost(), k.malformed), (Some(126), 0));
        // Compressed inside compressed is not the trace format: counted.
        let z2 = miniz_oxide::deflate::compress_to_vec_zlib(&trace_file(&[packet]), 6);
        let mut s = VecStream::new();
        put_bytes(&mut s, COMPRESSED_PACKETS as u32, &z2);
        let mut k = KernelLoss::default();
        k.observe_packet(&[s.into_bytes()]);
        assert_eq!((k.events_lost(), k.malformed), (None, 1));
        // Garbage that does not inflate is counted.
        let mut s = VecStream::new();
        put_bytes(&mut s, COMPRESSED_PACKETS as u32, &[1, 2, 3]);
        let mut k = KernelLoss::default();
        k.observe_packet(&[s.into_bytes()]);
        assert_eq!(k.malformed, 1);
    }

    #[test]
    fn losses_are_end_minus_start_per_cpu_summed_over_sources() {
        let mut k = KernelLoss::default();
        for p in two_sources() {
            k.observe_packet(&[p]);
        }
        // Source 1: (105-5) + (20-0) + (3-1); source 2: 4.
        assert_eq!(k.events_lost(), Some(100 + 20 + 2 + 4));
        assert_eq!(k.malformed, 0);
    }

    #[test]
    fn a_trace_without_both_ends_says_nothing() {
        let mut k = KernelLoss::default();
        assert_eq!(k.events_lost(), None);
        k.observe_packet(&[data_packet(1, 10)]);
        k.observe_packet(&[stats_packet(1, P::EndOfTrace, &[(9, 9)])]);
        assert_eq!(k.events_lost(), None, "the start was overwritten");
        assert_eq!(k.sources_without_end(), None);
        k.observe_packet(&[stats_packet(1, P::StartOfTrace, &[(9, 9)])]);
        assert_eq!(k.events_lost(), Some(0));
        // A source that started and never ended: its losses are unknown.
        k.observe_packet(&[stats_packet(2, P::StartOfTrace, &[(1, 0)])]);
        assert_eq!(k.events_lost(), Some(0));
        assert_eq!(
            k.sources_without_end().as_deref(),
            Some(
                "1 linux.ftrace source(s) wrote no end-of-trace ftrace_stats, so what the \
                 kernel lost there is unknown"
            )
        );
    }

    #[test]
    fn a_packet_in_slices_gives_what_it_gives_whole() {
        // Every way of cutting each packet in three, headers straddling
        // the cuts included.
        for p in two_sources() {
            let mut whole = KernelLoss::default();
            whole.observe_packet(&[&p]);
            whole.observe_packet(&[stats_packet(7, P::StartOfTrace, &[(0, 0)])]);
            let step = (p.len() / 40).max(1);
            for a in (0..=p.len()).step_by(step) {
                for b in (a..=p.len()).step_by(step) {
                    let mut k = KernelLoss::default();
                    k.observe_packet(&[&p[..a], &p[a..b], &p[b..]]);
                    k.observe_packet(&[stats_packet(7, P::StartOfTrace, &[(0, 0)])]);
                    assert_eq!(k.events_lost(), whole.events_lost(), "cut at {a}, {b}");
                    assert_eq!(k.sequences.len(), whole.sequences.len());
                }
            }
        }
        let mut k = KernelLoss::default();
        for p in two_sources() {
            let (a, b) = (p.len() / 3, 2 * p.len() / 3);
            k.observe_packet(&[&p[..a], &[][..], &p[a..b], &p[b..]]);
        }
        assert_eq!(k.events_lost(), Some(126));
    }

    #[test]
    fn a_written_file_gives_what_the_stream_gives() {
        let bytes = trace_file(&two_sources());
        let mut f = tempfile_with(&bytes);
        let mut k = KernelLoss::default();
        k.scan_file(&f).unwrap();
        assert_eq!(k.events_lost(), Some(126));
        // A file cut inside its last packet: the packets before still count.
        f.write_all(&[0x0A, 0xFF, 0x7F, 1, 2, 3]).unwrap();
        let mut k = KernelLoss::default();
        k.scan_file(&f).unwrap();
        assert_eq!(k.events_lost(), Some(126));
    }

    #[test]
    fn garbage_is_counted_or_skipped_never_a_panic() {
        let mut k = KernelLoss::default();
        let mut bad = VecStream::new();
        put_bytes(&mut bad, FTRACE_STATS as u32, &[0x08, 0xFF]); // truncated varint
        k.observe_packet(&[bad.as_bytes()]);
        assert_eq!(k.malformed, 1);
        for p in two_sources() {
            for cut in 0..p.len().min(300) {
                k.observe_packet(&[&p[..cut]]);
                let mut flipped = p.clone();
                flipped[cut] ^= 0x80;
                k.observe_packet(&[&flipped]);
            }
        }
        let f = tempfile_with(&[0x0A, 0x80, 0x80, 0x80]);
        KernelLoss::default().scan_file(&f).unwrap();
    }

    fn tempfile_with(bytes: &[u8]) -> File {
        let fd = nix::sys::memfd::memfd_create(
            c"kernel_loss_test",
            nix::sys::memfd::MemFdCreateFlag::empty(),
        )
        .unwrap();
        let mut f = File::from(fd);
        f.write_all(bytes).unwrap();
        f
    }
}
