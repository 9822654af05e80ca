//! Deterministic fake-time loop for testing logic written against
//! [`TaskRunner`]. Nothing sleeps: time moves only through
//! [`TestLoop::advance_time`].
//!
//! In production the same logic runs on the real loop: the application's
//! [`Handler`](super::event_loop::Handler) forwards to it, e.g.
//! `fn on_timer(&mut self, ctl: &mut LoopCtl<'_, M>, id: TimerId) {
//! self.logic.on_timer(ctl, id) }` (a `LoopCtl` is a `TaskRunner`).
//!
//! ```
//! use std::time::Duration;
//! use tracebox::base::event_loop::{TaskRunner, TimerId};
//! use tracebox::base::test_loop::{Logic, TestLoop};
//!
//! struct Beeper { beeps: u32 }
//! impl Logic for Beeper {
//!     type Msg = ();
//!     fn on_timer(&mut self, _rt: &mut dyn TaskRunner<()>, _id: TimerId) { self.beeps += 1; }
//! }
//!
//! let mut tl = TestLoop::new();
//! tl.add_periodic_timer(Duration::from_secs(1));
//! let mut b = Beeper { beeps: 0 };
//! tl.advance_time(Duration::from_millis(3500), &mut b);
//! assert_eq!(b.beeps, 3);
//! ```

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::event_loop::{TaskRunner, TimerId};
use super::timers::TimerHeap;

/// Callbacks of loop-agnostic logic (the I/O-free part of a [`Handler`]).
///
/// [`Handler`]: super::event_loop::Handler
pub trait Logic {
    /// Message type posted through [`TaskRunner::post`].
    type Msg;
    /// A timer fired.
    fn on_timer(&mut self, _rt: &mut dyn TaskRunner<Self::Msg>, _id: TimerId) {}
    /// A posted message arrived.
    fn on_message(&mut self, _rt: &mut dyn TaskRunner<Self::Msg>, _msg: Self::Msg) {}
}

/// Fake-time loop: a timer heap, a message queue and a clock.
#[derive(Debug)]
pub struct TestLoop<M> {
    now: Instant,
    timers: TimerHeap,
    queue: VecDeque<M>,
}

impl<M> Default for TestLoop<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M> TestLoop<M> {
    /// A loop whose clock starts at an arbitrary fixed instant.
    pub fn new() -> Self {
        TestLoop {
            now: Instant::now(),
            timers: TimerHeap::new(),
            queue: VecDeque::new(),
        }
    }

    /// Number of armed timers.
    pub fn pending_timers(&self) -> usize {
        self.timers.len()
    }

    /// Number of queued messages.
    pub fn pending_messages(&self) -> usize {
        self.queue.len()
    }

    /// Delivers queued messages and timers due at the current fake time
    /// until none are left. Time does not move.
    pub fn run_until_idle<L: Logic<Msg = M>>(&mut self, logic: &mut L) {
        loop {
            if let Some(msg) = self.queue.pop_front() {
                logic.on_message(self, msg);
                continue;
            }
            match self.timers.pop_due(self.now) {
                Some(id) => logic.on_timer(self, id),
                None => return,
            }
        }
    }

    /// Moves time forward by `d`, stopping at each timer deadline on the
    /// way (so callbacks see `now()` equal to their deadline), running
    /// until idle at each stop.
    pub fn advance_time<L: Logic<Msg = M>>(&mut self, d: Duration, logic: &mut L) {
        let end = self.now + d;
        self.run_until_idle(logic);
        while let Some(deadline) = self.timers.next_deadline() {
            if deadline > end {
                break;
            }
            self.now = self.now.max(deadline);
            self.run_until_idle(logic);
        }
        self.now = end;
        self.run_until_idle(logic);
    }

