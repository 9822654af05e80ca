//! PerfEventConfig (DataSourceConfig field 111) as upstream defines it,
//! read with the protozero field walker and bounded.

use crate::protozero::decode::{read_varint, FieldIter};

/// What the timebase counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// PerfEvents.Counter enum value.
    Counter(u32),
    Tracepoint {
        name: String,
        filter: String,
    },
    Raw {
        type_: u32,
        config: u64,
        config1: u64,
        config2: u64,
        /// RawEvent.pmu_name: the type is read from sysfs at setup.
        pmu: String,
    },
}

/// An event with its EventModifiers: where it counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    pub event: Event,
    /// EVENT_MODIFIER_COUNT_{USERSPACE,KERNEL,HYPERVISOR} values; empty:
    /// everywhere.
    pub modifiers: Vec<u32>,
}

/// The clock samples are stamped with (Timebase.timestamp_clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleClock {
    /// The clockid perf_event_open stamps with.
    pub clockid: i32,
    /// The BuiltinClock the packets name.
    pub trace_clock: u64,
}

/// CLOCK_MONOTONIC_RAW, upstream's default: the kernel reads it safely
/// from NMIs, so hardware counters and tracepoints accept it (they refuse
/// BOOTTIME and REALTIME with EINVAL).
pub const MONOTONIC_RAW: SampleClock = SampleClock {
    clockid: 4,
    trace_clock: 5,
};

