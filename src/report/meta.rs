//! Packets other than ftrace events: the machine, the config, clocks,
//! process names and the service's and ftrace's own loss counters.

use std::collections::HashMap;

use super::clock::{key, Clocks, BOOTTIME};
use super::ftrace::{Ev, Rec, NO_CPU};
use super::seq::Seqs;
use crate::cmd::kernel_loss::KernelLoss;
use crate::cmd::status_line;
use crate::pb::protos::{TraceConfig, TraceStats};
use crate::protozero::decode::{read_varint, FieldIter, RawField};
use crate::schema::trace_extensions;
use crate::schema::wire_check::decode_checked;

/// `TracePacket` fields.
pub const FTRACE_EVENTS: u32 = 1;
const PROCESS_TREE: u32 = 2;
const CLOCK_SNAPSHOT: u32 = 6;
const TIMESTAMP: u32 = 8;
const TRACK_EVENT: u32 = 11;
const INTERNED_DATA: u32 = 12;
const SEQUENCE_FLAGS: u32 = 13;
const SEQUENCE_ID: u32 = 10;
const TIMESTAMP_CLOCK_ID: u32 = 58;
const PACKET_DEFAULTS: u32 = 59;
const TRACK_DESCRIPTOR: u32 = 60;
const TRACE_CONFIG: u32 = 33;
const FTRACE_STATS: u32 = 34;
const TRACE_STATS: u32 = 35;
const SYSTEM_INFO: u32 = 45;
/// What of a command line is kept (a report names processes by it).
const MAX_ARGS: usize = 32;
const MAX_CMDLINE: usize = 256;
const CPU_INFO: u32 = 67;
const MACHINE_ID: u32 = 98;
/// traced_perf's samples: their loss and stop records feed the end line.
const PERF_SAMPLE: u32 = 66;
/// Service events, triggers and relayed machines' clock syncs: with
/// ftrace_stats, perf samples and machine ids, what the client's
/// end-of-trace line is made of.
const TRIGGER: u32 = 46;
const SERVICE_EVENT: u32 = 69;
const REMOTE_CLOCK_SYNC: u32 = 107;
/// tracebox's TracePacket extensions (schema::trace_extensions) and their
/// declaration.
const TRACEBOX_SERVICE_EVENT: u32 = trace_extensions::TRACEBOX_SERVICE_EVENT;
const TRACEBOX_FTRACE_STATS: u32 = trace_extensions::TRACEBOX_FTRACE_STATS;
const EXTENSION_DESCRIPTOR: u32 = trace_extensions::EXTENSION_DESCRIPTOR;
/// Fields every packet may carry besides its payload (trusted uid and
/// pid, loss and first-packet flags, machine id); not counted as unknown.
const COMMON: &[u32] = &[3, 41, 42, 79, 87, 98];
/// Payloads the report knows and does not use (process_stats, sys_stats,
/// track_event, sync marker, trigger, service_event, uuid,
/// remote_clock_sync, ...).
const KNOWN: &[u32] = &[
    4,
    5,
    7,
    9,
    36,
    46,
    69,
    EXTENSION_DESCRIPTOR,
    89,
    107,
    124,
    126,
    130,
    134,
];

#[derive(Debug, Default)]
pub struct Meta {
    pub packets: u64,
    pub malformed_packets: u64,
    /// Packets whose payload the report does not know: (field, count).
    pub unknown: Vec<(u32, u64)>,
    /// `compressed_packets` and `zstd_compressed_packets` decompressed
    /// (their packets are read like the rest).
    pub compressed: u64,
    pub first_ts: Option<u64>,
    pub last_ts: u64,
    pub machine: Vec<(String, String)>,
    pub cpu_model: Option<(usize, String)>,
    pub config: Option<TraceConfig>,
    pub bad_config: u64,
    pub clocks: Clocks,
    pub seqs: Seqs,
    pub clock_snapshots: u64,
    /// The first and last clock snapshot (trace clock): the session's span
    /// (traced writes one at the start, periodically and at the end).
    pub snapshot_span: Option<(u64, u64)>,
    pub stats: Option<TraceStats>,
    pub kernel_loss: KernelLoss,
    /// ftrace parse errors from ftrace_stats (deduplicated; its other
    /// setup problems are in the end line).
    pub setup: Vec<String>,
    pub ftrace_cpu_end: Vec<(u64, u64, u64)>,
    /// What the process tree and the sched data name, by tid/pid.
    pub tasks: HashMap<i32, Task>,
    /// Process-tree entries, setup messages and unknown packet kinds not
    /// kept because their tables were full.
    pub over_limit: u64,
}

