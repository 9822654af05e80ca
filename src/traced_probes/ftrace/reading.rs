//! Reading and pacing: one read pass over every instance with started
//! sources (pages read once per instance, parsed once per source with its
//! own filter), and the adaptive drain period between passes.

use crate::mem::small_map::SmallMap;
use std::time::{Duration, Instant};

use super::drain_pace::DrainPace;
use super::instance::KInstance;
use super::instances::Instances;
use super::source::Source;
use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::ftrace::cpu_reader::{DataNotify, FtraceReader, ReaderMode};
use crate::traced_probes::ftrace::parse::bundle::{write_pages, BundleContext, PacketWriter};
use crate::traced_probes::ftrace::parse::stats;
use crate::tracing::core::trace_writer::TraceWriter;

/// Bundles stream into a TraceWriter packet, a few KiB at a time, as the
/// encoder fills them ([`write_pages`]).
struct WriterPackets<'a> {
    writer: &'a mut TraceWriter,
}

impl PacketWriter for WriterPackets<'_> {
    type Stream = TraceWriter;
    fn new_packet(&mut self) {
        self.writer.begin_packet();
    }
    fn stream(&mut self) -> &mut TraceWriter {
        self.writer
    }
    fn finish_packet(&mut self) {
        self.writer.end_packet();
    }
}

#[derive(Debug, Default)]
pub struct Reading {
    pace: DrainPace,
    /// When the last periodic drain ran.
    last_tick: Option<Instant>,
}

/// Main's drain timer while idle when no worker takes quiet waits (only a
/// safety net then: workers wake main when they stage pages).
const MAIN_IDLE_WAIT: Duration = Duration::from_secs(10);

/// While idle, main wakes this long after the workers' quiet end (every
/// [`QUIET_WAIT`](super::cpu_reader::QUIET_WAIT), on a grid they share)
/// and reads what they staged there; a worker that stages later than
/// main's read wakes it. Within issue 33's bound: an event is committed
/// at most a quiet wait plus this after it was written.
const QUIET_END_SLACK: Duration = Duration::from_millis(20);

/// A worker's wakeup drains this much later, so pages the other workers
/// stage meanwhile (their quiet waits end together) come in the same pass
/// rather than in a second one that would look like a burst to the pace.
pub const NOTIFY_COALESCE: Duration = Duration::from_millis(10);

/// Workers may sleep long while quiet only if the fill level that wakes
/// them leaves room: at a high `drain_buffer_percent` the periodic splice
/// is what keeps a fast writer from overrunning the buffer.
const MAX_QUIET_BUFFER_PERCENT: u32 = 25;

/// Opens the per-cpu readers of `inst` if not yet open; `notify` wakes
/// main when pages arrive while it sleeps long (used only when the fill
/// level is at most [`MAX_QUIET_BUFFER_PERCENT`]). `quiet`: the source
/// opening them set no drain period of its own, so its workers may take
/// their quiet wait from the start (not only after main's first tick:
/// that cost each worker and main a wakeup a drain period in).
pub fn open_reader(
    inst: &mut KInstance,
    drain_ms: u32,
    quiet: bool,
    notify: Option<DataNotify>,
) -> Result<(), String> {
    if inst.reader.is_some() {
        return Ok(());
    }
    let drain = Duration::from_millis(drain_ms as u64);
    let mode = ReaderMode::from_env();
    if mode == ReaderMode::Read {
        crate::log_info!("ftrace: read() mode forced by the environment");
    }
    let notify = notify.filter(|_| {
        inst.buffer_percent
            .is_some_and(|p| (1..=MAX_QUIET_BUFFER_PERCENT).contains(&p))
    });
    let reader = FtraceReader::start_with_notify(
        &inst.tracefs,
        inst.layout.page_size,
        drain,
        mode,
        notify,
        quiet,
    )
    .map_err(|e| format!("cannot read trace_pipe_raw: {e}"))?;
    inst.reader = Some(reader);
    Ok(())
}

/// The drain period: the smallest of the started sources, if any.
pub fn drain_period(sources: &SmallMap<u64, Source>) -> Option<Duration> {
    sources
        .values()
        .filter(|s| s.started)
        .map(|s| s.drain_ms)
        .min()
        .map(|ms| Duration::from_millis(ms as u64))
}