    /// Jumps to the next timer deadline and runs until idle. Returns false
    /// (and does nothing) if no timer is armed.
    pub fn advance_to_next_timer<L: Logic<Msg = M>>(&mut self, logic: &mut L) -> bool {
        match self.timers.next_deadline() {
            Some(deadline) => {
                self.now = self.now.max(deadline);
                self.run_until_idle(logic);
                true
            }
            None => false,
        }
    }
}

impl<M> TaskRunner<M> for TestLoop<M> {
    fn now(&self) -> Instant {
        self.now
    }
    fn add_timer(&mut self, delay: Duration) -> TimerId {
        self.timers.add(self.now, delay, None)
    }
    fn add_periodic_timer(&mut self, period: Duration) -> TimerId {
        self.timers.add(self.now, period, Some(period))
    }
    fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id)
    }
    fn post(&mut self, msg: M) {
        self.queue.push_back(msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records (time offset in ms, event) and reacts to a few scripted cases.
    struct Script {
        start: Instant,
        log: Vec<(u128, String)>,
        periodic: Option<TimerId>,
        to_cancel: Option<TimerId>,
        ticks: u32,
        spawned: bool,
    }

    impl Script {
        fn new(start: Instant) -> Self {
            Script {
                start,
                log: vec![],
                periodic: None,
                to_cancel: None,
                ticks: 0,
                spawned: false,
            }
        }
        fn at(&self, rt: &dyn TaskRunner<&'static str>) -> u128 {
            (rt.now() - self.start).as_millis()
        }
    }

    impl Logic for Script {
        type Msg = &'static str;
        fn on_timer(&mut self, rt: &mut dyn TaskRunner<&'static str>, id: TimerId) {
            let t = self.at(rt);
            if Some(id) == self.periodic {
                self.ticks += 1;
                self.log.push((t, format!("tick{}", self.ticks)));
                if self.ticks == 2 {
                    // Cancelling another pending timer from a callback works.
                    assert!(rt.cancel_timer(self.to_cancel.unwrap()));
                    rt.post("after-tick2");
                }
            } else {
                self.log.push((t, "oneshot".into()));
                // A zero-delay timer armed now fires in this same pass.
                if t == 15 && !self.spawned {
                    self.spawned = true;
                    rt.add_timer(Duration::ZERO);
                }
            }
        }
        fn on_message(&mut self, rt: &mut dyn TaskRunner<&'static str>, msg: &'static str) {
            let t = self.at(rt);
            self.log.push((t, msg.to_string()));
        }
    }

    #[test]
    fn timers_fire_in_order_at_their_deadlines() {
        let mut tl = TestLoop::new();
        let mut s = Script::new(tl.now());
        s.periodic = Some(tl.add_periodic_timer(Duration::from_millis(10)));
        tl.add_timer(Duration::from_millis(15));
        s.to_cancel = Some(tl.add_timer(Duration::from_millis(25)));
        tl.post("first");
        tl.advance_time(Duration::from_millis(35), &mut s);
        let got: Vec<_> = s.log.iter().map(|(t, e)| (*t, e.as_str())).collect();
        assert_eq!(
            got,
            vec![
                (0, "first"),
                (10, "tick1"),
                (15, "oneshot"),
                (15, "oneshot"),
                (20, "tick2"),
                (20, "after-tick2"),
                (30, "tick3"),
            ]
        );
        assert_eq!(tl.pending_timers(), 1); // only the periodic one
        assert!(tl.cancel_timer(s.periodic.unwrap()));
        assert!(!tl.advance_to_next_timer(&mut s));
        assert_eq!(s.ticks, 3);
    }

    #[test]
    fn run_until_idle_does_not_move_time() {
        let mut tl = TestLoop::new();
        let mut s = Script::new(tl.now());
        tl.add_timer(Duration::from_millis(1));
        tl.post("m");
        tl.run_until_idle(&mut s);
        assert_eq!(s.log, vec![(0, "m".to_string())]);
        assert!(tl.advance_to_next_timer(&mut s));
        assert_eq!(s.log.last().unwrap(), &(1, "oneshot".to_string()));
    }
}
