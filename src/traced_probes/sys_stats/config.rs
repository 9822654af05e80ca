//! Validated `SysStatsConfig`: clamped periods and counter allow-lists.

use super::schedule::Source;

/// Shortest accepted period (upstream's minimum).
pub const MIN_PERIOD_MS: u32 = 10;
/// Longest accepted period (one day). Larger values (e.g. UINT32_MAX) would
/// only overflow timer arithmetic; no trace needs a sample less often.
pub const MAX_PERIOD_MS: u32 = 24 * 60 * 60 * 1000;

/// Why a period was changed, for the log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clamp {
    Unchanged,
    RaisedToMin,
    LoweredToMax,
}

/// 0 stays 0 (disabled); otherwise clamps into
/// [`MIN_PERIOD_MS`, `MAX_PERIOD_MS`].
pub fn clamp_period(period_ms: u32) -> (u32, Clamp) {
    match period_ms {
        0 => (0, Clamp::Unchanged),
        p if p < MIN_PERIOD_MS => (MIN_PERIOD_MS, Clamp::RaisedToMin),
        p if p > MAX_PERIOD_MS => (MAX_PERIOD_MS, Clamp::LoweredToMax),
        p => (p, Clamp::Unchanged),
    }
}

/// `SysStatsConfig.StatCounters` values.
pub mod stat_counters {
    pub const CPU_TIMES: u32 = 1;
    pub const IRQ_COUNTS: u32 = 2;
    pub const SOFTIRQ_COUNTS: u32 = 3;
    pub const FORK_COUNT: u32 = 4;
}

/// Which parts of `/proc/stat` to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatFields {
    pub cpu_times: bool,
    pub irq_counts: bool,
    pub softirq_counts: bool,
    pub fork_count: bool,
}

impl StatFields {
    pub const ALL: StatFields = StatFields {
        cpu_times: true,
        irq_counts: true,
        softirq_counts: true,
        fork_count: true,
    };

    /// From the config list; `None` (absent) enables everything.
    pub fn from_list(list: Option<&[u32]>) -> Self {
        let Some(list) = list else { return Self::ALL };
        let has = |v| list.contains(&v);
        StatFields {
            cpu_times: has(stat_counters::CPU_TIMES),
            irq_counts: has(stat_counters::IRQ_COUNTS),
            softirq_counts: has(stat_counters::SOFTIRQ_COUNTS),
            fork_count: has(stat_counters::FORK_COUNT),
        }
    }
}

/// Everything the sys_stats poller needs from the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysStatsSettings {
    /// Raw periods in ms, indexed by `Source as usize` (clamped by
    /// [`SysStatsSettings::clamped_periods`]).
    pub periods_ms: [u32; 12],
    /// `MeminfoCounters` ids to report; `None` = all.
    pub meminfo_counters: Option<Vec<u32>>,
    /// `VmstatCounters` ids to report; `None` = all.
    pub vmstat_counters: Option<Vec<u32>>,
    pub stat: StatFields,
}

impl Default for SysStatsSettings {
    fn default() -> Self {
        Self {
            periods_ms: [0; 12],
            meminfo_counters: None,
            vmstat_counters: None,
            stat: StatFields::ALL,
        }
    }
}

impl SysStatsSettings {
    pub fn set_period(&mut self, s: Source, ms: u32) -> &mut Self {
        self.periods_ms[s as usize] = ms;
        self
    }

    /// Periods after clamping, logging each change once.
    pub fn clamped_periods(&self) -> [u32; 12] {
        let mut out = [0; 12];
        for s in Source::ALL {
            let raw = self.periods_ms[s as usize];
            let (p, how) = clamp_period(raw);
            match how {
                Clamp::Unchanged => {}
                Clamp::RaisedToMin => {
                    eprintln!(
                        "sys_stats: {} {raw} is below the minimum; using {p} ms",
                        s.config_field()
                    )
                }
                Clamp::LoweredToMax => {
                    eprintln!(
                        "sys_stats: {} {raw} is above the maximum; using {p} ms",
                        s.config_field()
                    )
                }
            }
            out[s as usize] = p;
        }
        out
    }
}

