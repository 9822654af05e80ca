//! `linux.ftrace` sessions sharing the kernel's ftrace buffers (FACTS g.4).
//!
//! One [`KInstance`] per tracefs instance in use (the root is `""`), shared
//! by every data source that names it: the first one resets it, picks the
//! clock and buffer size; each one enables the events it needs (reference
//! counted, so stopping one session disables only what nobody else uses);
//! tracing is on while any of them is started; the last one restores the
//! instance (and removes it if we created it). Pages are read once per
//! instance and parsed once per data source with that source's own event
//! filter, so each session sees only its own events.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::rc::{Rc, Weak};
use std::time::Duration;

use super::atrace_runner::{self, AtraceRunner};
use super::crash_state::{self, Touched};
use super::drain_pace::DrainPace;
use super::instance::KInstance;
use super::syscall_filter;
use crate::pb::protos::FtraceConfig;
use crate::protozero::{put_varint, VecStream};
use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::ftrace::cpu_reader::{FtraceReader, ReaderMode};
use crate::traced_probes::ftrace::parse::atrace::{self, AtraceRequest};
use crate::traced_probes::ftrace::parse::bundle::{
    write_pages, BundleContext, CpuState, EventFilter, PacketWriter,
};
use crate::traced_probes::ftrace::parse::ksyms::KernelSymbols;
use crate::traced_probes::ftrace::parse::print_filter::{PrintFilter, PrintMatch, PrintRule};
use crate::traced_probes::ftrace::parse::stats::{self, Phase, StatsSnapshot};
use crate::traced_probes::ftrace::parse::syscalls::SyscallWant;
use crate::traced_probes::ftrace::parse::translate::KernelAddrs;
use crate::traced_probes::ftrace::{CpuStats, Tracefs};
use crate::tracing::core::trace_writer::TraceWriter;

/// Upstream's default drain period and its valid range.
const DEFAULT_DRAIN_MS: u32 = 100;
const MAX_DRAIN_MS: u32 = 60_000;
/// How long a flush waits (once per source) for its atrace setup result.
const ATRACE_FLUSH_WAIT: Duration = Duration::from_secs(1);

/// One `linux.ftrace` data source instance.
struct Source {
    key: String,
    writer: TraceWriter,
    filter: EventFilter,
    compact: bool,
    events: Vec<(String, String)>,
    cpus: Vec<CpuState>,
    started: bool,
    drain_ms: u32,
    session: u64,
    stats_before: Vec<CpuStats>,
    unknown_events: Vec<String>,
    failed_events: Vec<String>,
    preserve: bool,
    pids: Vec<i32>,
    /// Kernel-lost events already reported in the log.
    lost_reported: u64,
    /// `symbolize_ksyms`: loaded at start.
    want_ksyms: bool,
    ksyms: Option<Rc<KernelSymbols>>,
    /// Kernel addresses interned on this source's sequence (all cpus).
    kernel: KernelAddrs,
    /// What it wants of raw_syscalls (`None`: not enabled).
    syscalls: Option<SyscallWant>,
}

/// Bundles are built in memory, then copied into a TraceWriter packet in
/// one piece ([`PacketWriter::write_packet`]).
struct WriterPackets<'a> {
    writer: &'a mut TraceWriter,
    buf: VecStream,
}

impl PacketWriter for WriterPackets<'_> {
    type Stream = VecStream;
    fn new_packet(&mut self) {
        self.buf.clear();
    }
    fn stream(&mut self) -> &mut VecStream {
        &mut self.buf
    }
    fn finish_packet(&mut self) {
        self.writer.write_packet(self.buf.as_bytes());
        self.buf.clear();
    }
    fn write_packet(&mut self, bytes: &[u8]) {
        self.writer.write_packet(bytes);
    }
}

/// All ftrace state of the producer.
pub struct FtraceMux {
    root: Option<Tracefs>,
    instances: BTreeMap<String, KInstance>,
    sources: BTreeMap<u64, Source>,
    state_file: PathBuf,
    /// kallsyms, shared by the sources that symbolize while any holds it.
    ksyms: Weak<KernelSymbols>,
    pace: DrainPace,
    /// When the last periodic drain ran (for the drain pace).
    last_tick: Option<std::time::Instant>,
    /// Android's atrace (when its binary exists).
    atrace: AtraceRunner,
}

