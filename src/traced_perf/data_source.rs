//! One `linux.perf` instance: an event per CPU sampling every task, its
//! ring read on a timer, samples turned into PerfSample packets with
//! interned callstacks.

use std::time::{Duration, Instant};

use super::config::{self, Event, Interval, PerfConfig, SampleClock, UnwindMode};
use super::events::{attr_for, event_attr, open_ring, CpuRing};
use super::intern::{Interner, MappingKey};
use super::records::{self, Layout, Record, Sample};
use super::resolver::{self, Resolver, TablesLoading};
use super::scope::ScopeFilter;
use super::sys;
use super::unwind::{self, StackCopy, UnwindError};
use super::unwind_queue::UnwindQueue;
use crate::protozero::{begin_nested, end_nested, put_bytes, put_varint};
use crate::tracing::core::trace_writer::TraceWriter;

const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
/// TracePacket.perf_sample.
const PERF_SAMPLE: u32 = 66;
/// The mapping kernel frames hang off, as upstream names it.
const KERNEL_MAPPING: &str = "/kernel";
/// Cached process maps are dropped this often (exec and pid reuse; a miss
/// re-reads them at once anyway).
const MAPS_REFRESH: Duration = Duration::from_secs(1);
/// How often the daemon's memory is held against max_daemon_memory_kb
/// (upstream's period).
const MEMORY_CHECK: Duration = Duration::from_secs(1);
/// PerfSample.producer_event.source_stop_reason PROFILER_STOP_GUARDRAIL.
const PRODUCER_EVENT: u32 = 19;
const STOP_GUARDRAIL: u64 = 1;
/// PerfSample.unwind_error and .sample_skipped_reason with its
/// PROFILER_SKIP_UNWIND_STAGE / PROFILER_SKIP_UNWIND_ENQUEUE.
const UNWIND_ERROR: u32 = 16;
const SAMPLE_SKIPPED_REASON: u32 = 18;
const SKIP_UNWIND_STAGE: u64 = 2;
const SKIP_UNWIND_ENQUEUE: u64 = 3;

/// Counters of one instance, for logs and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PerfStats {
    pub samples: u64,
    pub samples_out_of_scope: u64,
    pub lost: u64,
    pub throttles: u64,
    pub malformed: u64,
    /// Read passes that stopped at the work budget with data left.
    pub budget_hits: u64,
    /// The daemon's memory (kB) when it went over max_daemon_memory_kb
    /// and the source stopped.
    pub stopped_at_kb: u64,
    /// CPUs left out because their event could not be opened
    /// (ignore_open_failure).
    pub cpus_skipped: u64,
    /// Samples still in the rings when the stop's time ran out, written
    /// as lost (kernel_records_lost) so the end line names them.
    pub unread_at_stop: u64,
    /// Records the kernel lost that no LOST record reported (the ring was
    /// still full when sampling stopped): its PERF_FORMAT_LOST count, read
    /// at stop, written as lost (kernel_records_lost).
    pub lost_unreported: u64,
    /// CPU time of this thread in read passes: reading the rings, scope
    /// checks, resolving frames, interning and writing packets.
    pub read_cpu_ns: u64,
    /// Samples whose user stack was unwound in the daemon.
    pub unwound: u64,
    /// Of those, stacks cut short (written with the frames found and
    /// PerfSample.unwind_error).
    pub unwind_errors: u64,
    /// Of those, where the kernel's stack copy was full (the stack went on
    /// past the copy).
    pub stack_copies_cut: u64,
    /// Samples not queued for unwinding (queue full or over
    /// max_enqueued_footprint_kb): PROFILER_SKIP_UNWIND_ENQUEUE.
    pub skipped_enqueue: u64,
    /// Samples still queued when the stop's time ran out (or the memory
    /// guardrail stopped the source): PROFILER_SKIP_UNWIND_STAGE.
    pub skipped_unwind: u64,
    /// Read passes whose unwinding time ran out with samples queued.
    pub unwind_budget_hits: u64,
}

impl PerfStats {
    /// The cost of one recorded sample, from ring to packet (ns of CPU).
    pub fn cpu_ns_per_sample(&self) -> u64 {
        self.read_cpu_ns / self.samples.max(1)
    }
}

/// This thread's CPU time (ns).
fn thread_cpu_ns() -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

/// Now on `clock` (ns), for packets that carry no kernel timestamp.
fn now_on(clock: SampleClock) -> u64 {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::from_raw(clock.clockid)).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

