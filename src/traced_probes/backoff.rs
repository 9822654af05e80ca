//! Reconnection delays: 100 ms, doubling up to 30 s (upstream
//! traced_probes' policy), back to 100 ms after a successful connection.

use std::time::Duration;

pub const INITIAL: Duration = Duration::from_millis(100);
pub const MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: INITIAL }
    }
}

impl Backoff {
    /// Delay before the next attempt; each call doubles the following one.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(MAX);
        d
    }

    /// A connection worked: start over from the initial delay.
    pub fn reset(&mut self) {
        self.next = INITIAL;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_resets() {
        let mut b = Backoff::default();
        let ms: Vec<u128> = (0..12).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(
            ms,
            [100, 200, 400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000, 30000]
        );
        b.reset();
        assert_eq!(b.next_delay(), INITIAL);
    }
}
