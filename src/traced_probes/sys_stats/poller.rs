//! `linux.sys_stats` poller: on each wake-up reads the due sources into one
//! `sys_stats` packet.

use std::collections::HashMap;

use super::config::{StatFields, SysStatsSettings};
use super::counters::{build_lookup, meminfo_entries, vmstat_entries};
use super::model::{psi_resource, SysStatsPacket};
use super::parse;
use super::schedule::{Scheduler, Source, SourceSet};
use super::sysfs;
use crate::traced_probes::fs_root::{ns_per_clock_tick, FsRoot, ReadErrors};

/// Clock returning BOOTTIME nanoseconds (injected for tests).
pub type Clock = Box<dyn FnMut() -> u64 + Send>;

pub struct SysStatsPoller {
    root: FsRoot,
    scheduler: Scheduler,
    meminfo: HashMap<&'static str, u32>,
    vmstat: HashMap<&'static str, u32>,
    stat: StatFields,
    ns_per_tick: u64,
    clock: Clock,
    buf: Vec<u8>,
    errors: ReadErrors,
}

impl std::fmt::Debug for SysStatsPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SysStatsPoller")
            .field("root", &self.root)
            .field("scheduler", &self.scheduler)
            .finish_non_exhaustive()
    }
}

impl SysStatsPoller {
    /// Periods are clamped (with a log line) and counter lists resolved here.
    pub fn new(settings: &SysStatsSettings, root: &FsRoot, clock: Clock) -> Self {
        let (meminfo, bad_mem) =
            build_lookup(meminfo_entries(), settings.meminfo_counters.as_deref());
        let (vmstat, bad_vm) = build_lookup(vmstat_entries(), settings.vmstat_counters.as_deref());
        if !bad_mem.is_empty() || !bad_vm.is_empty() {
            eprintln!(
                "sys_stats: ignoring unknown counter ids: meminfo {bad_mem:?} vmstat {bad_vm:?}"
            );
        }
        Self {
            root: root.clone(),
            scheduler: Scheduler::new(settings.clamped_periods()),
            meminfo,
            vmstat,
            stat: settings.stat,
            ns_per_tick: ns_per_clock_tick(),
            clock,
            buf: Vec::with_capacity(64 * 1024),
            errors: ReadErrors::default(),
        }
    }

    pub fn set_ns_per_tick(&mut self, ns: u64) {
        self.ns_per_tick = ns.max(1);
    }

    /// False if every period is 0: the data source then never polls.
    pub fn is_active(&self) -> bool {
        self.scheduler.is_active()
    }

    /// When [`Self::poll`] should next run, in the `now_ms` time base.
    pub fn next_wake_ms(&self) -> Option<u64> {
        self.scheduler.next_wake_ms()
    }

    pub fn errors(&self) -> ReadErrors {
        self.errors
    }

    /// Reads every source due at `now_ms` (a millisecond clock, e.g. wall
    /// or boot time). `None` if nothing was due.
    pub fn poll(&mut self, now_ms: u64) -> Option<SysStatsPacket> {
        let due = self.scheduler.take_due(now_ms);
        if due.is_empty() {
            return None;
        }
        Some(self.read(due))
    }

    /// Reads the given sources now, regardless of the schedule.
    pub fn read(&mut self, sources: SourceSet) -> SysStatsPacket {
        let mut p = SysStatsPacket {
            timestamp: (self.clock)(),
            ..Default::default()
        };
        for s in sources.iter() {
            self.read_source(s, &mut p);
        }
        p.collection_end_timestamp = (self.clock)();
        p
    }

    /// Text of a /proc file, or `None` (counted).
    fn read_text(&mut self, rel: &str) -> Option<String> {
        if let Err(e) = self.root.read_into(rel, &mut self.buf) {
            self.errors.count_io(&e);
            return None;
        }
        match std::str::from_utf8(&self.buf) {
            Ok(s) => Some(s.to_owned()),
            Err(_) => {
                self.errors.malformed += 1;
                None
            }
        }
    }

    fn read_source(&mut self, s: Source, p: &mut SysStatsPacket) {
        let root = self.root.clone();
        let e = &mut ReadErrors::default();
        match s {
            Source::Meminfo => {
                if let Some(t) = self.read_text("proc/meminfo") {
                    parse::parse_meminfo(&t, &self.meminfo, p, e);
                }
            }
            Source::Vmstat => {
                if let Some(t) = self.read_text("proc/vmstat") {
                    parse::parse_vmstat(&t, &self.vmstat, p, e);
                }
            }
            Source::Stat => {
                if let Some(t) = self.read_text("proc/stat") {
                    parse::parse_stat(&t, self.stat, self.ns_per_tick, p, e);
                }
            }
            Source::Buddyinfo => {
                if let Some(t) = self.read_text("proc/buddyinfo") {
                    parse::parse_buddyinfo(&t, p, e);
                }
            }
            Source::Diskstat => {
                if let Some(t) = self.read_text("proc/diskstats") {
                    parse::parse_diskstats(&t, p, e);
                }
            }
            Source::Psi => {
                use psi_resource::*;
                for (file, some, full) in [
                    ("cpu", CPU_SOME, CPU_FULL),
                    ("io", IO_SOME, IO_FULL),
                    ("memory", MEMORY_SOME, MEMORY_FULL),
                ] {
                    if let Some(t) = self.read_text(&format!("proc/pressure/{file}")) {
                        parse::parse_psi(&t, some, full, p, e);
                    }
                }
            }
            Source::Slab => {
                if let Some(t) = self.read_text("proc/slabinfo") {
                    parse::parse_slabinfo(&t, p, e);
                }
            }
            Source::Devfreq => sysfs::read_devfreq(&root, p, e),
            Source::Cpufreq => sysfs::read_cpufreq(&root, p, e),
            Source::Thermal => sysfs::read_thermal(&root, p, e),
            Source::Cpuidle => sysfs::read_cpuidle(&root, p, e),
            Source::Gpufreq => sysfs::read_gpufreq(&root, p, e),
        }
        self.errors.missing += e.missing;
        self.errors.unreadable += e.unreadable;
        self.errors.malformed += e.malformed;
    }
}
