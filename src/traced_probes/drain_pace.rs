//! How soon the ftrace drain timer fires again.

use std::time::Duration;

use crate::probes::ftrace::cpu_reader::MAX_READ_PAGES_PER_DRAIN;

/// A cpu that recently gave at least this many pages per drain is flooding.
pub const BUSY_PAGES: usize = 32;
/// Delay between drains while a cpu floods.
pub const BUSY_DRAIN: Duration = Duration::from_millis(10);

/// Drain pacing from the recent history of drains.
///
/// A full batch means data was left behind: drain again at once. While a
/// cpu floods, drain every [`BUSY_DRAIN`], even after a pass that found
/// little (workers refill the staging pipes a moment after a drain empties
/// them, and the kernel may hold a backlog no single pass shows): a worker
/// whose staging pipe is full stalls until the next drain, so a whole
/// period of a flood would otherwise have to fit in the kernel buffer.
/// Quiet: the configured period (fewer wakeups for both daemons).
#[derive(Debug, Default, Clone)]
pub struct DrainPace {
    /// Pages of the busiest cpu, halved at every pass.
    recent: usize,
}

impl DrainPace {
    /// The delay before the next drain after a pass whose busiest cpu
    /// gave `busiest` pages.
    pub fn next(&mut self, busiest: usize, period: Duration) -> Duration {
        self.recent = busiest.max(self.recent / 2);
        if busiest >= MAX_READ_PAGES_PER_DRAIN {
            Duration::ZERO
        } else if self.recent >= BUSY_PAGES {
            period.min(BUSY_DRAIN)
        } else {
            period
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pace_follows_the_busiest_cpu_and_decays() {
        let p = Duration::from_millis(100);
        let mut pace = DrainPace::default();
        assert_eq!(pace.next(0, p), p);
        assert_eq!(pace.next(BUSY_PAGES - 1, p), p);
        assert_eq!(pace.next(MAX_READ_PAGES_PER_DRAIN, p), Duration::ZERO);
        // Passes that find little right after a flood stay fast for a
        // while (recent 256 -> 128 -> 64 -> 32)...
        for _ in 0..3 {
            assert_eq!(pace.next(1, p), BUSY_DRAIN);
        }
        // ...then the period again.
        assert_eq!(pace.next(1, p), p);
        // A busy cpu below a full batch.
        assert_eq!(pace.next(BUSY_PAGES, p), BUSY_DRAIN);
        // A short configured period stays.
        let short = Duration::from_millis(2);
        assert_eq!(pace.next(BUSY_PAGES, short), short);
    }
}
