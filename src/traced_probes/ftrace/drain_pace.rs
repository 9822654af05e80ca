//! How soon the ftrace drain timer fires again.

use std::time::Duration;

use crate::traced_probes::ftrace::cpu_reader::MAX_READ_PAGES_PER_DRAIN;

/// A cpu whose recent rate gives at least this many pages per drain at the
/// configured period is busy: drained faster than the period.
const BUSY_PAGES: usize = 32;
/// Longest delay between drains while a cpu is busy.
const BUSY_DRAIN: Duration = Duration::from_millis(25);
/// Shortest delay between drains that found data.
const MIN_DRAIN: Duration = Duration::from_millis(1);
/// Pages per cpu a drain takes while no cpu is busy.
const SMALL_BATCH: usize = MAX_READ_PAGES_PER_DRAIN / 2;
/// While busy, drains take whole batches and are spaced to find about this
/// many pages on the busiest cpu (at most [`BUSY_DRAIN`] apart). Measured at
/// 500k markers/s (5k pages/s): aiming at 64 pages cost 7 % more CPU than
/// at 128, and small batches that came back full (each followed at once by
/// another pass) 4-7 % more than whole ones: every pass has its commit and
/// wakes traced.
const TARGET_PAGES: u64 = MAX_READ_PAGES_PER_DRAIN as u64;

/// How long the rate estimate remembers: longer than the gaps between a
/// worker's bursts (a worker moves ~5 % of its buffer per wakeup, every few
/// ms in a flood), so passes that fall between bursts do not end a flood.
const RATE_MEMORY: Duration = Duration::from_millis(50);

/// Drain pacing from the recent history of drains.
///
/// A full batch means data was left behind: drain again at once. While a
/// cpu floods, the delay follows its rate so that each drain finds about
/// [`TARGET_PAGES`] (at most [`BUSY_DRAIN`], even after a pass that found
/// little: workers refill the staging pipes a moment after a drain empties
/// them, and a worker whose staging pipe is full stalls until the next
/// drain, so a fixed pace would cap the read rate below a fast writer's).
/// Quiet (a drain at the configured period would find fewer than
/// [`BUSY_PAGES`]): the period (fewer wakeups for both daemons).
///
/// The rate is averaged over time, not over passes: right after a drain
/// empties the staging pipes, several quick passes can find nothing while
/// the writer goes on; averaged per pass, they once made the pace fall back
/// to the full period in the middle of a flood (seen here with two writers
/// at the maximum rate: a 100 ms gap, then a periodic flush, then loss).
#[derive(Debug, Clone)]
pub struct DrainPace {
    /// Pages per second of the busiest cpu, an exponential average with
    /// time constant [`RATE_MEMORY`].
    rate: f64,
    /// Pages per cpu the next drain may take: [`SMALL_BATCH`], or
    /// [`MAX_READ_PAGES_PER_DRAIN`] after a full drain or while busy.
    batch: usize,
}

