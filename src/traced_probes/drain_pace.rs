//! How soon the ftrace drain timer fires again.

use std::time::Duration;

use crate::probes::ftrace::cpu_reader::MAX_READ_PAGES_PER_DRAIN;

/// A cpu that recently gave at least this many pages per drain is flooding.
pub const BUSY_PAGES: usize = 32;
/// Longest delay between drains while a cpu floods.
pub const BUSY_DRAIN: Duration = Duration::from_millis(25);
/// Shortest delay between drains that found data.
const MIN_DRAIN: Duration = Duration::from_millis(1);
/// While flooding, drains are spaced to find about this many pages on the
/// busiest cpu: half a batch, so a batch never caps the read rate.
const TARGET_PAGES: u64 = MAX_READ_PAGES_PER_DRAIN as u64 / 2;

/// Drain pacing from the recent history of drains.
///
/// A full batch means data was left behind: drain again at once. While a
/// cpu floods, the delay follows its rate so that each drain finds about
/// [`TARGET_PAGES`] (at most [`BUSY_DRAIN`], even after a pass that found
/// little: workers refill the staging pipes a moment after a drain empties
/// them, and a worker whose staging pipe is full stalls until the next
/// drain, so a fixed pace would cap the read rate below a fast writer's).
/// Quiet: the configured period (fewer wakeups for both daemons).
#[derive(Debug, Default, Clone)]
pub struct DrainPace {
    /// Pages of the busiest cpu, halved at every pass.
    recent: usize,
    /// Pages per second of the busiest cpu, averaged over recent passes
    /// (a pass that finds nothing because a worker was still refilling
    /// must not slow the pace to the cap).
    rate: f64,
}

impl DrainPace {
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
        if busiest >= MAX_READ_PAGES_PER_DRAIN {
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
        // 64 pages in 25 ms (averaged with nothing: 1.28k pages/s): 128
        // pages take 100 ms, capped at BUSY_DRAIN.
        assert_eq!(pace.next(64, MS(25), p), BUSY_DRAIN);
        // 200 pages in 10 ms: 20k pages/s, averaged to 10.64k: 12 ms.
        let d = pace.next(200, MS(10), p);
        assert!(d > MS(11) && d < MS(13), "{d:?}");
        // A pass that found nothing right after keeps a fast pace.
        let d = pace.next(0, MS(1), p);
        assert!(d > MS(23) && d <= BUSY_DRAIN, "{d:?}");
        // 250 pages in 1 ms: never below MIN_DRAIN.
        let mut pace = DrainPace::default();
        pace.next(250, MS(1), p);
        assert_eq!(pace.next(250, MS(1), p), MIN_DRAIN);
    }
}