/// A thread or process: its process id, names from the process tree
/// (thread name, process cmdline) and from the sched data (comm).
#[derive(Debug, Default)]
pub struct Task {
    pub tgid: i32,
    /// The thread that created this one with CLONE_THREAD (task_newtask):
    /// its process is this one's when the process tree never said.
    pub thread_of: i32,
    pub name: String,
    pub cmdline: String,
    pub comm: String,
    /// When the process tree gave `name`; the comm seen at the latest
    /// time and that time: a tree entry read before a rename is stale
    /// once a later event shows the new comm.
    pub name_ts: u64,
    pub latest: String,
    pub latest_ts: u64,
}

impl Task {
    fn latest_name(&self) -> &str {
        match self.name.is_empty() || self.latest_ts > self.name_ts {
            true if !self.latest.is_empty() => &self.latest,
            _ => &self.name,
        }
    }
}

/// Entries kept per table (process names, setup messages, ...).
pub const MAX_ENTRIES: usize = 1 << 22;
const MAX_MESSAGES: usize = 256;

fn varint(f: &RawField) -> u64 {
    read_varint(f.value).map_or(0, |v| v.0)
}

fn text(f: &RawField) -> String {
    String::from_utf8_lossy(f.value).into_owned()
}

impl Meta {
    /// Takes one packet; returns the FtraceEventBundle bytes, if any, and
    /// the packet's sequence. Its SDK events and process-tree names go to
    /// `out` (on the trace clock).
    pub fn packet<'a>(&mut self, p: &'a [u8], out: &mut Vec<Rec>) -> (Option<&'a [u8]>, u32) {
        self.packets += 1;
        let (mut bundle, mut ts, mut clock, mut seq) = (None, None, None, 0);
        let mut end_line_facts = false;
        // Payloads that need the sequence or the timestamp, by field number.
        let mut later: [&[u8]; 7] = [&[]; 7];
        let mut it = FieldIter::new(p);
        for f in &mut it {
            let slot = [
                PACKET_DEFAULTS,
                CLOCK_SNAPSHOT,
                INTERNED_DATA,
                TRACK_DESCRIPTOR,
                PROCESS_TREE,
                TRACK_EVENT,
            ]
            .iter()
            .position(|&n| n == f.number);
            if let Some(i) = slot {
                later[i + 1] = f.value;
                continue;
            }
            match f.number {
                FTRACE_EVENTS => bundle = Some(f.value),
                TIMESTAMP => ts = Some(varint(&f)),
                TIMESTAMP_CLOCK_ID => clock = Some(varint(&f)),
                SEQUENCE_ID => seq = varint(&f) as u32,
                SEQUENCE_FLAGS if varint(&f) & 1 != 0 => later[0] = f.value,
                SEQUENCE_FLAGS => {}
                TRACE_CONFIG => match decode_checked::<TraceConfig>(f.value) {
                    Ok(c) => {
                        let b = c.builtin_data_sources.as_ref();
                        let primary = b
                            .and_then(|b| b.primary_trace_clock)
                            .map_or(0, |c| c as u64);
                        if self.clocks.trace_clock == 0 {
                            self.clocks.set_trace_clock(primary);
                        }
                        self.config = Some(c)
                    }
                    Err(_) => self.bad_config += 1,
                },
                FTRACE_STATS => {
                    end_line_facts = true;
                    self.ftrace_stats(f.value);
                }
                PERF_SAMPLE
                | TRIGGER
                | SERVICE_EVENT
                | REMOTE_CLOCK_SYNC
                | TRACEBOX_SERVICE_EVENT
                | TRACEBOX_FTRACE_STATS => end_line_facts = true,
                MACHINE_ID => end_line_facts |= varint(&f) != 0,
                TRACE_STATS => match decode_checked::<TraceStats>(f.value) {
                    Ok(s) => self.stats = Some(s),
                    Err(_) => self.malformed_packets += 1,
                },
                SYSTEM_INFO => {
                    // A relayed machine's (traced_relay): say which one.
                    let remote = FieldIter::new(p)
                        .filter(|g| g.number == MACHINE_ID && g.wire_type == 0)
                        .map(|g| varint(&g))
                        .find(|&m| m != 0);
                    if let Some(m) = remote {
                        self.machine.push(("machine_id".into(), m.to_string()));
                    }
                    self.system_info(f.value)
                }
                CPU_INFO => {
                    let cpus: Vec<_> = FieldIter::new(f.value).filter(|f| f.number == 1).collect();
                    let model = cpus
                        .first()
                        .and_then(|c| FieldIter::new(c.value).find(|f| f.number == 1))
                        .map(|f| text(&f))
                        .unwrap_or_default();
                    self.cpu_model = Some((cpus.len(), model));
                }
                n if COMMON.contains(&n) || KNOWN.contains(&n) => {}
                n => {
                    let room = self.unknown.len() < MAX_MESSAGES;
                    match self.unknown.iter_mut().find(|u| u.0 == n) {
                        Some(u) => u.1 += 1,
                        None if room => self.unknown.push((n, 1)),
                        None => self.over_limit += 1,
                    }
                }
            }
        }
        self.malformed_packets += it.error as u64;
        if end_line_facts {
            self.kernel_loss.observe_packet(&[p]);
        }
        let [cleared, defaults, snapshot, interned, descriptor, tree, track] = later;
        if !cleared.is_empty() {
            self.seqs.clear(seq);
        }
        if !defaults.is_empty() {
            self.seqs.defaults(seq, defaults);
        }
        if !snapshot.is_empty() {
            self.clock_snapshots += 1;
            self.clocks.snapshot(seq, snapshot);
        }
        self.seqs.intern(seq, interned);
        self.seqs.descriptor(descriptor);
        // No clock: the sequence's default, else BOOTTIME (trace_processor
        // takes the trace's default clock, BOOTTIME for proto traces).
        let clock = clock.unwrap_or_else(|| self.seqs.clock(seq));
        let clock = if clock == 0 { BOOTTIME } else { clock };
        let ts = ts.and_then(|t| self.clocks.convert(key(seq, clock), t));
        if let Some(ts) = ts {
            self.first_ts = Some(self.first_ts.map_or(ts, |t| t.min(ts)));
            self.last_ts = self.last_ts.max(ts);
            if !snapshot.is_empty() {
                let (first, last) = self.snapshot_span.unwrap_or((ts, ts));
                self.snapshot_span = Some((first.min(ts), last.max(ts)));
            }
            if !track.is_empty() {
                out.push(self.seqs.track_event(seq, ts, track));
            }
        }
        self.process_tree(tree, ts, out);
        (bundle, seq)
    }

    /// A comm seen at `ts` (trace clock): kept as the latest, and sent to
    /// `out` as a name change when it differs from the latest seen or
    /// comes from a renaming event (events are decoded a little out of
    /// time order; the change records are sorted with them).
    pub fn comm(&mut self, ts: u64, tid: i32, name: &[u8], renamed: bool, out: &mut Vec<Rec>) {
        if tid <= 0 || name.is_empty() {
            return;
        }
        let Some(t) = self.task(tid) else { return };
        if ts >= t.latest_ts {
            if t.latest.as_bytes() != name {
                t.latest = String::from_utf8_lossy(name).into_owned();
            }
            t.latest_ts = ts;
        }
        if t.comm.as_bytes() == name && !renamed {
            return;
        }
        t.comm = String::from_utf8_lossy(name).into_owned();
        out.push(Rec {
            ts,
            cpu: NO_CPU,
            pid: tid,
            ev: Ev::Comm(t.comm.as_str().into()),
        });
    }

    fn process_tree(&mut self, b: &[u8], ts: Option<u64>, out: &mut Vec<Rec>) {
        for f in FieldIter::new(b) {
            let (mut id, mut other, mut name) = (0, 0, None);
            // A process is named by its command line (argv[0] without its
            // directory, then the arguments), as trace_processor's cmdline.
            let mut args: Vec<String> = Vec::new();
            for g in FieldIter::new(f.value) {
                match (f.number, g.number) {
                    (1, 1) | (2, 1) => id = varint(&g) as i32,
                    (2, 3) => other = varint(&g) as i32,
                    (2, 2) => name = Some(text(&g)),
                    (1, 3) if args.len() < MAX_ARGS => {
                        let s = text(&g);
                        args.push(match args.is_empty() {
                            true => s.rsplit('/').next().unwrap_or("").to_owned(),
                            false => s,
                        });
                    }
                    _ => {}
                }
            }
            if f.number == 1 && !args.is_empty() {
                let mut line = args.join(" ");
                line.truncate(line.floor_char_boundary(MAX_CMDLINE));
                name = Some(line);
            }
            let Some(t) = self.task(id) else { continue };
            match f.number {
                1 => {
                    t.tgid = id;
                    if let Some(n) = name.filter(|n| !n.is_empty()) {
                        t.cmdline = n;
                    }
                }
                2 => {
                    if other != 0 {
                        t.tgid = other;
                    }
                    if let Some(n) = name {
                        if let Some(ts) = ts {
                            self.comm(ts, id, n.as_bytes(), false, out);
                        }
                        if let Some(t) = self.task(id) {
                            t.name = n;
                            t.name_ts = ts.unwrap_or(0);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// The entry of `tid`, new if needed; `None` (counted) when full.
    pub fn task(&mut self, tid: i32) -> Option<&mut Task> {
        if self.tasks.len() >= MAX_ENTRIES && !self.tasks.contains_key(&tid) {
            self.over_limit += 1;
            return None;
        }
        Some(self.tasks.entry(tid).or_default())
    }

    fn setup_problem(&mut self, s: String) {
        if self.setup.contains(&s) {
        } else if self.setup.len() < MAX_MESSAGES {
            self.setup.push(s);
        } else {
            self.over_limit += 1;
        }
    }

    fn ftrace_stats(&mut self, b: &[u8]) {
        let mut end = false;
        let mut cpus = Vec::new();
        for f in FieldIter::new(b) {
            match f.number {
                1 => end = varint(&f) == 2,
                2 => {
                    let mut c = (0, 0, 0);
                    for g in FieldIter::new(f.value) {
                        match g.number {
                            1 => c.0 = varint(&g),
                            3 => c.1 = varint(&g),
                            8 => c.2 = varint(&g),
                            _ => {}
                        }
                    }
                    cpus.push(c);
                }
                // Setup errors, atrace errors, unknown and failed events
                // are in the end line (`stats_line`).
                9 => {
                    self.setup_problem(format!("ftrace parse error (status {})", varint(&f)));
                }
                _ => {}
            }
        }
        if end {
            self.ftrace_cpu_end = cpus;
        }
    }

    fn system_info(&mut self, b: &[u8]) {
        for f in FieldIter::new(b) {
            match (f.number, f.wire_type) {
                (1, 2) => {
                    for g in FieldIter::new(f.value) {
                        let k = ["sysname", "version", "release", "machine"];
                        if let Some(k) = k.get((g.number as usize).wrapping_sub(1)) {
                            self.machine.push((k.to_string(), text(&g)));
                        }
                    }
                }
                (4, 2) => self.machine.push(("service".into(), text(&f))),
                (8, 0) => self.machine.push(("cpus".into(), varint(&f).to_string())),
                (6, 0) => self
                    .machine
                    .push(("page_size".into(), varint(&f).to_string())),
                (3, 0) => self.machine.push(("hz".into(), varint(&f).to_string())),
                (17, 2) => self.machine.push(("name".into(), text(&f))),
                _ => {}
            }
        }
    }

    /// The client's end-of-trace line, from the trace alone: the same
    /// losses and the same things asked for and not obtained, in the
    /// same words (the client's `print_summary`), so a trace file says
    /// what its recording said. Not known from the file: whether the
    /// client could write it to its end (the report names a cut file).
    pub fn stats_line(&self) -> Option<String> {
        let k = &self.kernel_loss;
        let missing = k.missing(self.config.as_ref(), None);
        let figures = self.stats.as_ref().map(status_line::figures);
        let lost = k.events_lost().unwrap_or(0);
        let losses = k.with_perf_loss(status_line::summary(figures.unwrap_or_default(), lost));
        // Without trace_stats (a trace cut before its end) the line is what
        // the trace itself shows, as the client's when traced gave none.
        let notes = k.notes();
        let line = match figures {
            Some(_) => status_line::end_line(losses, &missing),
            None if losses == status_line::NOTHING_LOST
                && missing.is_empty()
                && notes.is_empty() =>
            {
                return None
            }
            None => status_line::end_line_without_service(losses, &missing),
        };
        Some(status_line::with_notes(line, &notes))
    }

    /// A thread's name: the process tree's, else the sched comm; the
    /// comm when an event after the tree's entry shows another.
    pub fn name(&self, tid: i32) -> String {
        let t = self.tasks.get(&tid);
        match t.map_or("", Task::latest_name) {
            "" if tid == 0 => "<idle>".into(),
            "" => "<...>".into(),
            n => n.to_owned(),
        }
    }

    /// A thread's process id: the process tree's, else that of the thread
    /// that created it (a few generations), else itself.
    pub fn tgid(&self, tid: i32) -> i32 {
        let mut at = tid;
        for _ in 0..8 {
            match self.tasks.get(&at) {
                Some(t) if t.tgid != 0 => return t.tgid,
                Some(t) if t.thread_of > 0 && t.thread_of != at => at = t.thread_of,
                _ => break,
            }
        }
        at
    }

    /// `task_newtask` (`pid`, `clone_flags`) raised by thread `parent`: a
    /// new thread of the parent's process when CLONE_THREAD is set.
    pub fn new_task(&mut self, parent: i32, raw: &[u8]) {
        const CLONE_THREAD: u64 = 0x10000;
        let (mut child, mut flags) = (0, 0);
        for f in FieldIter::new(raw).filter(|f| f.wire_type == 0) {
            match f.number {
                1 => child = varint(&f) as i32,
                3 => flags = varint(&f),
                _ => {}
            }
        }
        if child > 0 && parent > 0 && child != parent && flags & CLONE_THREAD != 0 {
            if let Some(t) = self.task(child) {
                t.thread_of = parent;
            }
        }
    }

    /// A process's name: its cmdline, else its main thread's name.
    pub fn process_name(&self, pid: i32) -> String {
        match self.tasks.get(&pid) {
            Some(t) if !t.cmdline.is_empty() => t.cmdline.clone(),
            _ => self.name(pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process tree entry read before the thread renamed itself loses
    /// to a later event's comm; a later tree entry wins over older comms.
    #[test]
    fn the_latest_name_in_time_wins() {
        let mut m = Meta::default();
        let mut out = Vec::new();
        m.comm(100, 9, b"old", false, &mut out);
        m.tasks.get_mut(&9).unwrap().name = "old".into();
        m.tasks.get_mut(&9).unwrap().name_ts = 150;
        m.comm(200, 9, b"new", false, &mut out);
        // An older event decoded later does not bring the old name back.
        m.comm(120, 9, b"old", false, &mut out);
        assert_eq!(m.name(9), "new");
        let t = m.tasks.get_mut(&9).unwrap();
        (t.name, t.name_ts) = ("tree".into(), 300);
        assert_eq!(m.name(9), "tree");
    }

    /// task_newtask with CLONE_THREAD puts the new thread in its
    /// creator's process, through generations; without it, a process.
    #[test]
    fn new_threads_join_their_creators_process() {
        let mut m = Meta::default();
        m.task(10).unwrap().tgid = 10;
        // pid = 11, clone_flags = CLONE_THREAD | CLONE_VM.
        m.new_task(10, &[0x08, 11, 0x18, 0x80, 0x82, 0x04]);
        m.new_task(11, &[0x08, 12, 0x18, 0x80, 0x82, 0x04]);
        // A fork (no CLONE_THREAD).
        m.new_task(12, &[0x08, 13, 0x18, 0x11]);
        assert_eq!((m.tgid(11), m.tgid(12), m.tgid(13)), (10, 10, 13));
    }
}
