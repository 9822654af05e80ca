//! FtraceEventBundle -> time-stamped records, both encodings: full
//! `FtraceEvent`s and `compact_sched` (packed parallel arrays with
//! delta-coded timestamps and an intern table of comms).

use crate::protozero::decode::{read_varint, FieldIter, RawField};
use crate::traced_probes::ftrace::parse::kprobes::FTRACE_EVENT_KPROBE;
use crate::traced_probes::ftrace::parse::table::{ftrace_event, EVENTS};

/// `FtraceEvent` payload fields the analysis reads.
pub const SCHED_SWITCH: u32 = 4;
pub const CPU_FREQUENCY: u32 = 11;
pub const SCHED_WAKEUP: u32 = 17;
pub const SCHED_WAKING: u32 = 20;
pub const TASK_NEWTASK: u32 = 235;
pub const TASK_RENAME: u32 = 236;
pub const SCHED_PROCESS_EXEC: u32 = 237;
/// `Rec.cpu` of records that belong to no cpu (SDK events, name changes).
pub const NO_CPU: u32 = u32::MAX;
/// Generic events get ids from here on, one per distinct name.
pub const GENERIC_BASE: u32 = 1 << 20;
pub const MAX_GENERIC_NAMES: usize = 1024;
/// Bundles of higher cpu numbers are counted as malformed.
pub const MAX_CPUS: u32 = 4096;

#[derive(Debug, Clone, PartialEq)]
pub enum Ev {
    /// `prev_pid` is -1 in compact_sched (the cpu's running task).
    Switch {
        prev_pid: i32,
        prev_state: i64,
        next_pid: i32,
        next_prio: i32,
    },
    Waking {
        pid: i32,
        target_cpu: i32,
        prio: i32,
        wakeup: bool,
    },
    Print(Box<str>),
    /// A TrackEvent of an SDK: type (1 begin, 2 end, 3 instant, 4
    /// counter) and name.
    Track(u8, Box<str>),
    /// `pid` is called this from `ts` on (not an event of its own).
    Comm(Box<str>),
    /// Any other event: its `FtraceEvent` field id (or a generic id) and
    /// payload bytes (kept only when needed).
    Other {
        id: u32,
        raw: Box<[u8]>,
    },
}

/// One event. `pid` is the event's task, -1 when compact_sched left it out.
#[derive(Debug, Clone, PartialEq)]
pub struct Rec {
    pub ts: u64,
    pub cpu: u32,
    pub pid: i32,
    pub ev: Ev,
}

/// What bundles tell apart from events.
#[derive(Debug, Default)]
pub struct BundleStats {
    pub bundles: u64,
    pub lost_events_bundles: u64,
    pub errors: u64,
    pub malformed: u64,
    pub clock: Option<u64>,
    /// The last bundle's clock and (ftrace clock, BOOTTIME) reading.
    pub bundle_clock: (u64, Option<(i64, i64)>),
    /// Names of generic events, in id order.
    pub generic_names: Vec<String>,
    pub generic_overflow: u64,
}

fn varint(v: &[u8]) -> u64 {
    read_varint(v).map_or(0, |(x, _)| x)
}

/// Values of a packed (or single unpacked) varint field.
fn packed<'a>(f: &RawField<'a>) -> impl Iterator<Item = u64> + 'a {
    let mut rest = if f.wire_type == 2 { f.value } else { f.whole };
    let skip_tag = f.wire_type != 2;
    if skip_tag {
        rest = &rest[read_varint(rest).map_or(rest.len(), |(_, n)| n)..];
    }
    std::iter::from_fn(move || {
        let (v, n) = read_varint(rest)?;
        rest = &rest[n..];
        Some(v)
    })
}

/// The event's name: `group/name` is not needed, `name` is what trace-cmd shows.
pub fn event_name(id: u32, generic: &[String]) -> &str {
    if id >= GENERIC_BASE {
        return generic.get((id - GENERIC_BASE) as usize).map_or("?", |s| s);
    }
    EVENTS
        .iter()
        .find(|e| e.proto_field_id == id)
        .map_or("unknown", |e| e.name)
}