impl Default for DrainPace {
    fn default() -> Self {
        DrainPace {
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
        self.rate = averaged_rate(self.rate, busiest, since);
        let full = busiest >= self.batch;
        let busy = self.rate * period.as_secs_f64() >= BUSY_PAGES as f64;
        self.batch = if full || busy {
            MAX_READ_PAGES_PER_DRAIN
        } else {
            SMALL_BATCH
        };
        if full {
            return Duration::ZERO;
        }
        if !busy {
            return period;
        }
        let cap = period.min(BUSY_DRAIN);
        // Time the busiest cpu takes for TARGET_PAGES at the recent rate.
        let d = Duration::from_secs_f64((TARGET_PAGES as f64 / self.rate).min(cap.as_secs_f64()));
        d.clamp(MIN_DRAIN.min(cap), cap)
    }
}

/// `rate` (pages/s) updated with `pages` found over `since`: the old
/// estimate fades by exp(-since / RATE_MEMORY) and the new pages weigh the
/// rest, so a burst found right after another pass (since ~ 0) still counts
/// (pages / RATE_MEMORY) and a long quiet pass counts for its length.
fn averaged_rate(rate: f64, pages: usize, since: Duration) -> f64 {
    let tau = RATE_MEMORY.as_secs_f64();
    let dt = since.as_secs_f64();
    let keep = (-dt / tau).exp();
    // (1 - keep) / dt tends to 1 / tau as dt goes to 0.
    let weight = if dt > tau * 1e-6 {
        (1.0 - keep) / dt
    } else {
        1.0 / tau
    };
    rate * keep + pages as f64 * weight
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn quiet_cpus_wait_the_period_and_a_flood_ends_in_time() {
        let p = MS(100);
        let mut pace = DrainPace::default();
        assert_eq!(pace.next(0, p, p), p);
        // 20 pages per 100 ms: below BUSY_PAGES per period.
        for _ in 0..10 {
            assert_eq!(pace.next(20, p, p), p);
        }
        // A full batch: back at once.
        assert_eq!(pace.next(SMALL_BATCH, p, p), Duration::ZERO);
        // Nothing more: fast passes for a while, then the period, after
        // about RATE_MEMORY * ln(rate / busy rate), not after N passes.
        let (mut waited, mut since) = (Duration::ZERO, Duration::ZERO);
        loop {
            let d = pace.next(0, since, p);
            if d == p {
                break;
            }
            assert!(d <= BUSY_DRAIN, "{d:?}");
            since = d.max(MS(1));
            waited += since;
            assert!(waited < MS(1000), "never quiet again");
        }
        assert!(waited > MS(50), "quiet after {waited:?}");
        // A short configured period stays.
        let short = MS(2);
        let mut pace = DrainPace::default();
        for _ in 0..50 {
            assert!(pace.next(BUSY_PAGES, MS(2), short) <= short);
        }
    }

    #[test]
    fn a_flood_is_drained_at_its_rate() {
        let p = MS(100);
        let mut pace = DrainPace::default();
        // 20k pages/s found every 10 ms: the average converges; drains are
        // spaced to find TARGET_PAGES (12.8 ms).
        let mut d = Duration::ZERO;
        for _ in 0..50 {
            d = pace.next(200, MS(10), p);
        }
        assert!(d > MS(12) && d < MS(13), "{d:?}");
        // 255 pages per 0.5 ms: never below MIN_DRAIN.
        let mut pace = DrainPace::default();
        for _ in 0..300 {
            d = pace.next(255, Duration::from_micros(500), p);
        }
        assert_eq!(d, MIN_DRAIN);
        // A slow cpu that is still busy at this period: at most BUSY_DRAIN.
        let mut pace = DrainPace::default();
        for _ in 0..50 {
            d = pace.next(40, p, p);
        }
        assert_eq!(d, BUSY_DRAIN);
    }

    #[test]
    fn passes_between_a_workers_bursts_do_not_end_a_flood() {
        // A worker moves 103 pages every 8 ms (~13k pages/s); passes every
        // ~2 ms mostly find nothing. Averaged per pass, four empty passes
        // in a row once dropped the pace to the 100 ms period.
        let p = MS(100);
        let mut pace = DrainPace::default();
        for round in 0..100 {
            let d = pace.next(103, MS(2), p);
            assert!(d <= BUSY_DRAIN, "round {round}: {d:?}");
            for _ in 0..3 {
                let d = pace.next(0, MS(2), p);
                assert!(d <= BUSY_DRAIN, "round {round}: {d:?}");
            }
        }
    }

    #[test]
    fn drains_are_small_only_while_quiet() {
        let p = MS(100);
        let mut pace = DrainPace::default();
        assert_eq!(pace.batch(), SMALL_BATCH);
        // 20 pages per 100 ms: quiet, small drains.
        for _ in 0..10 {
            pace.next(20, p, p);
        }
        assert_eq!(pace.batch(), SMALL_BATCH);
        // A full small drain: the next one may take a whole batch, at once.
        assert_eq!(pace.next(SMALL_BATCH, p, p), Duration::ZERO);
        assert_eq!(pace.batch(), MAX_READ_PAGES_PER_DRAIN);
        // 5k pages/s: busy, whole batches, never full at this pace.
        for _ in 0..20 {
            let d = pace.next(100, MS(20), p);
            assert!(d > Duration::ZERO && d <= BUSY_DRAIN, "{d:?}");
            assert_eq!(pace.batch(), MAX_READ_PAGES_PER_DRAIN);
        }
        // Quiet again: small once the average has faded.
        for _ in 0..10 {
            pace.next(0, p, p);
        }
        assert_eq!(pace.batch(), SMALL_BATCH);
    }

    #[test]
    fn the_rate_average_is_over_time() {
        // Steady 10k pages/s measured with any pass length converges to 10k.
        for step in [MS(1), MS(10), MS(100)] {
            let mut r = 0.0;
            for _ in 0..(2000 / step.as_millis()) {
                r = averaged_rate(r, (10_000.0 * step.as_secs_f64()) as usize, step);
            }
            assert!((r - 10_000.0).abs() < 100.0, "{step:?}: {r}");
        }
        // Back-to-back passes (since 0) still count their pages.
        assert!(averaged_rate(0.0, 50, Duration::ZERO) > 0.0);
        // Half of the old estimate is gone after RATE_MEMORY * ln 2.
        let half = RATE_MEMORY.mul_f64(std::f64::consts::LN_2);
        let r = averaged_rate(1000.0, 0, half);
        assert!((r - 500.0).abs() < 1.0, "{r}");
    }
}
