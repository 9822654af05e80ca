//! Plain data for the two packets `linux.process_stats` writes. Built by the
//! poller, written by `super::encode`.

/// One `ProcessTree.Process`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TreeProcess {
    pub pid: i32,
    pub ppid: i32,
    pub uid: i32,
    /// argv, or `[comm]` when `cmdline_is_comm`.
    pub cmdline: Vec<String>,
    /// `cmdline` was empty (zombies, kernel threads) and holds comm instead.
    pub cmdline_is_comm: bool,
    /// Pids in nested pid namespaces (outermost first), if any.
    pub nspid: Vec<i32>,
    /// Only with `record_process_age`.
    pub start_from_boot_ns: Option<u64>,
    /// Only on kernels that report `Kthread:` (6.4+).
    pub is_kthread: Option<bool>,
}

/// One `ProcessTree.Thread`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TreeThread {
    pub tid: i32,
    pub tgid: i32,
    /// comm; only with `record_thread_names`.
    pub name: Option<String>,
    pub nstid: Vec<i32>,
}

/// A `process_tree` packet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessTreePacket {
    /// Start of the /proc scan (packet timestamp).
    pub timestamp: u64,
    pub collection_end_timestamp: u64,
    /// First packet after `clear_incremental_state`.
    pub incremental_state_cleared: bool,
    pub processes: Vec<TreeProcess>,
    pub threads: Vec<TreeThread>,
}

/// One `ProcessStats.Process`: only values that changed since they were
/// last emitted (within the cache TTL) are `Some`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcStatsSample {
    pub pid: i32,
    pub vm_size_kb: Option<u64>,
    pub vm_rss_kb: Option<u64>,
    pub rss_anon_kb: Option<u64>,
    pub rss_file_kb: Option<u64>,
    pub rss_shmem_kb: Option<u64>,
    pub vm_swap_kb: Option<u64>,
    pub vm_locked_kb: Option<u64>,
    pub vm_hwm_kb: Option<u64>,
    pub oom_score_adj: Option<i64>,
    pub smr_rss_kb: Option<u64>,
    pub smr_pss_kb: Option<u64>,
    pub smr_pss_anon_kb: Option<u64>,
    pub smr_pss_file_kb: Option<u64>,
    pub smr_pss_shmem_kb: Option<u64>,
    pub smr_swap_pss_kb: Option<u64>,
    pub runtime_user_mode_ns: Option<u64>,
    pub runtime_kernel_mode_ns: Option<u64>,
    pub dmabuf_rss_kb: Option<u64>,
    /// Newly seen open fds with their paths (`resolve_process_fds`).
    pub fds: Vec<(u64, String)>,
}

impl ProcStatsSample {
    /// True if the sample carries nothing but the pid.
    pub fn is_empty(&self) -> bool {
        *self
            == ProcStatsSample {
                pid: self.pid,
                ..Default::default()
            }
    }
}

/// A `process_stats` packet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProcessStatsPacket {
    pub timestamp: u64,
    pub collection_end_timestamp: u64,
    pub incremental_state_cleared: bool,
    pub processes: Vec<ProcStatsSample>,
}
