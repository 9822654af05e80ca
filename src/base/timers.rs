//! Timer heap shared by the real [`EventLoop`](super::event_loop::EventLoop)
//! and the fake-time [`TestLoop`](super::test_loop::TestLoop).
//!
//! Timers fire in deadline order; equal deadlines fire in creation order.
//! Cancelling is O(1): the heap entry stays and is skipped when popped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::{Duration, Instant};

/// Shortest period of a periodic timer.
pub const MIN_PERIOD: Duration = Duration::from_millis(1);

/// Identifies a timer. Ids are never reused within one loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId(pub u64);

#[derive(Debug)]
struct Armed {
    deadline: Instant,
    period: Option<Duration>,
    /// Bumped on every re-arm so stale heap entries can be told apart.
    generation: u64,
}

/// A min-heap of deadlines plus the live timer table.
#[derive(Debug, Default)]
pub struct TimerHeap {
    heap: BinaryHeap<Reverse<(Instant, u64, TimerId)>>,
    armed: HashMap<TimerId, Armed>,
    next_id: u64,
    next_generation: u64,
}

impl TimerHeap {
    /// An empty heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// Arms a timer first due at `now + delay`; if `period` is set it
    /// re-arms itself every `period` after that (at least [`MIN_PERIOD`],
    /// so a zero period cannot spin the loop).
    pub fn add(&mut self, now: Instant, delay: Duration, period: Option<Duration>) -> TimerId {
        let period = period.map(|p| p.max(MIN_PERIOD));
        self.next_id += 1;
        let id = TimerId(self.next_id);
        self.arm(id, now + delay, period);
        id
    }

    fn arm(&mut self, id: TimerId, deadline: Instant, period: Option<Duration>) {
        // The generation doubles as a FIFO sequence for equal deadlines.
        self.next_generation += 1;
        let generation = self.next_generation;
        self.armed.insert(
            id,
            Armed {
                deadline,
                period,
                generation,
            },
        );
        self.heap.push(Reverse((deadline, generation, id)));
    }

    /// Disarms `id`. Returns false if it was not armed (fired or unknown).
    pub fn cancel(&mut self, id: TimerId) -> bool {
        self.armed.remove(&id).is_some()
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.armed.len()
    }

    /// True if no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }

    fn drop_stale_top(&mut self) {
        while let Some(Reverse((_, generation, id))) = self.heap.peek() {
            match self.armed.get(id) {
                Some(a) if a.generation == *generation => return,
                _ => {
                    self.heap.pop();
                }
            }
        }
    }

    /// Deadline of the earliest armed timer.
    pub fn next_deadline(&mut self) -> Option<Instant> {
        self.drop_stale_top();
        self.heap.peek().map(|Reverse((d, _, _))| *d)
    }

    /// Pops the earliest timer due at or before `now`. Periodic timers are
    /// re-armed one period after their deadline (or after `now` if the loop
    /// fell more than a period behind, so a stall does not cause a burst).
    pub fn pop_due(&mut self, now: Instant) -> Option<TimerId> {
        let deadline = self.next_deadline()?;
        if deadline > now {
            return None;
        }
        let Reverse((_, _, id)) = self.heap.pop()?;
        let armed = self.armed.remove(&id)?;
        if let Some(period) = armed.period {
            let mut next = armed.deadline + period;
            if next <= now {
                next = now + period;
            }
            self.arm(id, next, Some(period));
        }
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_deadline_then_creation_order() {
        let t0 = Instant::now();
        let mut h = TimerHeap::new();
        let late = h.add(t0, Duration::from_millis(20), None);
        let a = h.add(t0, Duration::from_millis(10), None);
        let b = h.add(t0, Duration::from_millis(10), None);
        assert_eq!(h.pop_due(t0 + Duration::from_millis(9)), None);
        let now = t0 + Duration::from_millis(30);
        assert_eq!(h.pop_due(now), Some(a));
        assert_eq!(h.pop_due(now), Some(b));
        assert_eq!(h.pop_due(now), Some(late));
        assert_eq!(h.pop_due(now), None);
        assert!(h.is_empty());
    }

    #[test]
    fn cancel_skips_and_periodic_rearms() {
        let t0 = Instant::now();
        let mut h = TimerHeap::new();
        let gone = h.add(t0, Duration::from_millis(1), None);
        let tick = h.add(t0, Duration::from_millis(5), Some(Duration::from_millis(5)));
        assert!(h.cancel(gone));
        assert!(!h.cancel(gone));
        assert_eq!(h.next_deadline(), Some(t0 + Duration::from_millis(5)));
        assert_eq!(h.pop_due(t0 + Duration::from_millis(5)), Some(tick));
        assert_eq!(h.next_deadline(), Some(t0 + Duration::from_millis(10)));
        // Far behind: the next deadline is measured from now, not a burst.
        assert_eq!(h.pop_due(t0 + Duration::from_millis(100)), Some(tick));
        assert_eq!(h.pop_due(t0 + Duration::from_millis(100)), None);
        assert_eq!(h.next_deadline(), Some(t0 + Duration::from_millis(105)));
        assert!(h.cancel(tick));
        assert_eq!(h.next_deadline(), None);
    }
}