/// Reads every instance with started sources: a periodic drain of at most
/// `drain_max` pages per cpu, or (`None`) a flush of everything the kernel
/// holds. Returns the most pages one cpu handed out.
pub fn read_pass(
    instances: &mut Instances,
    sources: &mut SmallMap<u64, Source>,
    drain_max: Option<usize>,
) -> usize {
    let mut busiest = 0;
    for (key, inst) in instances.iter_mut() {
        if inst.started == 0 {
            continue;
        }
        let KInstance {
            reader,
            table,
            layout,
            compact,
            tracefs,
            clock,
            ..
        } = inst;
        let Some(reader) = reader.as_mut() else {
            continue;
        };
        let snapshot = stats::ftrace_clock(clock).and_then(|_| {
            let now = tracefs.cpu_stats(0).map(|s| s.now_ts).unwrap_or(0.0);
            stats::clock_snapshot(clock, now, boot_time_ns() as i64)
        });
        let mut f = |cpu: usize, pages: &[u8]| {
            for src in sources.values_mut() {
                if !src.started || src.key != *key {
                    continue;
                }
                src.cpu(cpu);
                let ctx = BundleContext {
                    table,
                    filter: &src.filter,
                    compact_sched: if src.compact { *compact } else { None },
                    sched_switch: compact.map(|c| c.switch),
                    clock: snapshot,
                    ksyms: src.ksyms.as_deref(),
                };
                let state = &mut src.cpus[cpu];
                let mut w = WriterPackets {
                    writer: &mut src.writer,
                };
                write_pages(&mut w, cpu as u32, pages, layout, &ctx, state);
                src.pids.append(&mut state.metadata.pids);
                state.metadata.clear();
            }
        };
        let r = match drain_max {
            Some(max) => reader.drain_up_to(max, &mut f),
            None => reader.flush(&mut f),
        };
        match r {
            Ok(n) => busiest = busiest.max(n),
            Err(e) => crate::log_warn!("ftrace read of {}: {e}", super::ownership::describe(key)),
        }
    }
    // What was read leaves in committed chunks now, not at the next flush:
    // if traced_probes dies, traced has it (start stats included).
    for src in sources.values_mut().filter(|s| s.started) {
        src.writer.commit_current_chunk();
    }
    busiest
}

/// Lets the workers of each started instance sleep long while quiet unless
/// one of its started sources set its own drain period. Returns whether
/// any did (main then keeps that period too).
fn allow_quiet(instances: &Instances, sources: &SmallMap<u64, Source>) -> bool {
    let mut any = false;
    for (key, inst) in instances.iter().filter(|(_, i)| i.started > 0) {
        let explicit = sources
            .values()
            .any(|s| s.started && s.drain_explicit && s.key == *key);
        if let Some(r) = &inst.reader {
            r.allow_quiet(!explicit);
        }
        any |= explicit;
    }
    any
}

/// The earliest quiet end of the started instances' workers.
fn until_quiet_end(instances: &Instances) -> Option<Duration> {
    instances
        .iter()
        .filter(|(_, i)| i.started > 0)
        .filter_map(|(_, i)| i.reader.as_ref()?.until_quiet_end())
        .min()
}

/// Tells the readers of every started instance whether main sleeps long;
/// true if all of them can wake it (else none is left waiting to).
fn set_main_idle(instances: &Instances, idle: bool) -> bool {
    let readers = || {
        instances
            .iter()
            .filter(|(_, i)| i.started > 0)
            .filter_map(|(_, i)| i.reader.as_ref())
    };
    let mut can = idle;
    for r in readers() {
        can &= r.set_main_idle(idle);
    }
    if idle && !can {
        readers().for_each(|r| {
            r.set_main_idle(false);
        });
    }
    can
}

impl Reading {
    /// Periodic tick: one bounded read pass. Returns when to come back
    /// (`None`: no started source): the pace's delay, or
    /// [`MAIN_IDLE_WAIT`] when the pace is quiet and every worker can wake
    /// main when pages come (an idle machine then wakes us rarely; a burst
    /// wakes us at once, and its rate makes the pace busy).
    pub fn tick(
        &mut self,
        instances: &mut Instances,
        sources: &mut SmallMap<u64, Source>,
    ) -> Option<Duration> {
        // Awake now (a worker's notify, or the timer): no notify needed.
        set_main_idle(instances, false);
        let busiest = read_pass(instances, sources, Some(self.pace.batch()));
        let now = Instant::now();
        let since = now - self.last_tick.unwrap_or(now);
        self.last_tick = Some(now);
        let period = drain_period(sources)?;
        let next = self.pace.next(busiest, since, period);
        let explicit = allow_quiet(instances, sources);
        // Pages staged from here on wake main.
        if next == period && !explicit && set_main_idle(instances, true) {
            return Some(
                until_quiet_end(instances).map_or(MAIN_IDLE_WAIT, |d| d + QUIET_END_SLACK),
            );
        }
        Some(next)
    }
}