/// A PerfClock value, or None for an unknown one.
fn sample_clock(v: u64) -> Option<SampleClock> {
    let (clockid, trace_clock) = match v {
        0 | 3 => return Some(MONOTONIC_RAW),
        1 => (0, 1),
        2 => (1, 3),
        4 => (7, 6),
        _ => return None,
    };
    Some(SampleClock {
        clockid,
        trace_clock,
    })
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Interval {
    Frequency(u64),
    Period(u64),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub target_pids: Vec<i32>,
    pub target_cmdlines: Vec<String>,
    pub exclude_pids: Vec<i32>,
    pub exclude_cmdlines: Vec<String>,
    pub additional_cmdline_count: u32,
    /// Keep only processes with pid % count == a shard chosen at setup.
    pub process_shard_count: u32,
}

impl Scope {
    pub fn has_targets(&self) -> bool {
        !self.target_pids.is_empty()
            || !self.target_cmdlines.is_empty()
            || self.additional_cmdline_count > 0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PerfConfig {
    pub event: Event,
    /// The timebase's EventModifiers.
    pub modifiers: Vec<u32>,
    pub clock: SampleClock,
    pub interval: Interval,
    /// The Timebase message as the config carried it (for the
    /// PerfSampleDefaults of the trace).
    pub timebase_raw: Vec<u8>,
    pub callstacks: bool,
    pub kernel_frames: bool,
    /// How user frames are found (upstream's user_frames).
    pub unwind: UnwindMode,
    pub scope: Scope,
    pub target_cpus: Vec<u32>,
    pub ring_buffer_pages: usize,
    pub read_period_ms: u32,
    pub max_enqueued_footprint_kb: u64,
    /// Stop the source when the daemon's RssAnon + VmSwap exceeds this
    /// (0: no limit).
    pub max_daemon_memory_kb: u64,
    /// Counters read with every sample (a perf group led by the timebase),
    /// and their FollowerEvent messages as the config carried them (for the
    /// PerfSampleDefaults that name them).
    pub followers: Vec<EventSpec>,
    pub followers_raw: Vec<Vec<u8>>,
    /// ignore_open_failure: a CPU whose event cannot be opened is left
    /// out instead of failing the setup.
    pub ignore_open_failure: bool,
    /// tracebox: names of functions resolved on the device (default on).
    pub function_names: bool,
}

pub const DEFAULT_FREQUENCY: u64 = 10;
pub const DEFAULT_RING_PAGES: usize = 256;
/// Bound on one CPU's ring: 16 MiB of 4 KiB pages.
pub const MAX_RING_PAGES: usize = 4096;
/// How long the daemon may go unscheduled past its read period before a
/// ring sized by [`default_ring_pages`] overruns (a loaded 2-core
/// machine left traced_perf off the CPU for ~130 ms).
pub const RING_GAP_MS: u64 = 250;
pub const DEFAULT_READ_PERIOD_MS: u32 = 100;
/// Work budget of one read pass: records this big at most, per CPU.
pub const DEFAULT_FOOTPRINT_KB: u64 = 4 * 1024;
const MAX_LIST: usize = 64;
const MAX_STR: usize = 256;

/// CallstackSampling.user_frames (upstream's UnwindMode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnwindMode {
    /// No user frames.
    Skip,
    /// The daemon unwinds the copied stack from `.eh_frame` (the default
    /// when callstack_sampling is present; armv7 walks frame pointers).
    Dwarf,
    /// The daemon walks frame pointers through the copied stack.
    FramePointer,
    /// The kernel walks user frame pointers (PERF_SAMPLE_CALLCHAIN).
    KernelFramePointer,
}

impl UnwindMode {
    fn from_proto(v: u64) -> Option<UnwindMode> {
        Some(match v {
            0 | 2 => UnwindMode::Dwarf,
            1 => UnwindMode::Skip,
            3 => UnwindMode::FramePointer,
            4 => UnwindMode::KernelFramePointer,
            _ => return None,
        })
    }

    /// Samples copy user registers and stack for the daemon to unwind.
    pub fn copies_stack(self) -> bool {
        matches!(self, UnwindMode::Dwarf | UnwindMode::FramePointer)
    }
}

/// Bytes of user stack each sample copies (upstream's: below 64 KiB with
/// the low 8 bits clear; the kernel may copy less to fit the record).
pub const STACK_SAMPLE_BYTES: u32 = (1 << 16) - 256;
/// Samples waiting to be unwound at most (upstream's unwind queue).
pub const UNWIND_QUEUE_CAPACITY: usize = 1024;

/// Field number of our own switch in PerfEventConfig (not upstream's).
pub const FIELD_TRACEBOX_FUNCTION_NAMES: u32 = 1001;

fn varint(v: &[u8]) -> u64 {
    read_varint(v).map(|x| x.0).unwrap_or(0)
}

fn string(v: &[u8]) -> Result<String, String> {
    if v.len() > MAX_STR {
        return Err(format!("string of {} bytes (limit {MAX_STR})", v.len()));
    }
    String::from_utf8(v.to_vec()).map_err(|_| "string is not UTF-8".to_string())
}

fn push<T>(list: &mut Vec<T>, v: T, what: &str) -> Result<(), String> {
    if list.len() >= MAX_LIST {
        return Err(format!("more than {MAX_LIST} {what}"));
    }
    list.push(v);
    Ok(())
}

/// Pushes a repeated varint field, packed or not.
fn push_ints(list: &mut Vec<i32>, wire_type: u8, v: &[u8], what: &str) -> Result<(), String> {
    if wire_type == 0 {
        return push(list, varint(v) as i32, what);
    }
    let mut rest = v;
    while !rest.is_empty() {
        let (x, n) = read_varint(rest).ok_or("bad packed list")?;
        push(list, x as i32, what)?;
        rest = &rest[n..];
    }
    Ok(())
}

/// The event of a Timebase (`ids` = field numbers of counter, tracepoint,
/// raw_event and modifiers: 4, 3, 5, 12) or of a FollowerEvent (1, 2, 3, 5).
fn parse_event_fields(
    tb: &[u8],
    ids: [u32; 4],
    event: &mut Option<Event>,
    modifiers: &mut Vec<u32>,
) -> Result<(), String> {
    for f in FieldIter::new(tb) {
        match ids.iter().position(|&n| n == f.number) {
            Some(0) => *event = Some(Event::Counter(varint(f.value) as u32)),
            Some(1) => {
                let (mut name, mut filter) = (String::new(), String::new());
                for t in FieldIter::new(f.value) {
                    match t.number {
                        1 => name = string(t.value)?,
                        2 => filter = string(t.value)?,
                        _ => {}
                    }
                }
                *event = Some(Event::Tracepoint { name, filter });
            }
            Some(2) => {
                let (mut type_, mut config, mut config1, mut config2) = (None, 0, 0, 0);
                let mut pmu = String::new();
                for t in FieldIter::new(f.value) {
                    match t.number {
                        1 => type_ = Some(varint(t.value) as u32),
                        2 => config = varint(t.value),
                        3 => config1 = varint(t.value),
                        4 => config2 = varint(t.value),
                        5 => pmu = string(t.value)?,
                        _ => {}
                    }
                }
                if type_.is_some() && !pmu.is_empty() {
                    return Err("raw_event names both a type and a pmu_name".into());
                }
                *event = Some(Event::Raw {
                    type_: type_.unwrap_or(0),
                    config,
                    config1,
                    config2,
                    pmu,
                });
            }
            Some(3) => {
                let mut m = Vec::new();
                push_ints(&mut m, f.wire_type, f.value, "event modifiers")?;
                for v in m {
                    push(modifiers, v as u32, "event modifiers")?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn parse_scope(b: &[u8], s: &mut Scope) -> Result<(), String> {
    for f in FieldIter::new(b) {
        match f.number {
            1 => push_ints(&mut s.target_pids, f.wire_type, f.value, "target pids")?,
            2 => push(&mut s.target_cmdlines, string(f.value)?, "target cmdlines")?,
            3 => push_ints(&mut s.exclude_pids, f.wire_type, f.value, "excluded pids")?,
            4 => push(
                &mut s.exclude_cmdlines,
                string(f.value)?,
                "excluded cmdlines",
            )?,
            5 => s.additional_cmdline_count = (varint(f.value) as u32).min(1024),
            6 => s.process_shard_count = (varint(f.value) as u32).min(1 << 16),
            _ => {}
        }
    }
    Ok(())
}

/// Parses PerfEventConfig bytes (empty: upstream's defaults).
pub fn parse(config_untrusted: &[u8]) -> Result<PerfConfig, String> {
    let mut c = PerfConfig {
        event: Event::Counter(1),
        modifiers: Vec::new(),
        clock: MONOTONIC_RAW,
        interval: Interval::Frequency(DEFAULT_FREQUENCY),
        timebase_raw: Vec::new(),
        callstacks: false,
        kernel_frames: false,
        unwind: UnwindMode::Skip,
        scope: Scope::default(),
        target_cpus: Vec::new(),
        ring_buffer_pages: 0,
        read_period_ms: DEFAULT_READ_PERIOD_MS,
        max_enqueued_footprint_kb: DEFAULT_FOOTPRINT_KB,
        max_daemon_memory_kb: 0,
        followers: Vec::new(),
        followers_raw: Vec::new(),
        ignore_open_failure: false,
        function_names: true,
    };
    let mut legacy_freq = None;
    let mut event = None;
    let mut interval = None;
    let mut legacy_kernel_frames = false;
    let mut legacy_scope = Scope::default();
    let mut fields = FieldIter::new(config_untrusted);
    for f in fields.by_ref() {
        match f.number {
            15 => {
                c.timebase_raw = f.value.to_vec();
                for t in FieldIter::new(f.value) {
                    match t.number {
                        2 => interval = Some(Interval::Frequency(varint(t.value))),
                        1 => interval = Some(Interval::Period(varint(t.value))),
                        6 => return Err(
                            "timebase poll_period_ms (counting without sampling) is not supported"
                                .into(),
                        ),
                        11 => {
                            c.clock = sample_clock(varint(t.value))
                                .ok_or("timebase timestamp_clock: unknown PerfClock")?
                        }
                        _ => {}
                    }
                }
                parse_event_fields(f.value, [4, 3, 5, 12], &mut event, &mut c.modifiers)?;
            }
            16 => {
                c.callstacks = true;
                c.unwind = UnwindMode::Dwarf;
                for t in FieldIter::new(f.value) {
                    match t.number {
                        1 => parse_scope(t.value, &mut c.scope)?,
                        2 => c.kernel_frames = varint(t.value) != 0,
                        3 => {
                            c.unwind = UnwindMode::from_proto(varint(t.value))
                                .ok_or("user_frames: unknown UnwindMode")?
                        }
                        _ => {}
                    }
                }
            }
            20 => {
                let mut cpus = Vec::new();
                push_ints(&mut cpus, f.wire_type, f.value, "target cpus")?;
                c.target_cpus.extend(cpus.into_iter().map(|x| x as u32));
            }
            8 => c.read_period_ms = varint(f.value) as u32,
            3 => c.ring_buffer_pages = varint(f.value).min(u32::MAX as u64) as usize,
            17 => c.max_enqueued_footprint_kb = varint(f.value),
            13 => c.max_daemon_memory_kb = varint(f.value),
            21 => c.ignore_open_failure = varint(f.value) != 0,
            // Refused, not ignored: a filter we do not apply would profile
            // CPUs the config meant to leave out.
            22 => {
                return Err("cpuid (ARM CPU model filter) is not supported; use target_cpu".into())
            }
            19 => {
                let (mut e, mut modifiers) = (None, Vec::new());
                parse_event_fields(f.value, [1, 2, 3, 5], &mut e, &mut modifiers)?;
                let event =
                    e.ok_or("a follower event names no counter, tracepoint or raw event")?;
                push(
                    &mut c.followers,
                    EventSpec { event, modifiers },
                    "followers",
                )?;
                c.followers_raw.push(f.value.to_vec());
            }
            // Deprecated flat fields, still honoured as upstream does.
            1 => {}
            2 => legacy_freq = Some(varint(f.value)),
            12 => legacy_kernel_frames = varint(f.value) != 0,
            4 => push_ints(
                &mut legacy_scope.target_pids,
                f.wire_type,
                f.value,
                "target pids",
            )?,
            5 => push(
                &mut legacy_scope.target_cmdlines,
                string(f.value)?,
                "target cmdlines",
            )?,
            6 => push_ints(
                &mut legacy_scope.exclude_pids,
                f.wire_type,
                f.value,
                "excluded pids",
            )?,
            7 => push(
                &mut legacy_scope.exclude_cmdlines,
                string(f.value)?,
                "excluded cmdlines",
            )?,
            11 => legacy_scope.additional_cmdline_count = (varint(f.value) as u32).min(1024),
            FIELD_TRACEBOX_FUNCTION_NAMES => c.function_names = varint(f.value) != 0,
            _ => {}
        }
    }
    if fields.error {
        return Err("malformed PerfEventConfig".into());
    }
    if c.timebase_raw.is_empty() {
        // Upstream's legacy mode: cpu-clock with callstacks.
        if !c.callstacks {
            c.unwind = UnwindMode::Dwarf;
        }
        c.callstacks = true;
        c.kernel_frames = legacy_kernel_frames;
        c.scope = legacy_scope;
        if let Some(f) = legacy_freq.filter(|&f| f > 0) {
            interval = Some(Interval::Frequency(f));
        }
    }
    if let Some(e) = event {
        c.event = e;
    }
    if let Some(i) = interval {
        c.interval = i;
    }
    match c.interval {
        Interval::Frequency(0) | Interval::Period(0) => {
            return Err("timebase frequency/period must be above 0".into())
        }
        Interval::Frequency(f) if f > 100_000 => {
            return Err(format!("timebase frequency {f} Hz is above 100000"))
        }
        _ => {}
    }
    if c.read_period_ms == 0 {
        c.read_period_ms = DEFAULT_READ_PERIOD_MS;
    }
    c.read_period_ms = c.read_period_ms.clamp(1, 60_000);
    let pages = if c.ring_buffer_pages == 0 {
        default_ring_pages(&c)
    } else {
        c.ring_buffer_pages
    };
    if !pages.is_power_of_two() || pages > MAX_RING_PAGES {
        return Err(format!(
            "ring_buffer_pages {pages} must be a power of two up to {MAX_RING_PAGES}"
        ));
    }
    c.ring_buffer_pages = pages;
    if c.max_enqueued_footprint_kb == 0 {
        c.max_enqueued_footprint_kb = DEFAULT_FOOTPRINT_KB;
    }
    c.max_enqueued_footprint_kb = c.max_enqueued_footprint_kb.clamp(64, 256 * 1024);
    Ok(c)
}

/// Pages of a ring the config leaves unsized: upstream's 256, or, when
/// samples copy the user stack (every record carries the whole copy,
/// however shallow the stack), room for a read period plus
/// [`RING_GAP_MS`] of samples at the timebase's frequency (1 kHz when it
/// counts by period), up to [`MAX_RING_PAGES`].
fn default_ring_pages(c: &PerfConfig) -> usize {
    if !(c.callstacks && c.unwind.copies_stack()) {
        return DEFAULT_RING_PAGES;
    }
    let hz = match c.interval {
        Interval::Frequency(f) => f,
        Interval::Period(_) => 1000,
    };
    // No overflow: hz is at most 100,000 and the period a minute.
    let record = STACK_SAMPLE_BYTES as u64 + 512;
    let ms = c.read_period_ms as u64 + RING_GAP_MS;
    let pages = (hz * record * ms / 1000 / 4096) as usize;
    pages
        .min(MAX_RING_PAGES)
        .next_power_of_two()
        .max(DEFAULT_RING_PAGES)
}

/// `(type, config)` of a PerfEvents.Counter, with its name for errors.
pub fn counter(c: u32) -> Option<(u32, u64, &'static str)> {
    use super::sys::{TYPE_HARDWARE as H, TYPE_SOFTWARE as S};
    Some(match c {
        1 => (S, 0, "cpu-clock"),
        2 => (S, 2, "page-faults"),
        3 => (S, 1, "task-clock"),
        4 => (S, 3, "context-switches"),
        5 => (S, 4, "cpu-migrations"),
        6 => (S, 5, "minor-faults"),
        7 => (S, 6, "major-faults"),
        8 => (S, 7, "alignment-faults"),
        9 => (S, 8, "emulation-faults"),
        20 => (S, 9, "dummy"),
        10 => (H, 0, "cpu-cycles"),
        11 => (H, 1, "instructions"),
        12 => (H, 2, "cache-references"),
        13 => (H, 3, "cache-misses"),
        14 => (H, 4, "branch-instructions"),
        15 => (H, 5, "branch-misses"),
        16 => (H, 6, "bus-cycles"),
        17 => (H, 7, "stalled-cycles-frontend"),
        18 => (H, 8, "stalled-cycles-backend"),
        19 => (H, 9, "ref-cycles"),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protozero::{begin_nested, end_nested, put_str, put_varint, VecStream};

    fn cfg(f: impl FnOnce(&mut VecStream)) -> Vec<u8> {
        let mut s = VecStream::new();
        f(&mut s);
        s.into_bytes()
    }

    #[test]
    fn empty_config_is_upstreams_default() {
        let c = parse(&[]).unwrap();
        assert_eq!(c.event, Event::Counter(1));
        assert_eq!(c.interval, Interval::Frequency(10));
        assert!(c.callstacks && c.unwind == UnwindMode::Dwarf && !c.kernel_frames);
        assert_eq!(c.ring_buffer_pages, 256);
        assert_eq!(c.clock, MONOTONIC_RAW);
    }

    #[test]
    fn user_frames_default_to_dwarf_and_follow_upstreams_modes() {
        let mode = |v: Option<u64>| {
            let b = cfg(|s| {
                let tb = begin_nested(s, 15);
                put_varint(s, 2, 100);
                end_nested(s, tb);
                let cs = begin_nested(s, 16);
                if let Some(v) = v {
                    put_varint(s, 3, v);
                }
                end_nested(s, cs);
            });
            parse(&b).map(|c| c.unwind)
        };
        assert_eq!(mode(None), Ok(UnwindMode::Dwarf));
        assert_eq!(mode(Some(0)), Ok(UnwindMode::Dwarf));
        assert_eq!(mode(Some(1)), Ok(UnwindMode::Skip));
        assert_eq!(mode(Some(2)), Ok(UnwindMode::Dwarf));
        assert_eq!(mode(Some(3)), Ok(UnwindMode::FramePointer));
        assert_eq!(mode(Some(4)), Ok(UnwindMode::KernelFramePointer));
        assert!(mode(Some(9)).is_err());
        // Without callstack_sampling (and a timebase): counters only.
        let b = cfg(|s| {
            let tb = begin_nested(s, 15);
            put_varint(s, 2, 100);
            end_nested(s, tb);
        });
        assert_eq!(parse(&b).unwrap().unwind, UnwindMode::Skip);
    }

    /// Unset ring_buffer_pages: stack copies size the ring for a read
    /// period and a gap at the timebase's rate; other modes keep 256.
    #[test]
    fn rings_of_stack_copies_are_sized_for_the_rate() {
        let pages = |hz: u64, mode: u64, period_ms: Option<u64>, pages: Option<u64>| {
            let b = cfg(|s| {
                let tb = begin_nested(s, 15);
                put_varint(s, 2, hz);
                end_nested(s, tb);
                let cs = begin_nested(s, 16);
                put_varint(s, 3, mode);
                end_nested(s, cs);
                if let Some(ms) = period_ms {
                    put_varint(s, 8, ms);
                }
                if let Some(p) = pages {
                    put_varint(s, 3, p);
                }
            });
            parse(&b).unwrap().ring_buffer_pages
        };
        // 1 kHz, 20 ms reads: 270 ms of 65.8 KB records is 17 MiB: capped.
        assert_eq!(pages(1000, 2, Some(20), None), MAX_RING_PAGES);
        // 100 Hz, 100 ms reads: 350 ms is 2.3 MB, 1024 pages.
        assert_eq!(pages(100, 2, None, None), 1024);
        assert_eq!(pages(100, 3, None, None), 1024);
        assert_eq!(pages(10, 2, None, None), DEFAULT_RING_PAGES);
        // No stack copy, or sized by the config: as asked.
        assert_eq!(pages(1000, 4, Some(20), None), DEFAULT_RING_PAGES);
        assert_eq!(pages(1000, 1, Some(20), None), DEFAULT_RING_PAGES);
        assert_eq!(pages(1000, 2, Some(20), Some(64)), 64);
    }

    #[test]
    fn timebase_and_callstack_sampling() {
        let b = cfg(|s| {
            let tb = begin_nested(s, 15);
            put_varint(s, 2, 1000);
            put_varint(s, 4, 3);
            end_nested(s, tb);
            let cs = begin_nested(s, 16);
            let sc = begin_nested(s, 1);
            put_str(s, 2, "hot*");
            put_varint(s, 3, 42);
            put_varint(s, 5, 2);
            end_nested(s, sc);
            put_varint(s, 2, 1);
            put_varint(s, 3, 1);
            end_nested(s, cs);
            put_varint(s, 3, 8);
            put_varint(s, FIELD_TRACEBOX_FUNCTION_NAMES, 0);
        });
        let c = parse(&b).unwrap();
        assert_eq!(c.event, Event::Counter(3));
        assert_eq!(c.interval, Interval::Frequency(1000));
        assert!(
            c.callstacks && c.kernel_frames && c.unwind == UnwindMode::Skip && !c.function_names
        );
        assert_eq!(c.scope.target_cmdlines, vec!["hot*".to_string()]);
        assert_eq!(c.scope.exclude_pids, vec![42]);
        assert_eq!(c.scope.additional_cmdline_count, 2);
        assert_eq!(c.ring_buffer_pages, 8);
    }

    /// Followers number their event fields unlike the Timebase.
    #[test]
    fn followers_and_the_memory_guardrail() {
        let b = cfg(|s| {
            for (n, v) in [(1, 3), (1, 4)] {
                let f = begin_nested(s, 19);
                put_varint(s, n, v);
                end_nested(s, f);
            }
            let f = begin_nested(s, 19);
            let tp = begin_nested(s, 2);
            put_str(s, 1, "sched:sched_switch");
            end_nested(s, tp);
            end_nested(s, f);
            put_varint(s, 13, 2048);
        });
        let c = parse(&b).unwrap();
        assert_eq!(c.max_daemon_memory_kb, 2048);
        let events: Vec<&Event> = c.followers.iter().map(|f| &f.event).collect();
        assert_eq!(events[..2], [&Event::Counter(3), &Event::Counter(4)]);
        assert!(
            matches!(events[2], Event::Tracepoint { name, .. } if name == "sched:sched_switch")
        );
        let empty = cfg(|s| {
            let f = begin_nested(s, 19);
            end_nested(s, f);
        });
        assert!(parse(&empty).is_err());
    }

    #[test]
    fn clock_modifiers_pmu_and_open_failures() {
        let b = cfg(|s| {
            let tb = begin_nested(s, 15);
            put_varint(s, 1, 5000);
            put_varint(s, 11, 2);
            put_varint(s, 12, 1);
            let raw = begin_nested(s, 5);
            put_varint(s, 2, 0x11);
            put_str(s, 5, "cpu");
            end_nested(s, raw);
            end_nested(s, tb);
            put_varint(s, 21, 1);
        });
        let c = parse(&b).unwrap();
        assert_eq!(c.interval, Interval::Period(5000));
        assert_eq!(c.clock.clockid, 1, "CLOCK_MONOTONIC");
        assert_eq!(c.clock.trace_clock, 3, "BUILTIN_CLOCK_MONOTONIC");
        assert_eq!(c.modifiers, vec![1]);
        assert!(matches!(&c.event, Event::Raw { pmu, config: 0x11, .. } if pmu == "cpu"));
        assert!(c.ignore_open_failure);
        let both = cfg(|s| {
            let tb = begin_nested(s, 15);
            let raw = begin_nested(s, 5);
            put_varint(s, 1, 4);
            put_str(s, 5, "cpu");
            end_nested(s, raw);
            end_nested(s, tb);
        });
        assert!(parse(&both).unwrap_err().contains("pmu_name"));
        assert!(parse(&cfg(|s| put_str(s, 22, "41d05")))
            .unwrap_err()
            .contains("cpuid"));
    }

    #[test]
    fn bad_values_are_errors() {
        assert!(parse(&cfg(|s| put_varint(s, 3, 3))).is_err());
        let future = cfg(|s| {
            let cs = begin_nested(s, 16);
            put_varint(s, 3, 5);
            end_nested(s, cs);
        });
        assert!(parse(&future).unwrap_err().contains("UnwindMode"));
        assert!(parse(&[0x0a, 0x05]).is_err());
    }
}