impl SysStatsSettings {
    /// From the decoded `DataSourceConfig.sys_stats_config`. An empty
    /// counter list means "all counters", as upstream.
    pub fn from_config(cfg: &crate::pb::protos::SysStatsConfig) -> Self {
        let ids = |v: Vec<u32>| (!v.is_empty()).then_some(v);
        let mut s = Self {
            meminfo_counters: ids(cfg.meminfo_counters.iter().map(|c| *c as u32).collect()),
            vmstat_counters: ids(cfg.vmstat_counters.iter().map(|c| *c as u32).collect()),
            stat: StatFields::from_list(
                ids(cfg.stat_counters.iter().map(|c| *c as u32).collect()).as_deref(),
            ),
            ..Default::default()
        };
        let periods = [
            (Source::Meminfo, cfg.meminfo_period_ms),
            (Source::Vmstat, cfg.vmstat_period_ms),
            (Source::Stat, cfg.stat_period_ms),
            (Source::Devfreq, cfg.devfreq_period_ms),
            (Source::Cpufreq, cfg.cpufreq_period_ms),
            (Source::Buddyinfo, cfg.buddyinfo_period_ms),
            (Source::Diskstat, cfg.diskstat_period_ms),
            (Source::Psi, cfg.psi_period_ms),
            (Source::Thermal, cfg.thermal_period_ms),
            (Source::Cpuidle, cfg.cpuidle_period_ms),
            (Source::Gpufreq, cfg.gpufreq_period_ms),
            (Source::Slab, cfg.slab_period_ms),
        ];
        for (src, ms) in periods {
            s.set_period(src, ms.unwrap_or(0));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn period_clamping() {
        assert_eq!(clamp_period(0), (0, Clamp::Unchanged));
        assert_eq!(clamp_period(1), (10, Clamp::RaisedToMin));
        assert_eq!(clamp_period(9), (10, Clamp::RaisedToMin));
        assert_eq!(clamp_period(10), (10, Clamp::Unchanged));
        assert_eq!(clamp_period(1000), (1000, Clamp::Unchanged));
        assert_eq!(
            clamp_period(MAX_PERIOD_MS),
            (MAX_PERIOD_MS, Clamp::Unchanged)
        );
        assert_eq!(clamp_period(u32::MAX), (MAX_PERIOD_MS, Clamp::LoweredToMax));
    }

    #[test]
    fn settings_clamp_every_source() {
        let mut s = SysStatsSettings::default();
        s.set_period(Source::Meminfo, 1)
            .set_period(Source::Slab, u32::MAX)
            .set_period(Source::Psi, 500);
        let p = s.clamped_periods();
        assert_eq!(p[Source::Meminfo as usize], MIN_PERIOD_MS);
        assert_eq!(p[Source::Slab as usize], MAX_PERIOD_MS);
        assert_eq!(p[Source::Psi as usize], 500);
        assert_eq!(p[Source::Vmstat as usize], 0);
    }

    #[test]
    fn settings_from_config() {
        use crate::pb::protos::{
            mod_SysStatsConfig::StatCounters, MeminfoCounters, SysStatsConfig,
        };
        let cfg = SysStatsConfig {
            meminfo_period_ms: Some(100),
            meminfo_counters: vec![MeminfoCounters::MEMINFO_MEM_TOTAL],
            stat_period_ms: Some(u32::MAX),
            stat_counters: vec![StatCounters::STAT_CPU_TIMES],
            slab_period_ms: Some(2000),
            ..Default::default()
        };
        let s = SysStatsSettings::from_config(&cfg);
        assert_eq!(s.meminfo_counters, Some(vec![1]));
        assert_eq!(s.vmstat_counters, None);
        assert!(s.stat.cpu_times && !s.stat.fork_count);
        let p = s.clamped_periods();
        assert_eq!((p[0], p[2], p[11], p[1]), (100, MAX_PERIOD_MS, 2000, 0));
    }

    #[test]
    fn stat_field_lists() {
        assert_eq!(StatFields::from_list(None), StatFields::ALL);
        let f = StatFields::from_list(Some(&[stat_counters::FORK_COUNT, 77]));
        assert!(f.fork_count && !f.cpu_times && !f.irq_counts && !f.softirq_counts);
    }
}
