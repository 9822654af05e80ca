//! How soon the ftrace drain timer fires again.

use std::time::Duration;

use crate::probes::ftrace::cpu_reader::MAX_READ_PAGES_PER_DRAIN;

/// Pages per drain of the busiest cpu that pacing aims at while data
/// flows fast: a quarter of what one drain may take, so the staging pipes
/// (256 pages each) never fill between drains.
pub const TARGET_PAGES: usize = MAX_READ_PAGES_PER_DRAIN / 4;
/// Shortest delay between paced drains.
pub const MIN_DRAIN: Duration = Duration::from_millis(10);

/// Drain pacing from the recent history of drains.
///
/// A full batch means data was left behind: drain again at once. While a
/// flood lasts, drains come often enough that the busiest cpu yields about
/// [`TARGET_PAGES`] each, even after a pass that found nothing (workers
/// refill the staging pipes a moment after a drain empties them): a worker
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
            return Duration::ZERO;
        }
        if self.recent <= TARGET_PAGES {
            return period;
        }
        let paced = period.mul_f64(TARGET_PAGES as f64 / self.recent as f64);
        paced.max(MIN_DRAIN).min(period)
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
        assert_eq!(pace.next(TARGET_PAGES, p), p);
        // Twice the target: half the period.
        assert_eq!(pace.next(2 * TARGET_PAGES, p), p / 2);
        assert_eq!(pace.next(MAX_READ_PAGES_PER_DRAIN, p), Duration::ZERO);
        // Empty passes right after a flood stay fast for a while...
        // (recent 256 -> 128 -> 64 -> ...)
        assert_eq!(pace.next(0, p), p / 2);
        // ...then the period again.
        assert_eq!(pace.next(0, p), p);
        assert_eq!(pace.next(0, p), p);
        // Never faster than MIN_DRAIN short of a full batch.
        let mut pace = DrainPace::default();
        assert_eq!(pace.next(MAX_READ_PAGES_PER_DRAIN - 1, p), p * 64 / 255);
        assert_eq!(
            pace.next(MAX_READ_PAGES_PER_DRAIN - 1, Duration::from_secs(0)),
            Duration::ZERO
        );
        // A short configured period stays.
        let short = Duration::from_millis(2);
        assert_eq!(pace.next(200, short), short);
    }
}