impl std::fmt::Debug for FtraceMux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FtraceMux")
            .field("instances", &self.instances.keys().collect::<Vec<_>>())
            .field("sources", &self.sources.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl FtraceMux {
    pub fn new(state_file: PathBuf) -> FtraceMux {
        FtraceMux {
            root: None,
            instances: BTreeMap::new(),
            sources: BTreeMap::new(),
            state_file,
            ksyms: Weak::new(),
            pace: DrainPace::default(),
            last_tick: None,
            atrace: AtraceRunner::new(atrace_runner::configured_path()),
        }
    }

    fn root(&mut self) -> Result<Tracefs, String> {
        if self.root.is_none() {
            self.root = Some(Tracefs::discover().map_err(|e| format!("no tracefs: {e}"))?);
        }
        Ok(self.root.clone().expect("set above"))
    }

    fn store_marker(&self) {
        let entries: Vec<Touched> = self
            .instances
            .iter()
            .map(|(k, i)| {
                if k.is_empty() {
                    Touched::Root
                } else {
                    Touched::Instance {
                        name: k.clone(),
                        created: i.created,
                    }
                }
            })
            .collect();
        if let Err(e) = crash_state::store(&self.state_file, &entries) {
            crate::log_warn!("cannot write {}: {e}", self.state_file.display());
        }
    }

    /// First user of an instance: open it, record it in the state file,
    /// then take it over.
    fn open_instance(&mut self, key: &str, cfg: &FtraceConfig) -> Result<(), String> {
        if self.instances.contains_key(key) {
            return Ok(());
        }
        let root = self.root()?;
        let inst = KInstance::open(&root, key, cfg)?;
        self.instances.insert(key.to_string(), inst);
        // Recorded before changing anything, so a crash from here on is undone.
        self.store_marker();
        if let Some(inst) = self.instances.get_mut(key) {
            inst.take_over(cfg);
        }
        Ok(())
    }

    /// The (group, name) list a config asks for.
    /// Also returns the atrace categories we do not know.
    fn wanted_events(
        inst: &KInstance,
        cfg: &FtraceConfig,
        android: bool,
    ) -> (Vec<(String, String)>, Vec<String>) {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut push = |g: &str, n: &str| {
            let e = (g.to_string(), n.to_string());
            if !out.contains(&e) {
                out.push(e);
            }
        };
        for ev in &cfg.ftrace_events {
            match ev.split_once('/') {
                Some((g, "*")) => {
                    for n in inst.tracefs.events_in_group(g).unwrap_or_default() {
                        push(g, &n);
                    }
                }
                Some((g, n)) => push(g, n),
                None => {
                    // A bare name: whichever group of the table has it.
                    let groups: Vec<String> = inst
                        .table
                        .events()
                        .filter(|t| t.name == *ev)
                        .map(|t| t.group.clone())
                        .collect();
                    for g in groups {
                        push(&g, ev);
                    }
                }
            }
        }
        let mut unknown_categories = Vec::new();
        if !cfg.atrace_categories.is_empty() || !cfg.atrace_apps.is_empty() {
            // Categories are kernel event sets, and userspace markers
            // (trace_marker) arrive as ftrace/print. Only Android also has
            // an atrace binary to tell (see `setup`).
            static ATRACE_NOTE: std::sync::Once = std::sync::Once::new();
            ATRACE_NOTE.call_once(|| {
                if android {
                    return;
                }
                crate::log_info!(
                    "atrace is Android-only; recording the categories' kernel events and ftrace/print"
                );
            });
            let available = inst.tracefs.all_events().unwrap_or_default();
            let userspace_only = cfg.atrace_userspace_only.unwrap_or(false);
            let (events, unknown) =
                atrace::expand(&cfg.atrace_categories, userspace_only, &available);
            for (g, n) in events {
                push(&g, &n);
            }
            unknown_categories = unknown;
        }
        (out, unknown_categories)
    }

    /// SetupDataSource: takes over the instance if needed and enables the
    /// events; data flows only after [`start`](Self::start).
    pub fn setup(
        &mut self,
        id: u64,
        cfg: &FtraceConfig,
        session: u64,
        writer: TraceWriter,
    ) -> Result<(), String> {
        let key = cfg.instance_name.clone().unwrap_or_default();
        let atrace_req = AtraceRequest {
            categories: cfg.atrace_categories.clone(),
            apps: cfg.atrace_apps.clone(),
            prefer_sdk: cfg.atrace_categories_prefer_sdk.clone(),
        };
        let android = atrace_req.wanted() && self.atrace.available();
        if android && !key.is_empty() {
            // As upstream: atrace changes global state, not an instance's.
            return Err(
                "secondary ftrace instances do not support atrace_categories and atrace_apps"
                    .into(),
            );
        }
        self.open_instance(&key, cfg)?;
        let inst = self.instances.get_mut(&key).expect("opened above");
        inst.users += 1;
        let mut filter = EventFilter::default();
        filter.print = cfg.print_filter.as_ref().map(print_filter);
        let mut events = Vec::new();
        let mut failed_events = Vec::new();
        let (mut wanted, mut unknown_events) = Self::wanted_events(inst, cfg, android);
        let syscall_want =
            syscall_filter::setup(inst, cfg, &mut wanted, &mut filter, &mut failed_events);
        syscall_filter::set_kernel_filter(
            inst,
            self.sources
                .values()
                .filter(|s| s.key == key)
                .filter_map(|s| s.syscalls.as_ref())
                .chain(syscall_want.as_ref()),
        );
        for (g, n) in wanted {
            let id = match inst.table.event_by_name(&g, &n) {
                Some(t) => Some(t.ftrace_id),
                None if cfg.disable_generic_events.unwrap_or(false) => None,
                None => match inst.tracefs.read_format(&g, &n) {
                    Ok(text) => inst.table.add_generic(&g, &n, &text).ok(),
                    Err(_) => None,
                },
            };
            let Some(ftrace_id) = id else {
                unknown_events.push(format!("{g}/{n}"));
                continue;
            };
            let refs = inst.event_refs.entry((g.clone(), n.clone())).or_insert(0);
            // ftrace/* events (print...) are always on; they have no switch.
            if *refs == 0 && g != "ftrace" {
                if let Err(e) = inst.tracefs.enable_event(&g, &n) {
                    crate::log_warn!("ftrace: cannot enable {g}/{n}: {e}");
                    failed_events.push(format!("{g}/{n}"));
                    if *refs == 0 {
                        inst.event_refs.remove(&(g.clone(), n.clone()));
                    }
                    continue;
                }
            }
            *refs += 1;
            filter.enable(ftrace_id);
            events.push((g, n));
        }
        let switch_wanted = events
            .iter()
            .any(|(g, n)| g == "sched" && n == "sched_switch");
        let compact_opt_out = cfg
            .compact_sched
            .as_ref()
            .and_then(|c| c.enabled)
            .is_some_and(|e| !e);
        let compact = inst.compact.is_some() && switch_wanted && !compact_opt_out;
        let ncpu = inst.tracefs.num_cpus().unwrap_or(1);
        let drain_ms = match cfg.drain_period_ms {
            Some(ms) if (1..=MAX_DRAIN_MS).contains(&ms) => ms,
            _ => DEFAULT_DRAIN_MS,
        };
        self.sources.insert(
            id,
            Source {
                key,
                writer,
                filter,
                compact,
                events,
                cpus: (0..ncpu).map(|_| CpuState::default()).collect(),
                started: false,
                drain_ms,
                session,
                stats_before: Vec::new(),
                unknown_events,
                failed_events,
                preserve: cfg.preserve_ftrace_buffer.unwrap_or(false),
                pids: Vec::new(),
                lost_reported: 0,
                want_ksyms: cfg.symbolize_ksyms.unwrap_or(false),
                ksyms: None,
                kernel: KernelAddrs::default(),
                syscalls: syscall_want,
            },
        );
        if android {
            self.atrace.add(id, atrace_req);
        }
        Ok(())
    }

    /// StartDataSource: tracing on (first started source of the instance)
    /// and the per-cpu readers open.
    pub fn start(&mut self, id: u64) -> Result<(), String> {
        let Some(src) = self.sources.get_mut(&id) else {
            return Err("setup failed".into());
        };
        if src.started {
            return Ok(());
        }
        let inst = self
            .instances
            .get_mut(&src.key)
            .expect("source has an instance");
        if inst.reader.is_none() {
            let drain = Duration::from_millis(src.drain_ms as u64);
            let mode = ReaderMode::from_env();
            if mode == ReaderMode::Read {
                crate::log_info!("ftrace: read() mode forced by the environment");
            }
            let reader = FtraceReader::start(&inst.tracefs, inst.layout.page_size, drain, mode)
                .map_err(|e| format!("cannot read trace_pipe_raw: {e}"))?;
            inst.reader = Some(reader);
        }
        if inst.started == 0 {
            inst.tracefs
                .set_tracing_on(true)
                .map_err(|e| format!("cannot turn tracing on: {e}"))?;
        }
        inst.started += 1;
        src.started = true;
        if src.want_ksyms && src.ksyms.is_none() {
            let k = self.ksyms.upgrade().unwrap_or_else(|| {
                let k = KernelSymbols::load().unwrap_or_else(|e| {
                    crate::log_warn!("ftrace: cannot read /proc/kallsyms: {e}");
                    KernelSymbols::default()
                });
                if k.is_empty() {
                    crate::log_warn!("ftrace: no kernel symbols (kptr_restrict?)");
                }
                Rc::new(k)
            });
            self.ksyms = Rc::downgrade(&k);
            src.ksyms = Some(k);
        }
        src.stats_before = cpu_stats(&inst.tracefs);
        crate::log_debug!("ftrace: source {id} started on {:?}", src.key);
        Ok(())
    }

    /// The drain period: the smallest of the started sources, if any.
    pub fn drain_period(&self) -> Option<Duration> {
        self.sources
            .values()
            .filter(|s| s.started)
            .map(|s| s.drain_ms)
            .min()
            .map(|ms| Duration::from_millis(ms as u64))
    }

    /// Reads every instance with started sources: a periodic drain of at
    /// most `drain_max` pages per cpu, or (`None`) a flush of everything the
    /// kernel holds. Returns the most pages one cpu handed out.
    pub fn read_pass(&mut self, drain_max: Option<usize>) -> usize {
        let mut busiest = 0;
        let sources = &mut self.sources;
        for (key, inst) in self.instances.iter_mut() {
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
                    let ctx = BundleContext {
                        table,
                        filter: &src.filter,
                        compact_sched: if src.compact { *compact } else { None },
                        clock: snapshot,
                        ksyms: src.ksyms.as_deref(),
                    };
                    if cpu >= src.cpus.len() {
                        src.cpus.resize_with(cpu + 1, CpuState::default);
                    }
                    let state = &mut src.cpus[cpu];
                    let mut w = WriterPackets {
                        writer: &mut src.writer,
                        buf: VecStream::new(),
                    };
                    // The sequence is per source, so is the address interning.
                    std::mem::swap(&mut state.metadata.kernel, &mut src.kernel);
                    write_pages(&mut w, cpu as u32, pages, layout, &ctx, state);
                    std::mem::swap(&mut state.metadata.kernel, &mut src.kernel);
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
                Err(e) => crate::log_warn!("ftrace read of {key:?}: {e}"),
            }
        }
        busiest
    }

    /// Periodic tick: one bounded read pass. Returns when to come back
    /// (`None`: no started source).
    pub fn tick(&mut self) -> Option<Duration> {
        let busiest = self.read_pass(Some(self.pace.batch()));
        let now = std::time::Instant::now();
        let since = now - self.last_tick.unwrap_or(now);
        self.last_tick = Some(now);
        Some(self.pace.next(busiest, since, self.drain_period()?))
    }

    /// Pids seen since the last call, per tracing session.
    pub fn take_pids(&mut self) -> Vec<(u64, Vec<i32>)> {
        let mut out = Vec::new();
        for s in self.sources.values_mut() {
            if !s.pids.is_empty() {
                let mut p = std::mem::take(&mut s.pids);
                p.sort_unstable();
                p.dedup();
                out.push((s.session, p));
            }
        }
        out
    }

    /// Flush of `ids`: drains the kernel buffers completely, writes the
    /// start/end ftrace_stats, returns the writers' chunks.
    pub fn flush(&mut self, ids: &[u64]) {
        if !ids.iter().any(|id| self.sources.contains_key(id)) {
            return;
        }
        self.read_pass(None);
        for id in ids {
            let Some(src) = self.sources.get_mut(id) else {
                continue;
            };
            if src.started {
                let inst = &self.instances[&src.key];
                let after = cpu_stats(&inst.tracefs);
                let before = src.stats_before.clone();
                let atrace_errors = self.atrace.errors(*id, ATRACE_FLUSH_WAIT);
                write_stats(src, Phase::StartOfTrace, &before, None);
                write_stats(src, Phase::EndOfTrace, &after, atrace_errors);
                report_kernel_loss(src, &before, &after);
            }
            src.writer.flush();
        }
    }

    /// StopDataSource: flushes the writer and undoes what only this source
    /// needed; the last user of an instance restores it.
    pub fn stop(&mut self, id: u64) {
        let Some(mut src) = self.sources.remove(&id) else {
            return;
        };
        self.atrace.remove(id);
        src.writer.flush();
        let key = src.key.clone();
        let Some(inst) = self.instances.get_mut(&key) else {
            return;
        };
        for e in &src.events {
            if let Some(n) = inst.event_refs.get_mut(e) {
                *n -= 1;
                if *n == 0 {
                    inst.event_refs.remove(e);
                    if e.0 != "ftrace" {
                        let _ = inst.tracefs.disable_event(&e.0, &e.1);
                    }
                }
            }
        }
        if src.started {
            inst.started -= 1;
            if inst.started == 0 {
                let _ = inst.tracefs.set_tracing_on(false);
            }
        }
        syscall_filter::set_kernel_filter(
            inst,
            self.sources
                .values()
                .filter(|s| s.key == key)
                .filter_map(|s| s.syscalls.as_ref()),
        );
        inst.users -= 1;
        if inst.users == 0 {
            let inst = self.instances.remove(&key).expect("present");
            if let Some(root) = &self.root {
                inst.release(root, &key);
            }
            self.store_marker();
        }
    }
}

