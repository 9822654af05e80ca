//! Which sys_stats sources are due when: pure, driven by the caller's clock
//! (milliseconds), so it is tested with fake time.
//!
//! Each source fires on the first call, then at the next multiple of its
//! period on the given clock. Sources whose periods divide each other fire
//! on the same instants and thus share one packet, as upstream's common
//! tick does; unlike upstream, periods that are not multiples of each
//! other still work. A late wake-up fires once and does not catch up.

/// The periodic sources of `linux.sys_stats`, in config-field order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Meminfo,
    Vmstat,
    Stat,
    Devfreq,
    Cpufreq,
    Buddyinfo,
    Diskstat,
    Psi,
    Thermal,
    Cpuidle,
    Gpufreq,
    Slab,
}

impl Source {
    pub const ALL: [Source; 12] = [
        Source::Meminfo,
        Source::Vmstat,
        Source::Stat,
        Source::Devfreq,
        Source::Cpufreq,
        Source::Buddyinfo,
        Source::Diskstat,
        Source::Psi,
        Source::Thermal,
        Source::Cpuidle,
        Source::Gpufreq,
        Source::Slab,
    ];

    /// The `SysStatsConfig` field that sets this source's period.
    pub fn config_field(self) -> &'static str {
        match self {
            Source::Meminfo => "meminfo_period_ms",
            Source::Vmstat => "vmstat_period_ms",
            Source::Stat => "stat_period_ms",
            Source::Devfreq => "devfreq_period_ms",
            Source::Cpufreq => "cpufreq_period_ms",
            Source::Buddyinfo => "buddyinfo_period_ms",
            Source::Diskstat => "diskstat_period_ms",
            Source::Psi => "psi_period_ms",
            Source::Thermal => "thermal_period_ms",
            Source::Cpuidle => "cpuidle_period_ms",
            Source::Gpufreq => "gpufreq_period_ms",
            Source::Slab => "slab_period_ms",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of sources.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SourceSet(u16);

impl SourceSet {
    pub fn contains(self, s: Source) -> bool {
        self.0 & s.bit() != 0
    }
    pub fn insert(&mut self, s: Source) {
        self.0 |= s.bit();
    }
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
    pub fn iter(self) -> impl Iterator<Item = Source> {
        Source::ALL.into_iter().filter(move |s| self.contains(*s))
    }
}

/// Per-source periods and next due times.
#[derive(Debug, Clone)]
pub struct Scheduler {
    /// Period in ms per source (index = `Source as usize`); 0 = disabled.
    periods: [u32; 12],
    /// Next due time in ms; `None` = fire on the next call.
    next_due: [Option<u64>; 12],
}

impl Scheduler {
    /// `periods_ms` must already be clamped (see `super::config`).
    pub fn new(periods_ms: [u32; 12]) -> Self {
        Self {
            periods: periods_ms,
            next_due: [None; 12],
        }
    }

    /// Whether any source is enabled.
    pub fn is_active(&self) -> bool {
        self.periods.iter().any(|&p| p != 0)
    }

    /// Returns the sources due at `now_ms` and schedules their next run.
    pub fn take_due(&mut self, now_ms: u64) -> SourceSet {
        let mut due = SourceSet::default();
        for s in Source::ALL {
            let i = s as usize;
            let period = self.periods[i] as u64;
            if period == 0 {
                continue;
            }
            if self.next_due[i].is_none_or(|t| t <= now_ms) {
                due.insert(s);
                self.next_due[i] = Some((now_ms / period + 1) * period);
            }
        }
        due
    }

    /// When [`Self::take_due`] should next be called; `None` if every source
    /// is disabled. Before the first call this is `Some(0)` (now).
    pub fn next_wake_ms(&self) -> Option<u64> {
        Source::ALL
            .iter()
            .filter(|s| self.periods[**s as usize] != 0)
            .map(|s| self.next_due[*s as usize].unwrap_or(0))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn periods(list: &[(Source, u32)]) -> [u32; 12] {
        let mut p = [0; 12];
        for &(s, ms) in list {
            p[s as usize] = ms;
        }
        p
    }

    #[test]
    fn all_disabled_never_wakes() {
        let mut s = Scheduler::new([0; 12]);
        assert!(!s.is_active());
        assert_eq!(s.next_wake_ms(), None);
        assert!(s.take_due(12345).is_empty());
    }

    #[test]
    fn multiples_share_ticks_and_align_to_clock() {
        let mut s = Scheduler::new(periods(&[(Source::Meminfo, 100), (Source::Stat, 300)]));
        assert_eq!(s.next_wake_ms(), Some(0));
        let due = s.take_due(1050);
        assert_eq!(
            due.iter().collect::<Vec<_>>(),
            vec![Source::Meminfo, Source::Stat]
        );
        assert_eq!(s.next_wake_ms(), Some(1100));
        assert!(s.take_due(1099).is_empty(), "early wake-up fires nothing");
        assert_eq!(
            s.take_due(1100).iter().collect::<Vec<_>>(),
            vec![Source::Meminfo]
        );
        assert_eq!(
            s.take_due(1200).iter().collect::<Vec<_>>(),
            vec![Source::Meminfo, Source::Stat]
        );
        assert_eq!(s.next_wake_ms(), Some(1300));
    }

    #[test]
    fn late_wake_does_not_catch_up() {
        let mut s = Scheduler::new(periods(&[(Source::Psi, 10)]));
        s.take_due(0);
        assert!(s.take_due(1_000_005).contains(Source::Psi));
        assert_eq!(s.next_wake_ms(), Some(1_000_010));
        assert!(s.take_due(1_000_009).is_empty());
    }

    #[test]
    fn non_multiple_periods_still_run() {
        let mut s = Scheduler::new(periods(&[(Source::Vmstat, 200), (Source::Thermal, 300)]));
        let mut fired = Vec::new();
        let mut now = 0;
        while now <= 1200 {
            for src in s.take_due(now).iter() {
                fired.push((now, src));
            }
            now = s.next_wake_ms().unwrap();
        }
        let at = |src| {
            fired
                .iter()
                .filter(|f| f.1 == src)
                .map(|f| f.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(at(Source::Vmstat), vec![0, 200, 400, 600, 800, 1000, 1200]);
        assert_eq!(at(Source::Thermal), vec![0, 300, 600, 900, 1200]);
    }
}
