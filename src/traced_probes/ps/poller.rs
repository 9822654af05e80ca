//! `linux.process_stats` state: which pids were already described, the
//! per-pid stats cache, and the public entry points the data source calls.

use std::collections::{HashMap, HashSet};

use super::model::{ProcessStatsPacket, ProcessTreePacket};
use super::procfs::ProcFs;
use crate::base::pidfd::pid_info_supported;
use crate::traced_probes::fs_root::{ns_per_clock_tick, FsRoot, ReadErrors};

/// Smallest accepted `proc_stats_poll_ms` (upstream raises lower values).
pub const MIN_POLL_MS: u32 = 100;

/// Validated `ProcessStatsConfig`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessStatsSettings {
    pub scan_all_processes_on_start: bool,
    pub record_thread_names: bool,
    /// 0 = no periodic stats; otherwise at least [`MIN_POLL_MS`].
    pub proc_stats_poll_ms: u32,
    pub proc_stats_cache_ttl_ms: u32,
    pub resolve_process_fds: bool,
    pub scan_smaps_rollup: bool,
    pub record_process_age: bool,
    pub record_process_runtime: bool,
    pub record_process_dmabuf_rss: bool,
    pub skip_main_thread_message: bool,
    /// False with quirk `DISABLE_ON_DEMAND`: ftrace-driven scans are ignored.
    pub on_demand_dumps: bool,
}

/// Clamps `proc_stats_poll_ms`: 0 stays 0 (disabled), 1..99 becomes 100.
pub fn clamp_poll_ms(poll_ms: u32) -> u32 {
    if poll_ms > 0 && poll_ms < MIN_POLL_MS {
        eprintln!("process_stats: proc_stats_poll_ms {poll_ms} is below {MIN_POLL_MS} ms; using {MIN_POLL_MS} ms");
        return MIN_POLL_MS;
    }
    poll_ms
}

/// Number of polls after which the stats cache is dropped (so every value is
/// re-emitted): `ttl / period`, at least 1. 0 when polling is off.
pub fn cache_ttl_ticks(poll_ms: u32, ttl_ms: u32) -> u32 {
    ttl_ms.checked_div(poll_ms).map_or(0, |t| t.max(1))
}

/// Delay until the next poll, aligned to multiples of `period_ms` on the
/// given clock (upstream aligns its ticks to wall-clock multiples so that
/// pollers of different sessions fire together). `None` if polling is off.
pub fn next_poll_delay_ms(now_ms: u64, period_ms: u32) -> Option<u64> {
    let period = u64::from(period_ms);
    (period != 0).then(|| period - now_ms % period)
}

/// Last values emitted for one pid (`None` = never emitted).
#[derive(Debug, Default, Clone)]
pub(super) struct CachedStats {
    pub mem: super::parse::StatusMem,
    pub smaps: super::parse::SmapsRollup,
    pub oom_score_adj: Option<i64>,
    pub runtime_user_ns: Option<u64>,
    pub runtime_kernel_ns: Option<u64>,
    pub dmabuf_rss_kb: Option<u64>,
    pub seen_fds: HashSet<u64>,
}

/// Where a full scan takes each process's identity (ppid, uid, threads,
/// pid namespace) from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum ScanSource {
    /// A pidfd plus small /proc lookups when the kernel supports
    /// `PIDFD_GET_INFO` and the main thread's name is not needed (then the
    /// extra `comm` read makes `status` cheaper); `status` otherwise.
    #[default]
    Auto,
    /// Always `/proc/<pid>/status` (every kernel, fixture roots).
    Status,
    /// The pidfd path whenever the kernel supports it, names or not.
    Pidfd,
}

/// A map keyed by pid or tid. Ids come from the kernel (bounded by
/// pid_max), so a multiplicative hash is enough; SipHash cost ~2 % of a
/// full /proc scan, which inserts every task.
pub(super) type PidMap<V> = HashMap<i32, V, std::hash::BuildHasherDefault<PidHasher>>;

/// Fibonacci hashing of an id: the multiplication spreads consecutive pids
/// over the high bits hashbrown tags buckets with.
#[derive(Default)]
pub(super) struct PidHasher(u64);

