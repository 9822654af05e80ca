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
/// After a full batch the kernel may hold a backlog that no single pass
/// shows, so the next [`FLOOD_PASSES`] passes come at [`MIN_DRAIN`].
/// Quiet: the configured period (fewer wakeups for both daemons).
#[derive(Debug, Default, Clone)]
pub struct DrainPace {
    /// Pages of the busiest cpu, halved at every pass.
    recent: usize,
    /// Fast passes left after a full batch.
    flood: u32,
}

/// Passes kept at [`MIN_DRAIN`] after a full batch.
pub const FLOOD_PASSES: u32 = 4;

impl DrainPace {
    /// The delay before the next drain after a pass whose busiest cpu
    /// gave `busiest` pages.
    pub fn next(&mut self, busiest: usize, period: Duration) -> Duration {
        self.recent = busiest.max(self.recent / 2);
        if busiest >= MAX_READ_PAGES_PER_DRAIN {
            self.flood = FLOOD_PASSES;
            return Duration::ZERO;
        }
        if self.flood > 0 {
            self.flood -= 1;
            return MIN_DRAIN.min(period);
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
        // recent 128 -> 64: back to the period.
        assert_eq!(pace.next(0, p), p);
        // A short configured period stays.
        let short = Duration::from_millis(2);
        assert_eq!(pace.next(200, short), short);
    }

    #[test]
    fn a_full_batch_keeps_drains_fast_for_a_while() {
        let p = Duration::from_millis(100);
        let mut pace = DrainPace::default();
        assert_eq!(pace.next(MAX_READ_PAGES_PER_DRAIN, p), Duration::ZERO);
        for _ in 0..FLOOD_PASSES {
            assert_eq!(pace.next(0, p), MIN_DRAIN);
        }
        // recent has decayed from 256 to 16 by now.
        assert_eq!(pace.next(0, p), p);
        // Another full batch in the middle restarts the count.
        assert_eq!(pace.next(MAX_READ_PAGES_PER_DRAIN, p), Duration::ZERO);
        assert_eq!(pace.next(10, p), MIN_DRAIN);
        assert_eq!(pace.next(MAX_READ_PAGES_PER_DRAIN, p), Duration::ZERO);
        for _ in 0..FLOOD_PASSES {
            assert_eq!(pace.next(1, p), MIN_DRAIN);
        }
    }
}