/// Where a comm comes from: `comm(ts, tid, name, renamed)`, `renamed`
/// for the events that change it (the others only show it).
pub type CommSink<'a> = dyn FnMut(u64, i32, &[u8], bool) + 'a;

/// A bundle's ftrace clock and its (ftrace clock, BOOTTIME) reading.
pub fn bundle_clock(b: &[u8]) -> (u64, Option<(i64, i64)>) {
    let (mut clock, mut ftrace_ts, mut boot_ts) = (0, None, 0);
    for f in FieldIter::new(b).filter(|f| f.wire_type == 0) {
        match f.number {
            5 => clock = varint(f.value),
            6 => ftrace_ts = Some(varint(f.value) as i64),
            7 => boot_ts = varint(f.value) as i64,
            _ => {}
        }
    }
    (clock, ftrace_ts.map(|f| (f, boot_ts)))
}

/// Decodes one bundle; comms seen go to `comm`.
pub fn decode_bundle(
    b: &[u8],
    keep_raw: bool,
    st: &mut BundleStats,
    comm: &mut CommSink,
    out: &mut dyn FnMut(Rec),
) {
    st.bundles += 1;
    let mut cpu = 0;
    for f in FieldIter::new(b) {
        match (f.number, f.wire_type) {
            (1, 0) => cpu = varint(f.value) as u32,
            (3, 0) => st.lost_events_bundles += (varint(f.value) != 0) as u64,
            (5, 0) => st.clock = Some(varint(f.value)),
            (8, 2) => st.errors += 1,
            _ => {}
        }
    }
    st.bundle_clock = bundle_clock(b);
    if cpu >= MAX_CPUS {
        st.malformed += 1;
        return;
    }
    let mut it = FieldIter::new(b);
    for f in &mut it {
        match (f.number, f.wire_type) {
            (2, 2) => decode_event(f.value, cpu, keep_raw, st, comm, out),
            (4, 2) => compact(f.value, cpu, st, comm, out),
            _ => {}
        }
    }
    st.malformed += it.error as u64;
}

