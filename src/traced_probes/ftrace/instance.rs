//! One tracefs directory (the root or `instances/NAME`) as the ftrace mux
//! uses it: opened by its first data source, configured once (clock,
//! buffer size), shared by later ones, restored by the last one.
//!
//! Opening is split in two so the crash state file can be written between
//! them: [`KInstance::open`] only creates the directory (if needed) and
//! reads formats; [`KInstance::take_over`] changes kernel state.

use super::event_union::EventUnion;
use crate::pb::protos::FtraceConfig;
use crate::traced_probes::ftrace::cpu_reader::FtraceReader;
use crate::traced_probes::ftrace::parse::compact_sched::{self, CompactSchedFormat};
use crate::traced_probes::ftrace::parse::format::PageHeaderLayout;
use crate::traced_probes::ftrace::parse::translate::TranslationTable;
use crate::traced_probes::ftrace::Tracefs;

/// One tracefs directory and what we did to it.
pub struct KInstance {
    pub tracefs: Tracefs,
    /// We made the directory (and remove it when done).
    pub created: bool,
    pub table: TranslationTable,
    pub layout: PageHeaderLayout,
    /// Compact sched is possible with this kernel's formats.
    pub compact: Option<CompactSchedFormat>,
    /// The trace clock in effect (`boot` unless the kernel lacks it).
    pub clock: String,
    pub reader: Option<FtraceReader>,
    /// The events on: the union over its data sources.
    pub events: EventUnion,
    /// The raw_syscalls filter we last wrote (`None`: never touched).
    pub syscall_filter: Option<String>,
    saved_tracing_on: bool,
    /// Set when the take-over clamped the config's buffer size (told to
    /// the first data source, in its ftrace_stats).
    pub clamped: Option<String>,
    /// The `buffer_percent` we set (`None`: the kernel refused it).
    pub buffer_percent: Option<u32>,
    /// The per-cpu buffer size we set (`None`: the kernel refused it).
    pub buffer_kb: Option<u64>,
    /// We switched it to the function_graph tracer.
    pub funcgraph_on: bool,
    /// Data sources set up / started on this instance.
    pub users: usize,
    pub started: usize,
}

/// `buffer_percent` unless the config sets `drain_buffer_percent` (5 %
/// measured a little cheaper than 10 % at 500k events/s, 2 % dearer).
const DEFAULT_BUFFER_PERCENT: u32 = 5;

fn mem_total_kb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
}

/// Upstream's cap on one cpu's buffer.
const MAX_PER_CPU_KB: u64 = 64 * 1024;

/// The most a config may ask per cpu: upstream's 64 MiB, and the buffers
/// of every instance this traced_probes uses, all cpus together, within
/// 1/8 of the machine's memory (`others_kb`: what the other instances
/// hold already); at least 1 MiB per cpu.
pub fn max_buffer_kb(mem_total_kb: u64, ncpu: usize, others_kb: u64) -> u64 {
    if mem_total_kb == 0 {
        return MAX_PER_CPU_KB;
    }
    let left = (mem_total_kb / 8).saturating_sub(others_kb);
    (left / ncpu.max(1) as u64).clamp(1024, MAX_PER_CPU_KB)
}

/// Per-cpu ring buffer size when the config does not say: 8 MiB on
/// machines with at least 7 GiB of RAM, else 2 MiB (upstream's rule).
fn default_buffer_kb() -> u64 {
    if mem_total_kb() >= 7 * 1024 * 1024 {
        8 * 1024
    } else {
        2 * 1024
    }
}

impl KInstance {
    /// Finds (or creates) instance `key` (`""` = the root) and reads its
    /// formats. Refuses an instance someone else is tracing with (a
    /// tracer other than `nop`) unless `preserve_ftrace_buffer`.
    pub fn open(root: &Tracefs, key: &str, cfg: &FtraceConfig) -> Result<KInstance, String> {
        let (tracefs, created) = if key.is_empty() {
            (root.clone(), false)
        } else {
            let t = root.instance(key).map_err(|e| e.to_string())?;
            let existed = t.root().is_dir();
            if !existed {
                root.create_instance(key)
                    .map_err(|e| format!("cannot create ftrace instance {key}: {e}"))?;
            }
            (t, !existed)
        };
        if !cfg.preserve_ftrace_buffer.unwrap_or(false) {
            let tracer = tracefs.current_tracer().unwrap_or_else(|_| "nop".into());
            if tracer != "nop" {
                if created {
                    let _ = root.remove_instance(key);
                }
                return Err(format!(
                    "ftrace is in use (current_tracer is {tracer:?}); not touching it"
                ));
            }
        }
        let table = tracefs.translation_table();
        let compact = compact_sched::for_table(&table);
        Ok(KInstance {
            saved_tracing_on: tracefs.is_tracing_on().unwrap_or(false),
            layout: tracefs.page_header_layout(),
            tracefs,
            created,
            table,
            compact,
            clock: "boot".into(),
            reader: None,
            events: EventUnion::default(),
            syscall_filter: None,
            clamped: None,
            buffer_kb: None,
            buffer_percent: None,
            funcgraph_on: false,
            users: 0,
            started: 0,
        })
    }