impl std::hash::Hasher for PidHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_i32(&mut self, v: i32) {
        self.0 = (self.0 ^ u64::from(v as u32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Clock returning BOOTTIME nanoseconds (injected for tests).
pub type Clock = Box<dyn FnMut() -> u64 + Send>;

/// Scanner behind `linux.process_stats`. Every method returns the packets to
/// write; nothing is returned when there is nothing new.
pub struct ProcessStatsPoller {
    pub(super) settings: ProcessStatsSettings,
    pub(super) procfs: ProcFs,
    pub(super) clock: Clock,
    pub(super) ns_per_tick: u64,
    /// tid -> tgid of every task already written to a process tree.
    pub(super) seen: PidMap<i32>,
    pub(super) cache: HashMap<i32, CachedStats>,
    /// Pids whose status has no memory counters (kernel threads).
    pub(super) skip_mem: HashSet<i32>,
    pub(super) cache_ticks: u32,
    pub(super) ttl_ticks: u32,
    pub(super) pending_cleared_flag: bool,
    pub(super) scan_source: ScanSource,
    /// Our pid namespace, when pidfd info works on this kernel and the
    /// root is the live /proc of that namespace (never for fixtures).
    pub(super) own_pid_ns: Option<u64>,
}

impl std::fmt::Debug for ProcessStatsPoller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessStatsPoller")
            .field("settings", &self.settings)
            .field("seen", &self.seen.len())
            .field("cached", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl ProcessStatsPoller {
    /// `settings.proc_stats_poll_ms` is clamped here.
    pub fn new(mut settings: ProcessStatsSettings, root: &FsRoot, clock: Clock) -> Self {
        settings.proc_stats_poll_ms = clamp_poll_ms(settings.proc_stats_poll_ms);
        let ttl_ticks = cache_ttl_ticks(
            settings.proc_stats_poll_ms,
            settings.proc_stats_cache_ttl_ms,
        );
        let mut procfs = ProcFs::new(root);
        let own_pid_ns = if procfs.is_own_live_proc() && pid_info_supported() {
            procfs.pid_ns(std::process::id() as i32)
        } else {
            None
        };
        Self {
            settings,
            procfs,
            clock,
            ns_per_tick: ns_per_clock_tick(),
            seen: PidMap::default(),
            cache: HashMap::new(),
            skip_mem: HashSet::new(),
            cache_ticks: 0,
            ttl_ticks,
            pending_cleared_flag: false,
            scan_source: ScanSource::Auto,
            own_pid_ns,
        }
    }

    /// Chooses where full scans read process identity from (tests and
    /// benchmarks compare the two paths). Returns whether full scans will
    /// now use pidfds.
    pub fn set_scan_source(&mut self, source: ScanSource) -> bool {
        self.scan_source = source;
        self.uses_pidfd_scan()
    }

    /// Whether [`Self::scan_all`] takes the pidfd path.
    pub fn uses_pidfd_scan(&self) -> bool {
        let names_needed =
            self.settings.record_thread_names && !self.settings.skip_main_thread_message;
        self.own_pid_ns.is_some()
            && match self.scan_source {
                ScanSource::Auto => !names_needed,
                ScanSource::Status => false,
                ScanSource::Pidfd => true,
            }
    }

    /// Overrides USER_HZ (fixtures are written for a known tick length).
    pub fn set_ns_per_tick(&mut self, ns: u64) {
        self.ns_per_tick = ns.max(1);
    }

    pub fn settings(&self) -> &ProcessStatsSettings {
        &self.settings
    }

    /// Period of [`Self::poll_stats`]; 0 = do not poll.
    pub fn poll_period_ms(&self) -> u32 {
        self.settings.proc_stats_poll_ms
    }

    /// Files that could not be read or parsed so far.
    pub fn errors(&self) -> ReadErrors {
        self.procfs.errors
    }

    /// Tasks that exited while being scanned (normal; not an error).
    pub fn vanished(&self) -> u64 {
        self.procfs.vanished
    }

    /// /proc files held open between stats polls.
    pub fn kept_fds(&self) -> usize {
        self.procfs.kept_fds()
    }

    /// Caps the fds kept open between stats polls (0: reopen every file on
    /// every poll). Closes those held now.
    pub fn set_kept_fds_budget(&mut self, budget: usize) {
        self.procfs.set_kept_budget(budget);
    }

    /// Whether `tid` has been described in a process tree this session.
    pub fn is_seen(&self, tid: i32) -> bool {
        self.seen.contains_key(&tid)
    }

    /// Forgets everything already emitted (incremental state cleared); the
    /// next packet carries `incremental_state_cleared`.
    pub fn clear_incremental_state(&mut self) {
        self.seen.clear();
        self.skip_mem.clear();
        self.cache.clear();
        self.cache_ticks = 0;
        self.pending_cleared_flag = true;
    }

    /// Pids seen in ftrace: describes those not yet described. `None` when
    /// on-demand dumps are disabled or nothing was new.
    pub fn on_pids(&mut self, pids: &[i32]) -> Option<ProcessTreePacket> {
        if !self.settings.on_demand_dumps {
            return None;
        }
        self.describe_pids(pids)
    }

    /// Tasks renamed in ftrace: they will be described again next time.
    pub fn on_renames(&mut self, pids: &[i32]) {
        if !self.settings.on_demand_dumps {
            return;
        }
        for pid in pids {
            self.seen.remove(pid);
        }
    }

    /// One periodic tick: the stats of every process (only changed values),
    /// then a tree packet for processes not described yet. Drops the stats
    /// cache every `ttl_ticks` ticks so unchanged values get re-emitted.
    pub fn poll_stats(&mut self) -> (Option<ProcessStatsPacket>, Option<ProcessTreePacket>) {
        let (stats, pids) = self.collect_stats();
        let tree = self.describe_pids(&pids);
        self.cache_ticks += 1;
        if self.cache_ticks >= self.ttl_ticks {
            self.cache_ticks = 0;
            self.cache.clear();
        }
        (stats, tree)
    }

    pub(super) fn now(&mut self) -> u64 {
        (self.clock)()
    }

    pub(super) fn take_cleared_flag(&mut self) -> bool {
        std::mem::take(&mut self.pending_cleared_flag)
    }
}

impl ProcessStatsSettings {
    /// From the decoded `DataSourceConfig.process_stats_config`.
    pub fn from_config(cfg: &crate::pb::protos::ProcessStatsConfig) -> Self {
        use crate::pb::protos::mod_ProcessStatsConfig::Quirks;
        Self {
            scan_all_processes_on_start: cfg.scan_all_processes_on_start.unwrap_or(false),
            record_thread_names: cfg.record_thread_names.unwrap_or(false),
            proc_stats_poll_ms: cfg.proc_stats_poll_ms.unwrap_or(0),
            proc_stats_cache_ttl_ms: cfg.proc_stats_cache_ttl_ms.unwrap_or(0),
            resolve_process_fds: cfg.resolve_process_fds.unwrap_or(false),
            scan_smaps_rollup: cfg.scan_smaps_rollup.unwrap_or(false),
            record_process_age: cfg.record_process_age.unwrap_or(false),
            record_process_runtime: cfg.record_process_runtime.unwrap_or(false),
            record_process_dmabuf_rss: cfg.record_process_dmabuf_rss.unwrap_or(false),
            skip_main_thread_message: cfg.skip_main_thread_message.unwrap_or(false),
            on_demand_dumps: !cfg.quirks.contains(&Quirks::DISABLE_ON_DEMAND),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::{mod_ProcessStatsConfig::Quirks, ProcessStatsConfig};

    #[test]
    fn poll_delay_is_aligned() {
        assert_eq!(next_poll_delay_ms(12_345, 1000), Some(655));
        assert_eq!(next_poll_delay_ms(13_000, 1000), Some(1000));
        assert_eq!(next_poll_delay_ms(5, 0), None);
    }

    #[test]
    fn settings_from_config() {
        let cfg = ProcessStatsConfig {
            scan_all_processes_on_start: Some(true),
            proc_stats_poll_ms: Some(5),
            quirks: vec![Quirks::DISABLE_ON_DEMAND],
            ..Default::default()
        };
        let s = ProcessStatsSettings::from_config(&cfg);
        assert!(s.scan_all_processes_on_start && !s.on_demand_dumps && !s.record_thread_names);
        let p = ProcessStatsPoller::new(s, &FsRoot::new("/nonexistent"), Box::new(|| 0));
        assert_eq!(p.poll_period_ms(), MIN_POLL_MS);
        assert!(ProcessStatsSettings::from_config(&ProcessStatsConfig::default()).on_demand_dumps);
    }
}