/// The config's print filter. A rule with neither match is an empty
/// prefix (matches everything), as upstream reads it.
fn print_filter(pf: &crate::pb::protos::mod_FtraceConfig::PrintFilter) -> PrintFilter {
    use crate::pb::protos::mod_FtraceConfig::mod_PrintFilter::mod_Rule::OneOfmatch_pb as M;
    let rules = pf
        .rules
        .iter()
        .map(|r| PrintRule {
            allow: r.allow.unwrap_or(false),
            matcher: match &r.match_pb {
                M::atrace_msg(a) => PrintMatch::Atrace {
                    kind: a.type_pb.clone().unwrap_or_default().into_bytes(),
                    prefix: a.prefix.clone().unwrap_or_default().into_bytes(),
                },
                M::prefix(p) => PrintMatch::Prefix(p.clone().into_bytes()),
                M::None => PrintMatch::Prefix(Vec::new()),
            },
        })
        .collect();
    PrintFilter { rules }
}

fn cpu_stats(t: &Tracefs) -> Vec<CpuStats> {
    (0..t.num_cpus().unwrap_or(0))
        .map(|c| t.cpu_stats(c).unwrap_or_default())
        .collect()
}

/// Says in the log (stderr: the terminal of an autostarted run) when the
/// kernel lost events since the source started, once per increase. The
/// counts per cpu are in the trace's ftrace_stats.
fn report_kernel_loss(src: &mut Source, before: &[CpuStats], after: &[CpuStats]) {
    let lost = stats::kernel_events_lost(before, after);
    if lost > src.lost_reported {
        crate::log_warn!(
            "ftrace: the kernel lost {lost} events (per-cpu buffers overran before they \
             were read); a larger buffer_size_kb keeps them"
        );
        src.lost_reported = lost;
    }
}

/// One `ftrace_stats` packet; errors and unknown events only at the end.
fn write_stats(
    src: &mut Source,
    phase: Phase,
    cpu_stats: &[CpuStats],
    atrace_errors: Option<&str>,
) {
    let end = phase == Phase::EndOfTrace;
    let parse_errors: Vec<_> = src
        .cpus
        .iter()
        .flat_map(|c| c.parse_errors.iter().copied())
        .collect();
    let none: &[String] = &[];
    let snapshot = StatsSnapshot {
        cpu_stats,
        unknown_ftrace_events: if end { &src.unknown_events } else { none },
        failed_ftrace_events: if end { &src.failed_events } else { none },
        atrace_errors,
        preserve_ftrace_buffer: src.preserve,
        parse_errors: if end { &parse_errors } else { &[] },
        kernel_symbols: src
            .ksyms
            .as_ref()
            .map(|k| (k.len() as u32, (k.mem_bytes() / 1024) as u32)),
        ..Default::default()
    };
    let mut s = VecStream::new();
    put_varint(&mut s, 8, boot_time_ns());
    stats::write_ftrace_stats(&mut s, phase, &snapshot);
    src.writer.write_packet(s.as_bytes());
}
