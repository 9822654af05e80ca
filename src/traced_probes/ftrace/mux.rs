//! `linux.ftrace` sessions sharing the kernel's ftrace buffers (FACTS g.4).
//!
//! The mux ties three parts together, one file each:
//! * [`Instances`]: the tracefs instances in use and their users (the
//!   first one takes an instance over, the last one restores it);
//! * [`event_union`]: the events on per instance, the union over its
//!   sessions, with each session's own filter;
//! * [`reading`]: read passes (pages read once per instance, parsed once
//!   per source) and their pacing.
//!
//! Tracing is on while any source of an instance is started.

use crate::mem::small_map::SmallMap;
use std::path::PathBuf;
use std::rc::{Rc, Weak};
use std::time::Duration;

use super::atrace_runner::{self, AtraceRunner};
use super::cpu_reader::DataNotify;
use super::event_union;
use super::instance::KInstance;
use super::instances::Instances;
use super::reading::{self, Reading};
use super::source::{cpu_stats, print_filter, BufferSizes, Source};
use super::syscall_filter;
use crate::pb::protos::FtraceConfig;
use crate::protozero::{put_varint, VecStream};
use crate::traced_probes::clock::boot_time_ns;
use crate::traced_probes::ftrace::ksyms_load;
use crate::traced_probes::ftrace::parse::atrace::AtraceRequest;
use crate::traced_probes::ftrace::parse::bundle::EventFilter;
use crate::traced_probes::ftrace::parse::ksyms::LazySymbols;
use crate::traced_probes::ftrace::parse::stats::{self, Phase, StatsSnapshot};
use crate::traced_probes::ftrace::parse::translate::KernelAddrs;
use crate::traced_probes::ftrace::parse::{funcgraph, kprobes};
use crate::tracing::core::trace_writer::TraceWriter;

/// Upstream's default drain period (its valid range: schema::ftrace_reading).
const DEFAULT_DRAIN_MS: u32 = 100;
/// linux.ftrace data sources of one tracing session (each one parses
/// every page of its instance again).
pub const MAX_SOURCES_PER_SESSION: usize = 16;
/// How long a flush waits (once per source) for its atrace setup result.
const ATRACE_FLUSH_WAIT: Duration = Duration::from_secs(1);

/// A source whose setup failed, and whether its flush has said so yet.
struct Failed {
    /// None when another source of the session reports the same error.
    writer: Option<TraceWriter>,
    error: String,
    session: u64,
    written: bool,
}