fn decode_event(
    e: &[u8],
    cpu: u32,
    keep_raw: bool,
    st: &mut BundleStats,
    comm: &mut CommSink,
    out: &mut dyn FnMut(Rec),
) {
    let (mut ts, mut pid, mut payload) = (0, -1, None);
    let mut it = FieldIter::new(e);
    for f in &mut it {
        match f.number {
            ftrace_event::TIMESTAMP => ts = varint(f.value),
            ftrace_event::PID => pid = varint(f.value) as i32,
            n if f.wire_type == 2 && n != 5 => payload = Some((n, f.value)),
            _ => {}
        }
    }
    if it.error {
        st.malformed += 1;
    }
    let Some((id, p)) = payload else { return };
    // Fields 1..8 of the payload, read in one pass (all the analysis uses).
    let (mut ints, mut strs) = ([0i64; 8], [&[][..]; 8]);
    for f in FieldIter::new(p) {
        let n = f.number as usize;
        match f.wire_type {
            0 if n < 8 => ints[n] = varint(f.value) as i64,
            2 if n < 8 => strs[n] = f.value,
            _ => {}
        }
    }
    let int = |n: usize| ints[n];
    let bytes = |n: usize| strs[n];
    let ev = match id {
        ftrace_event::PRINT => Ev::Print(String::from_utf8_lossy(bytes(2)).into()),
        SCHED_SWITCH => {
            comm(ts, int(2) as i32, bytes(1), false);
            comm(ts, int(6) as i32, bytes(5), false);
            Ev::Switch {
                prev_pid: int(2) as i32,
                prev_state: int(4),
                next_pid: int(6) as i32,
                next_prio: int(7) as i32,
            }
        }
        SCHED_WAKING | SCHED_WAKEUP => {
            comm(ts, int(2) as i32, bytes(1), false);
            Ev::Waking {
                pid: int(2) as i32,
                target_cpu: int(5) as i32,
                prio: int(3) as i32,
                wakeup: id == SCHED_WAKEUP,
            }
        }
        // Both carry the event's name in field 1; a kprobe is named after
        // its function.
        ftrace_event::GENERIC | FTRACE_EVENT_KPROBE => {
            let name = bytes(1);
            let i = match st.generic_names.iter().position(|n| n.as_bytes() == name) {
                Some(i) => i,
                None if st.generic_names.len() < MAX_GENERIC_NAMES => {
                    st.generic_names
                        .push(String::from_utf8_lossy(name).into_owned());
                    st.generic_names.len() - 1
                }
                None => {
                    st.generic_overflow += 1;
                    return;
                }
            };
            Ev::Other {
                id: GENERIC_BASE + i as u32,
                raw: if keep_raw { p.into() } else { Box::default() },
            }
        }
        _ => {
            match id {
                TASK_NEWTASK => comm(ts, int(1) as i32, bytes(2), true),
                TASK_RENAME => comm(ts, int(1) as i32, bytes(3), true),
                SCHED_PROCESS_EXEC => {
                    // The kernel names the task after the file, cut to
                    // TASK_COMM_LEN - 1.
                    let file = bytes(1).rsplit(|&c| c == b'/').next().unwrap_or(&[]);
                    comm(ts, int(2) as i32, &file[..file.len().min(15)], true)
                }
                _ => {}
            }
            // The analysis reads cpu_frequency, the reader task_newtask.
            let keep = keep_raw || id == CPU_FREQUENCY || id == TASK_NEWTASK;
            Ev::Other {
                id,
                raw: if keep { p.into() } else { Box::default() },
            }
        }
    };
    out(Rec { ts, cpu, pid, ev });
}

/// `FtraceEventBundle.CompactSched`.
fn compact(
    c: &[u8],
    cpu: u32,
    st: &mut BundleStats,
    comm: &mut CommSink,
    out: &mut dyn FnMut(Rec),
) {
    let mut intern: Vec<&[u8]> = Vec::new();
    let mut it = FieldIter::new(c);
    for f in &mut it {
        if f.number == 5 && f.wire_type == 2 {
            intern.push(f.value);
        }
    }
    st.malformed += it.error as u64;
    // Every packed array in one pass: a[n] holds field n's values.
    let mut a: [Vec<u64>; 13] = Default::default();
    for f in FieldIter::new(c) {
        if let Some(v) = a.get_mut(f.number as usize).filter(|_| f.number != 5) {
            v.extend(packed(&f));
        }
    }
    let at = |n: usize, i: usize| a[n].get(i).copied().unwrap_or(0);
    let comm_of = |n: usize, i: usize| intern.get(a[n].get(i).copied()? as usize).copied();
    let mut ts = 0u64;
    for (i, d) in a[1].iter().enumerate() {
        ts = ts.wrapping_add(*d);
        let next_pid = at(3, i) as i32;
        if let Some(name) = comm_of(6, i) {
            comm(ts, next_pid, name, false);
        }
        out(Rec {
            ts,
            cpu,
            pid: -1,
            ev: Ev::Switch {
                prev_pid: -1,
                prev_state: at(2, i) as i64,
                next_pid,
                next_prio: at(4, i) as i32,
            },
        });
    }
    let mut ts = 0u64;
    for (i, d) in a[7].iter().enumerate() {
        ts = ts.wrapping_add(*d);
        let pid = at(8, i) as i32;
        if let Some(name) = comm_of(11, i) {
            comm(ts, pid, name, false);
        }
        out(Rec {
            ts,
            cpu,
            pid: -1,
            ev: Ev::Waking {
                pid,
                target_cpu: at(9, i) as i32,
                prio: at(10, i) as i32,
                wakeup: false,
            },
        });
    }
}
