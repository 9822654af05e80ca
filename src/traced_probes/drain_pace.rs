//! How soon the ftrace drain timer fires again.

use std::time::Duration;

use crate::probes::ftrace::cpu_reader::MAX_READ_PAGES_PER_DRAIN;

/// A cpu that recently gave at least this many pages per drain is flooding.
pub const BUSY_PAGES: usize = 32;
/// Longest delay between drains while a cpu floods.
pub const BUSY_DRAIN: Duration = Duration::from_millis(25);
/// Shortest delay between drains that found data.
const MIN_DRAIN: Duration = Duration::from_millis(1);
/// Pages per cpu a drain takes unless the cpu floods: small drains parse
/// pages the kernel wrote moments ago, still in cache (measured here: 12 %
/// less recorder CPU at 500k events/s than with 256-page drains).
pub const SMALL_BATCH: usize = MAX_READ_PAGES_PER_DRAIN / 2;
/// From this rate of the busiest cpu on (~1M events/s), drains take whole
/// batches: at the highest rates the passes themselves must cost less.
const FLOOD_PAGES_PER_S: f64 = 12_000.0;
/// While flooding, drains are spaced to find about this many pages on the
/// busiest cpu: half a small batch, so a batch never caps the read rate.
const TARGET_PAGES: u64 = SMALL_BATCH as u64 / 2;

/// Drain pacing from the recent history of drains.
///
/// A full batch means data was left behind: drain again at once. While a
/// cpu floods, the delay follows its rate so that each drain finds about
/// [`TARGET_PAGES`] (at most [`BUSY_DRAIN`], even after a pass that found
/// little: workers refill the staging pipes a moment after a drain empties
/// them, and a worker whose staging pipe is full stalls until the next
/// drain, so a fixed pace would cap the read rate below a fast writer's).
/// Quiet: the configured period (fewer wakeups for both daemons).
#[derive(Debug, Clone)]
pub struct DrainPace {
    /// Pages of the busiest cpu, halved at every pass.
    recent: usize,
    /// Pages per second of the busiest cpu, averaged over recent passes
    /// (a pass that finds nothing because a worker was still refilling
    /// must not slow the pace to the cap).
    rate: f64,
    /// Pages per cpu the next drain may take: [`SMALL_BATCH`], or
    /// [`MAX_READ_PAGES_PER_DRAIN`] after a full drain or while the rate
    /// is at least [`FLOOD_PAGES_PER_S`].
    batch: usize,
}

impl Default for DrainPace {
    fn default() -> Self {
        DrainPace {
            recent: 0,
            rate: 0.0,
            batch: SMALL_BATCH,
        }
    }
}

impl DrainPace {
    /// Pages per cpu the next drain may take.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The delay before the next drain after a pass whose busiest cpu
    /// gave `busiest` pages, `since` the previous pass.
    pub fn next(&mut self, busiest: usize, since: Duration, period: Duration) -> Duration {
        self.recent = busiest.max(self.recent / 2);
        let secs = since.as_secs_f64();
        let seen = if secs > 0.0 {
            busiest as f64 / secs
        } else {
            self.rate
        };
        self.rate = (self.rate + seen) / 2.0;
        let full = busiest >= self.batch;
        self.batch = if full || self.rate >= FLOOD_PAGES_PER_S {
            MAX_READ_PAGES_PER_DRAIN
        } else {
            SMALL_BATCH
        };
        if full {
            return Duration::ZERO;
        }
        if self.recent < BUSY_PAGES {
            return period;
        }
        let cap = period.min(BUSY_DRAIN);
        if self.rate <= 0.0 {
            return cap;
        }
        // Time the busiest cpu takes for TARGET_PAGES at the recent rate.
        let d = Duration::from_secs_f64((TARGET_PAGES as f64 / self.rate).min(cap.as_secs_f64()));
        d.clamp(MIN_DRAIN.min(cap), cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn pace_follows_the_busiest_cpu_and_decays() {
        let p = MS(100);
        let mut pace = DrainPace::default();
        assert_eq!(pace.next(0, p, p), p);
        assert_eq!(pace.next(BUSY_PAGES - 1, p, p), p);
        assert_eq!(
            pace.next(MAX_READ_PAGES_PER_DRAIN, MS(1), p),
            Duration::ZERO
        );
        // Passes that find little right after a flood stay fast for a
        // while (recent 256 -> 128 -> 64 -> 32)...
        for _ in 0..3 {
            assert!(pace.next(1, MS(1), p) <= BUSY_DRAIN);
        }
        // ...then the period again.
        assert_eq!(pace.next(1, MS(1), p), p);
        // A short configured period stays.
        let short = MS(2);
        assert_eq!(pace.next(BUSY_PAGES, MS(2), short), short);
    }

    #[test]
    fn a_flood_is_drained_at_its_rate() {
        let p = MS(100);
        let mut pace = DrainPace::default();
        // 64 pages in 25 ms (averaged with nothing: 1.28k pages/s): 64
        // pages take 50 ms, capped at BUSY_DRAIN.
        assert_eq!(pace.next(64, MS(25), p), BUSY_DRAIN);
        // 100 pages in 10 ms: 10k pages/s, averaged to 5.64k: 11.3 ms.
        let d = pace.next(100, MS(10), p);
        assert!(d > MS(11) && d < MS(12), "{d:?}");
        // A pass that found nothing right after keeps a fast pace.
        let d = pace.next(0, MS(1), p);
        assert!(d > MS(22) && d <= BUSY_DRAIN, "{d:?}");
        // 250 pages in 1 ms: never below MIN_DRAIN.
        let mut pace = DrainPace::default();
        pace.next(250, MS(1), p);
        assert_eq!(pace.next(250, MS(1), p), MIN_DRAIN);
    }

    #[test]
    fn drains_stay_small_unless_full_or_flooding() {
        let p = MS(100);
        let mut pace = DrainPace::default();
        assert_eq!(pace.batch(), SMALL_BATCH);
        // 100 pages per 20 ms (5k pages/s): small drains.
        for _ in 0..4 {
            pace.next(100, MS(20), p);
        }
        assert_eq!(pace.batch(), SMALL_BATCH);
        // A full small drain: the next one may take a whole batch, at once.
        assert_eq!(pace.next(SMALL_BATCH, MS(20), p), Duration::ZERO);
        assert_eq!(pace.batch(), MAX_READ_PAGES_PER_DRAIN);
        // Back to 5k pages/s: small again once the average settles.
        for _ in 0..4 {
            pace.next(100, MS(20), p);
        }
        assert_eq!(pace.batch(), SMALL_BATCH);
        // 20k pages/s: whole batches while it lasts.
        for _ in 0..4 {
            pace.next(200, MS(10), p);
        }
        assert_eq!(pace.batch(), MAX_READ_PAGES_PER_DRAIN);
    }
}