    /// Tracing off, no events, empty buffer, the clock and the buffer size
    /// of the first config. With `preserve_ftrace_buffer` none of that (a
    /// new clock or size empties the buffer, as upstream notes): what the
    /// kernel recorded, and is recording, stays, in the clock it has.
    pub fn take_over(&mut self, cfg: &FtraceConfig, others_kb: u64) {
        let t = &self.tracefs;
        if cfg.preserve_ftrace_buffer.unwrap_or(false) {
            self.clock = t.clocks().map(|c| c.0).unwrap_or_else(|_| "local".into());
            self.buffer_kb = t.buffer_size_kb().ok();
            self.set_wake_percent(cfg);
            return;
        }
        let _ = t.set_tracing_on(false);
        let _ = t.disable_all_events();
        let _ = t.clear_trace();
        // mono_raw if asked, else the first of boot, global, local.
        let wanted: &[&str] = if cfg.use_monotonic_raw_clock.unwrap_or(false) {
            &["mono_raw", "boot", "global", "local"]
        } else {
            &["boot", "global", "local"]
        };
        let available = t.clocks().map(|c| c.1).unwrap_or_default();
        let chosen = wanted
            .iter()
            .find(|c| available.iter().any(|a| a == *c) && t.set_clock(c).is_ok());
        self.clock = match chosen {
            Some(c) => c.to_string(),
            None => t.clocks().map(|c| c.0).unwrap_or_default(),
        };
        // The default when unset, or when it is larger and the config
        // only gave a lower bound.
        let default_kb = default_buffer_kb();
        let kb = match cfg.buffer_size_kb.map(u64::from) {
            Some(kb)
                if kb > 0 && !(cfg.buffer_size_lower_bound == Some(true) && kb < default_kb) =>
            {
                kb
            }
            _ => default_kb,
        };
        let max_kb = max_buffer_kb(mem_total_kb(), t.num_cpus().unwrap_or(1), others_kb);
        let kb = if kb > max_kb {
            let note = format!(
                "buffer_size_kb {kb} clamped to {max_kb} (at most 64 MiB per cpu, \
                 the buffers of all instances within 1/8 of memory)"
            );
            crate::log_warn!("ftrace: {note}");
            self.clamped = Some(note);
            max_kb
        } else {
            kb
        };
        match t.set_buffer_size_kb(kb) {
            Ok(()) => self.buffer_kb = Some(kb),
            Err(e) => crate::log_warn!("ftrace: cannot set buffer_size_kb {kb}: {e}"),
        }
        self.set_wake_percent(cfg);
    }

    /// Readers sleep until this much of a cpu buffer is filled, or a drain
    /// period passed: a reader wakes per batch of pages, not per page, and
    /// the data still flows every drain period (pids reach process_stats
    /// while the tasks still live).
    fn set_wake_percent(&mut self, cfg: &FtraceConfig) {
        let percent = cfg
            .drain_buffer_percent
            .filter(|p| (1..=100).contains(p))
            .unwrap_or(DEFAULT_BUFFER_PERCENT);
        self.buffer_percent = self
            .tracefs
            .set_buffer_percent(percent)
            .ok()
            .map(|()| percent);
    }

    /// The last user left: readers closed, tracing off, events off, buffer
    /// emptied; an instance we created is removed, a pre-existing one gets
    /// its small buffer and its old `tracing_on` back. False when an
    /// instance we created could not be removed (another process holds
    /// one of its files open: EBUSY).
    pub fn release(mut self, root: &Tracefs, key: &str) -> bool {
        // Files must be closed before an instance can be removed.
        self.reader = None;
        let t = &self.tracefs;
        let _ = t.set_tracing_on(false);
        let _ = t.disable_all_events();
        if self.funcgraph_on {
            super::funcgraph::restore(t);
        }
        // Removing an instance frees its buffers: emptying them first
        // would only cost another RCU grace period (about 30 ms each,
        // which SIGTERM's one second cannot spare for 8 instances).
        if self.created {
            if let Err(e) = root.remove_instance(key) {
                crate::log_warn!(
                    "cannot remove ftrace instance {key} yet: {e} (tried again at every \
                     release, and by the next start if still there)"
                );
                let _ = t.clear_trace();
                return false;
            }
        } else {
            let _ = t.clear_trace();
            let _ = t.set_buffer_size_kb(4);
            let _ = t.set_buffer_percent(50);
            let _ = t.set_tracing_on(self.saved_tracing_on);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn buffer_cap_follows_memory() {
        use super::max_buffer_kb;
        assert_eq!(max_buffer_kb(0, 4, 0), 64 * 1024);
        assert_eq!(max_buffer_kb(64 << 20, 8, 0), 64 * 1024);
        assert_eq!(max_buffer_kb(512 << 10, 4, 0), 16 * 1024);
        assert_eq!(max_buffer_kb(16 << 10, 8, 0), 1024);
        // 512 MiB, 4 cpus: the budget of 64 MiB is shared by instances.
        assert_eq!(max_buffer_kb(512 << 10, 4, 48 << 10), 4 * 1024);
        assert_eq!(max_buffer_kb(512 << 10, 4, 64 << 10), 1024);
        assert_eq!(max_buffer_kb(512 << 10, 4, 1 << 30), 1024);
    }
}