/// All ftrace state of the producer.
pub struct FtraceMux {
    instances: Instances,
    sources: SmallMap<u64, Source>,
    /// kallsyms, shared by the sources that symbolize while any holds it.
    ksyms: Weak<LazySymbols>,
    reading: Reading,
    /// Sources whose setup failed: they write only an ftrace_stats that
    /// says why, so the consumer learns it from the trace.
    failed: SmallMap<u64, Failed>,
    /// Android's atrace (when its binary exists).
    atrace: AtraceRunner,
    /// Wakes the producer's loop when pages arrive while it sleeps long.
    notify: Option<DataNotify>,
    /// Instances whose stopped source has not released them yet (see
    /// [`release_stopped`](Self::release_stopped)).
    stopped: Vec<String>,
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
            instances: Instances::new(state_file),
            sources: SmallMap::new(),
            ksyms: Weak::new(),
            reading: Reading::default(),
            failed: SmallMap::new(),
            atrace: AtraceRunner::new(atrace_runner::configured_path()),
            notify: None,
            stopped: Vec::new(),
        }
    }

    /// How readers opened from now on wake the producer's loop (without
    /// one, the drain timer never sleeps longer than the drain period).
    pub fn set_notify(&mut self, notify: DataNotify) {
        self.notify = Some(notify);
    }

    /// SetupDataSource: takes over the instance if needed and enables the
    /// events; data flows only after [`start`](Self::start). A source that
    /// cannot set up is kept as failed: its flush writes an ftrace_stats
    /// naming the error.
    pub fn setup(&mut self, id: u64, cfg: &FtraceConfig, session: u64, writer: TraceWriter) {
        let mut writer = Some(writer);
        if let Err(e) = self.try_setup(id, cfg, session, &mut writer) {
            crate::log_error!("cannot set up linux.ftrace (instance {id}): {e}");
            // One ftrace_stats per session and error tells the consumer:
            // each one takes a whole chunk of traced's buffer (200 sources
            // refused by one bound took 6 MiB of it).
            let told = self
                .failed
                .values()
                .any(|f| f.session == session && f.error == e && f.writer.is_some());
            let writer = writer.filter(|_| !told);
            self.failed.insert(
                id,
                Failed {
                    writer,
                    error: e,
                    session,
                    written: false,
                },
            );
        }
    }

    /// What setup of source `id` could not give as asked, one phrase each
    /// (as the end-of-trace line words them): sent to traced with the
    /// started notification, so the client names them at once.
    pub fn setup_problems(&self, id: u64) -> Vec<String> {
        if let Some(f) = self.failed.get(&id) {
            return vec![format!("linux.ftrace setup error: {}", f.error)];
        }
        let Some(src) = self.sources.get(&id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if !src.unknown_events.is_empty() {
            out.push(format!(
                "unknown ftrace events or atrace categories: {}",
                src.unknown_events.join(", ")
            ));
        }
        if !src.failed_events.is_empty() {
            out.push(format!(
                "ftrace events that could not be enabled: {}",
                src.failed_events.join(", ")
            ));
        }
        if let Some(note) = &src.setup_note {
            out.push(format!("linux.ftrace setup error: {note}"));
        }
        out
    }

    fn try_setup(
        &mut self,
        id: u64,
        cfg: &FtraceConfig,
        session: u64,
        writer: &mut Option<TraceWriter>,
    ) -> Result<(), String> {
        self.release_stopped();
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
        if self
            .sources
            .values()
            .filter(|s| s.session == session)
            .count()
            >= MAX_SOURCES_PER_SESSION
        {
            return Err(format!(
                "too many linux.ftrace data sources in one session (at most \
                 {MAX_SOURCES_PER_SESSION})"
            ));
        }
        if !cfg.kprobe_events.is_empty() {
            self.instances.kprobes_supported()?;
        }
        let funcgraph_req = funcgraph::request_untrusted(cfg)?;
        let inst = self.instances.acquire(&key, cfg)?;
        let mut failed_events = Vec::new();
        if let Some(req) = &funcgraph_req {
            if let Err(e) = super::funcgraph::setup(inst, &key, req, &mut failed_events) {
                self.instances.release(&key);
                return Err(e);
            }
        }
        let kprobes = self.instances.setup_kprobes(&key, cfg, &mut failed_events);
        let inst = self.instances.get_mut(&key).expect("acquired above");
        let setup_note = inst.clamped.take();
        let mut filter = EventFilter::default();
        filter.print = cfg.print_filter.as_ref().map(print_filter);
        let (mut wanted, mut unknown_events) = event_union::wanted(inst, cfg, android);
        if funcgraph_req.is_some() {
            for n in ["funcgraph_entry", "funcgraph_exit"] {
                wanted.push(("ftrace".into(), n.into()));
            }
        }
        for k in &kprobes {
            wanted.push(k.name.clone());
            filter.kprobes.push((k.ftrace_id, k.trace_type));
        }
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
        let enabled = event_union::enable(inst, cfg, wanted, &mut filter);
        unknown_events.extend(enabled.unknown);
        failed_events.extend(enabled.failed);
        let switch_wanted = enabled
            .events
            .iter()
            .any(|(g, n)| g == "sched" && n == "sched_switch");
        let compact_opt_out = cfg
            .compact_sched
            .as_ref()
            .and_then(|c| c.enabled)
            .is_some_and(|e| !e);
        let compact = inst.compact.is_some() && switch_wanted && !compact_opt_out;
        let ncpu = inst.tracefs.num_cpus().unwrap_or(1);
        let explicit = crate::schema::ftrace_reading::explicit_drain(cfg.drain_period_ms);
        let drain_explicit = explicit.is_some();
        let drain_ms = explicit.unwrap_or(DEFAULT_DRAIN_MS);
        let mut src = Source {
            key,
            writer: writer.take().expect("taken once"),
            filter,
            compact,
            events: enabled.events,
            cpus: Vec::new(),
            kernel: KernelAddrs::shared(),
            started: false,
            drain_ms,
            drain_explicit,
            session,
            stats_before: Vec::new(),
            unknown_events,
            failed_events,
            preserve: cfg.preserve_ftrace_buffer.unwrap_or(false),
            pids: Vec::new(),
            lost_reported: 0,
            ksyms: cfg.symbolize_ksyms.unwrap_or(false).then(|| {
                // Loading starts now, in the background: by the first
                // drain that needs a name it is usually done.
                let k = self
                    .ksyms
                    .upgrade()
                    .unwrap_or_else(|| Rc::new(ksyms_load::in_background("ftrace")));
                self.ksyms = Rc::downgrade(&k);
                k
            }),
            stopping: false,
            syscalls: syscall_want,
            setup_note,
            kprobe_names: kprobes.into_iter().map(|k| k.name.1).collect(),
            kprobe_stats: None,
        };
        src.cpu(ncpu.saturating_sub(1));
        self.sources.insert(id, src);
        if android {
            self.atrace.add(id, atrace_req);
        }
        Ok(())
    }

    /// StartDataSource: tracing on (first started source of the instance)
    /// and the per-cpu readers open.
    pub fn start(&mut self, id: u64) -> Result<(), String> {
        let Some(src) = self.sources.get_mut(&id) else {
            return match self.failed.get(&id) {
                Some(f) => Err(format!("setup failed: {}", f.error)),
                None => Err("not set up".into()),
            };
        };
        if src.started {
            return Ok(());
        }
        let inst = self
            .instances
            .get_mut(&src.key)
            .expect("source has an instance");
        if inst.started == 0 && !src.preserve {
            // Nothing from before the session: setup emptied the buffer,
            // but the instance may have been written to since.
            if let Err(e) = inst.tracefs.clear_trace() {
                crate::log_warn!(
                    "ftrace: cannot clear the buffer of {}: {e}",
                    super::ownership::describe(&src.key)
                );
            }
        }
        reading::open_reader(inst, src.drain_ms, !src.drain_explicit, self.notify.clone())?;
        if inst.started == 0 {
            inst.tracefs
                .set_tracing_on(true)
                .map_err(|e| format!("cannot turn tracing on: {e}"))?;
        }
        inst.started += 1;
        src.started = true;
        src.stats_before = cpu_stats(&inst.tracefs);
        // In the trace from the start (committed at the first read pass):
        // if traced_probes dies before its first flush, the end line can
        // still tell that this source never wrote its end stats.
        let before = src.stats_before.clone();
        src.write_stats(Phase::StartOfTrace, &before, buffer_sizes(inst), None);
        crate::log_debug!(
            "ftrace: source {id} started on {}",
            super::ownership::describe(&src.key)
        );
        Ok(())
    }

    /// The drain period: the smallest of the started sources, if any.
    pub fn drain_period(&self) -> Option<Duration> {
        reading::drain_period(&self.sources)
    }

    /// Reads every instance with started sources (see [`reading::read_pass`]).
    pub fn read_pass(&mut self, drain_max: Option<usize>) -> usize {
        reading::read_pass(&mut self.instances, &mut self.sources, drain_max)
    }

    /// Periodic tick: one bounded read pass. Returns when to come back
    /// (`None`: no started source).
    pub fn tick(&mut self) -> Option<Duration> {
        self.reading.tick(&mut self.instances, &mut self.sources)
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

    /// The trace of `ids` is stopping: their next flush is the last.
    pub fn mark_stopping(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(src) = self.sources.get_mut(id) {
                src.stopping = true;
            }
            if let Some(f) = self.failed.get_mut(id) {
                f.written = false; // The final flush says it once more.
            }
        }
    }

    /// Tracing off on every instance of `ids` whose started sources are
    /// all stopping, so the flush that follows reads its buffers to the
    /// end (nothing left behind in the end-of-trace stats). An instance
    /// another session still uses keeps tracing.
    fn stop_tracing_for_final_flush(&mut self, ids: &[u64]) {
        let keys: Vec<String> = ids
            .iter()
            .filter_map(|id| self.sources.get(id))
            .filter(|s| s.started && s.stopping)
            .map(|s| s.key.clone())
            .collect();
        for key in keys {
            let all_stopping = self
                .sources
                .values()
                .filter(|s| s.started && s.key == key)
                .all(|s| s.stopping);
            if !all_stopping {
                continue;
            }
            if let Some(inst) = self.instances.get_mut(&key) {
                if let Err(e) = inst.tracefs.set_tracing_on(false) {
                    crate::log_warn!(
                        "ftrace: cannot turn tracing off on {}: {e}",
                        super::ownership::describe(&key)
                    );
                }
            }
        }
    }

    /// Forgets the kernel addresses interned on `id`'s sequence: the next
    /// bundle with symbols starts the sequence's interning afresh.
    ///
    /// At a rotation cut this comes before the flush: every cpu is read to
    /// this moment first, under the old interned state, and the next
    /// bundle is marked as clearing it. traced puts what comes before the
    /// mark in the old file and the rest in the new one, so every file
    /// starts with all cpus at the same moment (trace_processor drops what
    /// precedes the latest cpu's start: `ftrace_latest_data_start_ns`).
    pub fn clear_incremental_state(&mut self, id: u64) {
        if self.sources.get(&id).is_some_and(|s| s.started) {
            self.read_pass(None);
        }
        if let Some(src) = self.sources.get_mut(&id) {
            let mut k = src.kernel.borrow_mut();
            *k = KernelAddrs::default();
            k.clear_pending = src.started;
        }
    }

    /// Flush of `ids`: drains the kernel buffers completely, writes the
    /// start/end ftrace_stats, returns the writers' chunks.
    pub fn flush(&mut self, ids: &[u64]) {
        for id in ids {
            // Written at the first flush and again at the final one (in a
            // ring buffer the first may be overwritten by then), not at
            // every periodic flush: each write commits a chunk.
            if let Some(f) = self.failed.get_mut(id).filter(|f| !f.written) {
                if let Some(w) = &mut f.writer {
                    write_setup_error(w, &f.error);
                }
                f.written = true;
            }
        }
        if !ids.iter().any(|id| self.sources.contains_key(id)) {
            return;
        }
        self.stop_tracing_for_final_flush(ids);
        self.read_pass(None);
        for id in ids {
            let Some(src) = self.sources.get_mut(id) else {
                continue;
            };
            if src.started {
                let inst = self
                    .instances
                    .get(&src.key)
                    .expect("source has an instance");
                let after = cpu_stats(&inst.tracefs);
                let before = src.stats_before.clone();
                let sizes = buffer_sizes(inst);
                let atrace_errors = self.atrace.errors(*id, ATRACE_FLUSH_WAIT);
                if !src.kprobe_names.is_empty() {
                    let names: Vec<&str> = src.kprobe_names.iter().map(String::as_str).collect();
                    src.kprobe_stats = self
                        .instances
                        .kprobe_profile()
                        .map(|text| kprobes::profile_totals(&text, &names));
                }
                src.write_stats(Phase::StartOfTrace, &before, sizes, None);
                src.write_stats(Phase::EndOfTrace, &after, sizes, atrace_errors);
                src.report_kernel_loss(&before, &after);
            }
            src.writer.flush();
        }
    }

    /// StopDataSource: flushes the writer and undoes what only this source
    /// needed. Restoring the instance (its last user's job) waits for
    /// [`release_stopped`](Self::release_stopped), which the producer calls
    /// once it has told traced the source stopped: switching a tracer back
    /// or removing a kprobe waits for the kernel (RCU grace periods; whole
    /// seconds in an emulated guest), which no stop timeout should see.
    pub fn stop(&mut self, id: u64) {
        if let Some(mut writer) = self.failed.remove(&id).and_then(|f| f.writer) {
            writer.flush();
        }
        let Some(mut src) = self.sources.remove(&id) else {
            return;
        };
        self.atrace.remove(id);
        src.writer.flush();
        let key = src.key.clone();
        let Some(inst) = self.instances.get_mut(&key) else {
            return;
        };
        event_union::disable(inst, &src.events);
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
        self.stopped.push(key);
    }

    /// Releases the instances of the sources stopped so far (the last
    /// user of one restores it).
    pub fn release_stopped(&mut self) {
        for key in std::mem::take(&mut self.stopped) {
            self.instances.release(&key);
        }
    }
}

/// (`cpu_buffer_size_pages`, `cached_cpu_buffer_size_pages`): the per-cpu
/// buffer size tracefs reports now and the one we set, in ring-buffer
/// pages; they differ if someone resized the buffer under us.
fn buffer_sizes(inst: &KInstance) -> BufferSizes {
    let page = inst.layout.page_size.max(1) as u64;
    let pages = |kb: u64| u32::try_from((kb * 1024).div_ceil(page)).unwrap_or(u32::MAX);
    BufferSizes {
        now: inst.tracefs.buffer_size_kb().ok().map(pages),
        cached: inst.buffer_kb.map(pages),
    }
}

/// The end-of-trace ftrace_stats of a source that never set up: the error
/// and nothing else. Written at every flush; the client reads the last.
fn write_setup_error(writer: &mut TraceWriter, error: &str) {
    let snapshot = StatsSnapshot {
        setup_error: Some(error),
        ..Default::default()
    };
    let mut s = VecStream::new();
    put_varint(&mut s, 8, boot_time_ns());
    stats::write_ftrace_stats(&mut s, Phase::EndOfTrace, &snapshot);
    writer.write_packet(s.as_bytes());
    writer.flush();
}
