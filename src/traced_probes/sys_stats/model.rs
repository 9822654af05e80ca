//! Plain data of one `sys_stats` packet (protos/perfetto/trace/sys_stats/
//! sys_stats.proto). Empty vectors / `None` are simply not written.

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CpuTimes {
    pub cpu_id: u32,
    pub user_ns: u64,
    pub user_nice_ns: u64,
    pub system_mode_ns: u64,
    pub idle_ns: u64,
    pub io_wait_ns: u64,
    pub irq_ns: u64,
    pub softirq_ns: u64,
    pub steal_ns: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BuddyInfo {
    pub node: String,
    pub zone: String,
    pub order_pages: Vec<u32>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DiskStat {
    pub device_name: String,
    pub read_sectors: u64,
    pub read_time_ms: u64,
    pub write_sectors: u64,
    pub write_time_ms: u64,
    pub discard_sectors: u64,
    pub discard_time_ms: u64,
    pub flush_count: u64,
    pub flush_time_ms: u64,
}

/// `SysStats.PsiSample.PsiResource` values.
pub mod psi_resource {
    pub const CPU_SOME: u32 = 1;
    pub const CPU_FULL: u32 = 2;
    pub const IO_SOME: u32 = 3;
    pub const IO_FULL: u32 = 4;
    pub const MEMORY_SOME: u32 = 5;
    pub const MEMORY_FULL: u32 = 6;
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PsiSample {
    pub resource: u32,
    pub total_ns: u64,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ThermalZone {
    pub name: String,
    /// Degrees Celsius (sysfs reports millidegrees).
    pub temp: Option<u64>,
    pub kind: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CpuIdleState {
    pub cpu_id: u32,
    /// (state name, total time in µs).
    pub states: Vec<(String, u64)>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SlabInfo {
    pub name: String,
    pub pages_per_slab: u32,
    pub num_slabs: u32,
}

/// A `sys_stats` packet.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SysStatsPacket {
    pub timestamp: u64,
    pub collection_end_timestamp: u64,
    /// (`MeminfoCounters` id, kB).
    pub meminfo: Vec<(u32, u64)>,
    /// (`VmstatCounters` id, value).
    pub vmstat: Vec<(u32, u64)>,
    pub cpu_stat: Vec<CpuTimes>,
    pub num_forks: Option<u64>,
    pub num_irq_total: Option<u64>,
    /// (irq, count), only non-zero counts.
    pub num_irq: Vec<(i32, u64)>,
    pub num_softirq_total: Option<u64>,
    pub num_softirq: Vec<(i32, u64)>,
    /// (device, current frequency).
    pub devfreq: Vec<(String, u64)>,
    /// Per cpu (index = cpu), 0 for offline cpus.
    pub cpufreq_khz: Vec<u32>,
    pub buddy_info: Vec<BuddyInfo>,
    pub disk_stat: Vec<DiskStat>,
    pub psi: Vec<PsiSample>,
    pub thermal_zone: Vec<ThermalZone>,
    pub cpuidle_state: Vec<CpuIdleState>,
    pub gpufreq_mhz: Vec<u64>,
    pub slab_info: Vec<SlabInfo>,
}