pub struct PerfSource {
    cfg: PerfConfig,
    writer: TraceWriter,
    rings: Vec<CpuRing>,
    interner: Interner,
    resolver: Resolver,
    scope: ScopeFilter,
    /// The next packet must say SEQ_INCREMENTAL_STATE_CLEARED.
    cleared: bool,
    sample: Sample,
    scratch: Vec<u8>,
    frames: Vec<u64>,
    /// Samples waiting for their user stack to be unwound.
    queue: UnwindQueue,
    /// Spare samples (their buffers reused).
    spare: Vec<Sample>,
    since_maps_refresh: Duration,
    since_memory_check: Duration,
    /// How long the last read at stop may take (half the service's
    /// stop_timeout_ms, which waits for it).
    stop_budget: Duration,
    /// Set while that read runs.
    deadline: Option<Instant>,
    /// Until when this pass may unwind (half the read period from its
    /// start, or the stop's deadline).
    unwind_until: Instant,
    pub stats: PerfStats,
}

/// The stop's read budget without a stop_timeout_ms from the service.
const DEFAULT_STOP_BUDGET: Duration = Duration::from_millis(2500);

/// This daemon's anonymous resident memory plus swap (kB), as upstream's
/// guardrail counts it.
fn daemon_memory_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .filter(|l| l.starts_with("RssAnon:") || l.starts_with("VmSwap:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

impl PerfSource {
    /// Opens the events (disabled) and maps their rings. Errors name the
    /// event and what the kernel said.
    /// `stop_timeout_ms`: how long the service waits for the stop (0:
    /// unknown).
    pub fn setup(
        config_untrusted: &[u8],
        writer: TraceWriter,
        stop_timeout_ms: u32,
    ) -> Result<PerfSource, String> {
        let cfg = config::parse(config_untrusted)?;
        let (attr, what) = attr_for(&cfg)?;
        let cpus = if cfg.target_cpus.is_empty() {
            sys::online_cpus()
        } else {
            cfg.target_cpus.clone()
        };
        let filter = match &cfg.event {
            Event::Tracepoint { filter, .. } if !filter.is_empty() => Some(filter.clone()),
            _ => None,
        };
        // Members of a group need the leader's clock (the kernel refuses
        // others) and read format.
        let mut followers = Vec::with_capacity(cfg.followers.len());
        for e in &cfg.followers {
            let (mut a, name) = event_attr(&e.event, &e.modifiers)?;
            a.set_clockid(cfg.clock.clockid);
            a.set_read_format(sys::FORMAT_GROUP);
            followers.push((a, name));
        }
        let mut rings = Vec::with_capacity(cpus.len());
        let mut cpus_skipped = 0;
        for cpu in cpus {
            match open_ring(&cfg, &attr, &what, filter.as_deref(), &followers, cpu) {
                Ok(r) => rings.push(r),
                Err(e) if cfg.ignore_open_failure => {
                    crate::log_warn!("linux.perf: cpu {cpu} left out (ignore_open_failure): {e}");
                    cpus_skipped += 1;
                }
                Err(e) => return Err(format!("cpu {cpu}: {e}")),
            }
        }
        if rings.is_empty() {
            return Err("no CPU could be opened (ignore_open_failure left none)".into());
        }
        let resolver = Resolver::new(cfg.function_names, cfg.function_names && cfg.kernel_frames);
        let copies_stack = cfg.callstacks && cfg.unwind.copies_stack();
        if !rings[0].counts_lost {
            crate::log_warn!(
                "linux.perf: this kernel has no PERF_FORMAT_LOST (Linux 6.0+): records lost after \
                 the last one a ring reported cannot be counted"
            );
        }
        let layout = Layout {
            read_lost: rings[0].counts_lost,
            callchain: cfg.callstacks
                && (cfg.kernel_frames || cfg.unwind == UnwindMode::KernelFramePointer),
            user_regs: if copies_stack { unwind::REGS_COUNT } else { 0 },
            user_stack: copies_stack,
        };
        if copies_stack && cfg.unwind == UnwindMode::Dwarf && !super::dwarf::HAS_DWARF {
            crate::log_info!("linux.perf: this CPU has no .eh_frame unwinding; UNWIND_DWARF walks frame pointers");
        }
        let queue = UnwindQueue::new((cfg.max_enqueued_footprint_kb * 1024) as usize);
        Ok(PerfSource {
            scope: ScopeFilter::new(cfg.scope.clone(), now_on(cfg.clock)),
            cfg,
            writer,
            rings,
            interner: Interner::default(),
            resolver,
            cleared: true,
            sample: Sample {
                group: true,
                layout,
                ..Default::default()
            },
            queue,
            spare: Vec::new(),
            scratch: Vec::new(),
            frames: Vec::new(),
            since_maps_refresh: Duration::ZERO,
            since_memory_check: Duration::ZERO,
            stop_budget: match stop_timeout_ms {
                0 => DEFAULT_STOP_BUDGET,
                ms => Duration::from_millis(ms as u64 / 2),
            },
            deadline: None,
            unwind_until: Instant::now(),
            stats: PerfStats {
                cpus_skipped,
                ..Default::default()
            },
        })
    }

    pub fn read_period(&self) -> Duration {
        Duration::from_millis(self.cfg.read_period_ms as u64)
    }

    pub fn start(&mut self) -> Option<Duration> {
        for r in &self.rings {
            if let Err(e) = sys::set_enabled(&r.fd, true) {
                crate::log_error!("enabling perf event on cpu {}: {e}", r.cpu);
            }
        }
        Some(self.read_period())
    }

    pub fn tick(&mut self) -> Option<Duration> {
        // Half the period at most: the next read comes on time.
        self.unwind_until = Instant::now() + self.read_period() / 2;
        self.resolver.begin_pass(self.unwind_until);
        self.read_all();
        self.unwind_queued(self.unwind_until);
        self.since_maps_refresh += self.read_period();
        if self.since_maps_refresh >= MAPS_REFRESH {
            self.since_maps_refresh = Duration::ZERO;
            self.resolver.forget_processes();
        }
        self.since_memory_check += self.read_period();
        if self.cfg.max_daemon_memory_kb > 0 && self.since_memory_check >= MEMORY_CHECK {
            self.since_memory_check = Duration::ZERO;
            let kb = daemon_memory_kb();
            if kb > self.cfg.max_daemon_memory_kb {
                self.stop_over_memory(kb);
                return None;
            }
        }
        Some(self.read_period())
    }

    /// The guardrail: the daemon is over max_daemon_memory_kb. Sampling
    /// stops for good (the rings and caches go), and the trace says why
    /// in a PerfSample.producer_event, as upstream's traced_perf does.
    fn stop_over_memory(&mut self, kb: u64) {
        crate::log_error!(
            "linux.perf: traced_perf uses {kb} kB, over max_daemon_memory_kb {}; stopping the data source",
            self.cfg.max_daemon_memory_kb
        );
        self.stats.stopped_at_kb = kb;
        self.skip_queued();
        for r in &self.rings {
            let _ = sys::set_enabled(&r.fd, false);
        }
        self.count_unread("the memory guardrail stopped sampling");
        self.rings.clear();
        self.interner.clear();
        self.resolver.forget_processes();
        let mut p = self.writer.new_packet();
        put_varint(&mut p, 8, now_on(self.cfg.clock));
        put_varint(&mut p, 58, self.cfg.clock.trace_clock);
        let s = begin_nested(&mut p, PERF_SAMPLE);
        let e = begin_nested(&mut p, PRODUCER_EVENT);
        put_varint(&mut p, 1, STOP_GUARDRAIL);
        end_nested(&mut p, e);
        end_nested(&mut p, s);
        drop(p);
        self.writer.flush();
    }

    /// A flush reads and unwinds for as long as the stop may (half the
    /// service's stop timeout) and leaves the rest in the rings for the next
    /// pass: a full ring decodes for seconds, longer than traced waits for
    /// the flush. The flush just before a stop reads nothing: the stop
    /// reads the rings next, within its own budget, and counts what is left.
    pub fn flush(&mut self, stopping: bool) {
        if !stopping {
            let deadline = Instant::now() + self.stop_budget.min(self.read_period() / 2);
            self.deadline = Some(deadline);
            self.unwind_until = deadline;
            self.resolver.begin_pass(deadline);
            self.read_all();
            self.deadline = None;
            self.unwind_queued(deadline);
        }
        self.writer.flush();
    }

    /// Disables the events and reads what their rings still hold, all of
    /// it (the work budget of a read pass would drop records silently)
    /// while the stop's time lasts; samples left then are written as lost.
    pub fn stop(&mut self) {
        for r in &self.rings {
            let _ = sys::set_enabled(&r.fd, false);
        }
        let deadline = Instant::now() + self.stop_budget;
        self.deadline = Some(deadline);
        self.unwind_until = deadline;
        self.resolver.begin_pass(deadline);
        self.read_passes(usize::MAX);
        self.deadline = None;
        let why = format!("the stop's {} ms ran out", self.stop_budget.as_millis());
        self.count_unread(&why);
        self.unwind_queued(deadline);
        self.skip_queued();
        self.writer.flush();
        let s = &self.stats;
        let mut line = format!(
            "linux.perf: {} samples ({} out of scope), {} lost, {} throttles, {} malformed, \
             {} budget hits, {} unread at stop, {} lost unreported, {} cpus skipped; \
             {} ns CPU per sample (read, scope, resolve, intern, write); \
             {} symbol tables late for their pass ({} frames written unnamed meanwhile)",
            s.samples,
            s.samples_out_of_scope,
            s.lost,
            s.throttles,
            s.malformed,
            s.budget_hits,
            s.unread_at_stop,
            s.lost_unreported,
            s.cpus_skipped,
            s.cpu_ns_per_sample(),
            self.resolver.stats.symbols_late,
            self.resolver.stats.frames_unnamed_loading
        );
        if self.cfg.unwind.copies_stack() {
            let r = self.resolver.stats;
            line.push_str(&format!(
                "; {} unwound, {} unwind errors, {} stack copies cut, {} skipped at enqueue, \
                 {} skipped at unwind, {} unwind budget hits, {} walks past the copy \
                 ({} pages of /proc/PID/mem, {} refused), {} unwind tables read in the \
                 background (their samples waited in the queue)",
                s.unwound,
                s.unwind_errors,
                s.stack_copies_cut,
                s.skipped_enqueue,
                s.skipped_unwind,
                s.unwind_budget_hits,
                r.far_samples,
                r.far_pages,
                r.far_refused,
                r.unwind_tables_background
            ));
        }
        if s.stopped_at_kb > 0 {
            line.push_str(&format!(
                "; stopped at {} kB of daemon memory",
                s.stopped_at_kb
            ));
        }
        crate::log_info!("{line}");
    }

    pub fn clear_incremental_state(&mut self) {
        self.interner.clear();
        self.cleared = true;
    }

    /// Reads every ring, each up to the work budget.
    fn read_all(&mut self) {
        self.read_passes((self.cfg.max_enqueued_footprint_kb * 1024) as usize);
    }

    /// Reads every ring up to `budget` bytes each, counting this thread's
    /// CPU for the cost per sample.
    fn read_passes(&mut self, budget: usize) {
        let t0 = thread_cpu_ns();
        if self.scope.needs_cmdline() {
            // Execs first: a process gone before its samples are read is
            // judged by the name it exec'd, though its exec record may sit
            // in a ring read after them.
            let scope = &mut self.scope;
            for r in &self.rings {
                let ring = &r.ring;
                records::exec_comms_in(ring.data(), ring.tail(), ring.head(), |pid, comm| {
                    scope.note_exec(pid, comm)
                });
            }
        }
        for i in 0..self.rings.len() {
            self.read_ring(i, budget);
        }
        self.stats.read_cpu_ns += thread_cpu_ns().saturating_sub(t0);
    }

    fn read_ring(&mut self, i: usize, budget: usize) {
        let head = self.rings[i].ring.head();
        let mut tail = self.rings[i].ring.tail();
        let mut done = 0usize;
        while tail < head {
            if done >= budget {
                self.stats.budget_hits += 1;
                break;
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            let rec = {
                let data = self.rings[i].ring.data();
                let Some(bytes) = records::next(data, tail, head, &mut self.scratch) else {
                    // Corrupt position: drop what is there.
                    self.stats.malformed += 1;
                    tail = head;
                    break;
                };
                let len = bytes.len();
                tail += len as u64;
                done += len;
                let r = records::parse(bytes, &mut self.sample);
                // Scope first: only kept samples copy their stack.
                let kept = r == Some(Record::Sample) && self.scope.admits(self.sample.pid);
                if kept {
                    self.sample.take_stack(bytes);
                }
                (r, kept)
            };
            match rec {
                (Some(Record::Sample), false) => self.stats.samples_out_of_scope += 1,
                (Some(Record::Sample), true) => self.on_sample(),
                (Some(Record::Lost { lost, time }), _) => {
                    self.rings[i].lost_reported += lost;
                    self.on_lost(self.rings[i].cpu, lost, time)
                }
                (Some(Record::Throttle), _) => self.stats.throttles += 1,
                (Some(Record::Exec { pid, comm }), _) => {
                    self.scope.exec(pid, &comm);
                    self.resolver.forget_process(pid);
                }
                (Some(Record::Other), _) => {}
                (None, _) => self.stats.malformed += 1,
            }
        }
        self.rings[i].ring.set_tail(tail);
    }

    /// Counts the samples (and kernel losses) left in each ring, and the
    /// losses the kernel never wrote a LOST record for, writes them as
    /// lost, and empties the rings. The events must be disabled.
    /// `why`: what ended the reading, for the log.
    fn count_unread(&mut self, why: &str) {
        let members = 1 + self.cfg.followers.len();
        for i in 0..self.rings.len() {
            let head = self.rings[i].ring.head();
            let tail = self.rings[i].ring.tail();
            let (samples, lost) = records::count_unread(self.rings[i].ring.data(), tail, head);
            let n = samples + lost;
            self.rings[i].lost_reported += lost;
            self.rings[i].ring.set_tail(head);
            let unreported = self.rings[i].lost_unreported(members);
            if unreported > 0 {
                let cpu = self.rings[i].cpu;
                crate::log_warn!(
                    "linux.perf: the kernel lost {unreported} more records on cpu {cpu} after the \
                     last LOST record (the ring was still full when sampling stopped); written as lost"
                );
                self.stats.lost_unreported += unreported;
                self.on_lost(cpu, unreported, None);
            }
            if n > 0 {
                let cpu = self.rings[i].cpu;
                crate::log_warn!(
                    "linux.perf: {why} with {n} samples unread on cpu {cpu}; written as lost"
                );
                self.stats.unread_at_stop += n;
                self.on_lost(cpu, n, None);
            }
        }
    }

    fn write_defaults_if_cleared(&mut self) {
        if self.interner.over_budget() {
            self.interner.clear();
            self.interner.resets += 1;
            self.cleared = true;
        }
        if !self.cleared {
            return;
        }
        self.cleared = false;
        let mut p = self.writer.new_packet();
        put_varint(&mut p, 8, now_on(self.cfg.clock));
        put_varint(&mut p, 58, self.cfg.clock.trace_clock);
        put_varint(&mut p, 13, SEQ_INCREMENTAL_STATE_CLEARED);
        let d = begin_nested(&mut p, 59);
        put_varint(&mut p, 58, self.cfg.clock.trace_clock);
        let psd = begin_nested(&mut p, 12);
        if self.cfg.timebase_raw.is_empty() {
            let tb = begin_nested(&mut p, 1);
            if let Interval::Frequency(f) = self.cfg.interval {
                put_varint(&mut p, 2, f);
            }
            put_varint(&mut p, 4, 1);
            end_nested(&mut p, tb);
        } else {
            put_bytes(&mut p, 1, &self.cfg.timebase_raw);
        }
        if let Some((n, chosen)) = self.scope.shard {
            put_varint(&mut p, 2, n as u64);
            put_varint(&mut p, 3, chosen as u64);
        }
        for f in &self.cfg.followers_raw {
            put_bytes(&mut p, 4, f);
        }
        end_nested(&mut p, psd);
        end_nested(&mut p, d);
    }

    fn on_lost(&mut self, cpu: u32, lost: u64, time: Option<u64>) {
        self.stats.lost += lost;
        self.write_defaults_if_cleared();
        let ts = time.unwrap_or_else(|| now_on(self.cfg.clock));
        let mut p = self.writer.new_packet();
        put_varint(&mut p, 8, ts);
        put_varint(&mut p, 58, self.cfg.clock.trace_clock);
        put_varint(&mut p, 13, SEQ_NEEDS_INCREMENTAL_STATE);
        let s = begin_nested(&mut p, PERF_SAMPLE);
        put_varint(&mut p, 1, cpu as u64);
        put_varint(&mut p, 17, lost);
        end_nested(&mut p, s);
    }

    /// A sample of a process in scope.
    fn on_sample(&mut self) {
        self.stats.samples += 1;
        if self.sample.user_regs.is_empty() {
            // Nothing to unwind (no user stack copied, or a kernel thread).
            let s = std::mem::take(&mut self.sample);
            self.emit(&s, None);
            self.sample = s;
            return;
        }
        let bytes = self.sample.stack.len();
        // A full queue is unwound from its oldest while the pass's
        // unwinding time lasts (the rings' read budget still holds), so
        // no CPU's samples are skipped for being read after another's.
        while !self.queue.has_room(bytes)
            && self.queue.has_ready()
            && Instant::now() < self.unwind_until
        {
            self.unwind_one();
        }
        if !self.queue.has_room(bytes) {
            self.stats.skipped_enqueue += 1;
            let s = std::mem::take(&mut self.sample);
            self.emit_skipped(&s, SKIP_UNWIND_ENQUEUE);
            self.sample = s;
            return;
        }
        // The queued sample takes the read buffer; a spare one replaces it.
        let mut next = self.spare.pop().unwrap_or_default();
        next.group = self.sample.group;
        next.layout = self.sample.layout;
        self.queue.push(std::mem::replace(&mut self.sample, next));
    }

    /// Unwinds queued samples until `deadline`, writing each; the rest
    /// wait for the next pass. Samples held for unwind tables the helper
    /// thread reads are retried once tables come in, waited for while the
    /// time lasts (upstream's unwinder defers such samples the same way).
    fn unwind_queued(&mut self, deadline: Instant) {
        let t0 = thread_cpu_ns();
        if self.resolver.take_tables_arrived() {
            self.queue.release_held();
        }
        loop {
            while self.queue.has_ready() {
                if Instant::now() >= deadline {
                    self.stats.unwind_budget_hits += 1;
                    break;
                }
                self.unwind_one();
            }
            if self.queue.has_ready() || !self.queue.has_held() {
                break;
            }
            // Only samples waiting for tables: idle until some arrive.
            if !self.resolver.wait_for_tables(deadline) {
                break;
            }
            self.resolver.take_tables_arrived();
            self.queue.release_held();
        }
        self.stats.read_cpu_ns += thread_cpu_ns().saturating_sub(t0);
    }

    /// Unwinds and writes the oldest queued sample, or holds it while its
    /// process's unwind tables load.
    fn unwind_one(&mut self) {
        let Some(mut s) = self.queue.pop() else {
            return;
        };
        let Ok(err) = self.unwind_user(&mut s) else {
            self.queue.hold(s);
            return;
        };
        self.emit(&s, err);
        if self.spare.len() < 64 {
            self.spare.push(s);
        }
    }

    /// Writes every queued sample as skipped at the unwind stage.
    fn skip_queued(&mut self) {
        self.queue.release_held();
        while let Some(s) = self.queue.pop() {
            self.stats.skipped_unwind += 1;
            self.emit_skipped(&s, SKIP_UNWIND_STAGE);
        }
    }

    /// The user frames of a sample from its registers and stack copy.
    fn unwind_user(&mut self, s: &mut Sample) -> Result<Option<UnwindError>, TablesLoading> {
        let Some(regs) = unwind::user_regs(&s.user_regs) else {
            return Ok(None);
        };
        let stack = StackCopy {
            sp: regs.sp,
            bytes: &s.stack,
        };
        s.user_ips.clear();
        let err = match self.cfg.unwind {
            UnwindMode::Dwarf => self.resolver.unwind(s.pid, regs, stack, &mut s.user_ips)?,
            _ => unwind::frame_pointer_walk(regs, stack, &mut s.user_ips),
        };
        self.stats.unwound += 1;
        if err.is_some() {
            self.stats.unwind_errors += 1;
            if s.stack_cut {
                self.stats.stack_copies_cut += 1;
            }
        }
        Ok(err)
    }

    /// A sample without a callstack, as upstream writes one it skipped.
    fn emit_skipped(&mut self, s: &Sample, reason: u64) {
        self.write_defaults_if_cleared();
        let mut p = self.writer.new_packet();
        put_varint(&mut p, 8, s.time);
        put_varint(&mut p, 13, SEQ_NEEDS_INCREMENTAL_STATE);
        let n = begin_nested(&mut p, PERF_SAMPLE);
        put_varint(&mut p, 1, s.cpu as u64);
        put_varint(&mut p, 2, s.pid as u64);
        put_varint(&mut p, 3, s.tid as u64);
        put_varint(&mut p, 5, s.cpu_mode as u64);
        if let Some((leader, followers)) = s.counts.split_first() {
            put_varint(&mut p, 6, *leader);
            for c in followers {
                put_varint(&mut p, 7, *c);
            }
        }
        put_varint(&mut p, SAMPLE_SKIPPED_REASON, reason);
        end_nested(&mut p, n);
    }

    /// Writes a sample with its interned callstack; an unwind error adds
    /// upstream's synthetic "ERROR ..." frame as the outermost caller.
    fn emit(&mut self, s: &Sample, err: Option<UnwindError>) {
        self.write_defaults_if_cleared();
        let mut frames = std::mem::take(&mut self.frames);
        frames.clear();
        if let Some(e) = err {
            let key = MappingKey {
                start: 0,
                end: 0,
                pgoff: 0,
                load_bias: 0,
                path: "".into(),
            };
            let m = self.interner.mapping(&key, &[]);
            // Frames are keyed by (mapping, pc): a pc per error kind.
            let f = self.interner.frame(m, e as u64, || Some(e.frame_name()));
            frames.push(f);
        }
        let names = self.cfg.function_names;
        // Outermost first: user frames (root .. leaf), then kernel frames.
        for (i, &ip) in s.user_ips.iter().enumerate().rev() {
            // Return addresses point after the call; look up the call.
            let pc = if i == 0 { ip } else { ip.wrapping_sub(1) };
            let f = match self.resolver.user_frame(s.pid, pc) {
                Some(uf) => {
                    let key = MappingKey {
                        start: uf.map.start,
                        end: uf.map.end,
                        pgoff: uf.map.pgoff,
                        load_bias: uf.file.load_bias,
                        path: uf.map.path.clone(),
                    };
                    let m = self.interner.mapping(&key, &uf.file.build_id);
                    let file = &uf.file;
                    if uf.names_pending {
                        self.interner.frame_unnamed_for_now(m, uf.rel_pc)
                    } else {
                        self.interner.frame(m, uf.rel_pc, || {
                            names.then(|| file.symbols.lookup(uf.rel_pc)).flatten()
                        })
                    }
                }
                None => {
                    let key = MappingKey {
                        start: 0,
                        end: 0,
                        pgoff: 0,
                        load_bias: 0,
                        path: "".into(),
                    };
                    let m = self.interner.mapping(&key, &[]);
                    self.interner.frame(m, pc, || None)
                }
            };
            frames.push(f);
        }
        if !s.kernel_ips.is_empty() {
            let key = MappingKey {
                start: 0,
                end: 0,
                pgoff: 0,
                load_bias: 0,
                path: KERNEL_MAPPING.into(),
            };
            let m = self.interner.mapping(&key, &[]);
            // Allocates only for a new frame with a name.
            let mut name = String::new();
            for (i, &ip) in s.kernel_ips.iter().enumerate().rev() {
                let pc = if i == 0 { ip } else { ip.wrapping_sub(1) };
                let resolver = &self.resolver;
                let name = &mut name;
                let f = self
                    .interner
                    .frame(m, pc, move || resolver.kernel_name(pc, name));
                frames.push(f);
            }
        }
        let callstack = (!frames.is_empty()).then(|| self.interner.callstack(&frames));
        self.frames = frames;
        let mut p = self.writer.new_packet();
        put_varint(&mut p, 8, s.time);
        put_varint(&mut p, 13, SEQ_NEEDS_INCREMENTAL_STATE);
        self.interner.write_pending(&mut p);
        let n = begin_nested(&mut p, PERF_SAMPLE);
        put_varint(&mut p, 1, s.cpu as u64);
        put_varint(&mut p, 2, s.pid as u64);
        put_varint(&mut p, 3, s.tid as u64);
        if let Some(c) = callstack {
            put_varint(&mut p, 4, c);
        }
        put_varint(&mut p, 5, s.cpu_mode as u64);
        // The group read: the timebase's running count, then
        // follower_counts in config order (as upstream writes them).
        if let Some((leader, followers)) = s.counts.split_first() {
            put_varint(&mut p, 6, *leader);
            for c in followers {
                put_varint(&mut p, 7, *c);
            }
        }
        if let Some(e) = err {
            put_varint(&mut p, UNWIND_ERROR, e as u64);
        }
        end_nested(&mut p, n);
    }

    pub fn resolver_stats(&self) -> resolver::ResolverStats {
        self.resolver.stats
    }
}
