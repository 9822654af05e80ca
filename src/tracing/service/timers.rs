//! Deadlines of the service core. The adapter asks for
//! [`TracingService::next_deadline`](super::TracingService::next_deadline)
//! and calls `on_timer(now)` when it passes; handlers re-check state, so a
//! timer outliving its session or flush is harmless.

use std::collections::BTreeSet;

use super::types::{FlushRequestId, SessionId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Timer {
    /// `duration_ms` (or a trigger's stop delay) elapsed: flush, then stop.
    StopSession(SessionId, u32),
    /// START/STOP trigger sessions: no trigger within `trigger_timeout_ms`.
    TriggerTimeout(SessionId),
    FlushTimeout(FlushRequestId),
    PeriodicFlush(SessionId),
    FileWrite(SessionId),
    /// Data sources did not acknowledge StopDataSource in time.
    StopTimeout(SessionId),
    SnapshotTick(SessionId),
    ClearIncrementalState(SessionId),
    /// CLONE_SNAPSHOT: tell the consumer about trigger `n` of the session.
    CloneTriggerHit(SessionId, usize),
    /// Ask the session's relayed producers to commit (`relay_commit`).
    RelayCommit(SessionId),
}

#[derive(Debug, Default)]
pub struct Timers {
    set: BTreeSet<(u64, u64, Timer)>,
    seq: u64,
}

impl Timers {
    pub fn add(&mut self, at_ns: u64, t: Timer) {
        self.seq += 1;
        self.set.insert((at_ns, self.seq, t));
    }

    /// Brings timer `t` forward to `at_ns` if it is armed for later.
    pub fn advance(&mut self, t: Timer, at_ns: u64) {
        let Some(&e) = self.set.iter().find(|e| e.2 == t && e.0 > at_ns) else {
            return;
        };
        self.set.remove(&e);
        self.set.insert((at_ns, e.1, t));
    }

    pub fn next_deadline(&self) -> Option<u64> {
        self.set.first().map(|e| e.0)
    }

    /// Removes and returns the earliest timer due at `now`.
    pub fn pop_due(&mut self, now: u64) -> Option<Timer> {
        let first = *self.set.first()?;
        if first.0 > now {
            return None;
        }
        self.set.remove(&first);
        Some(first.2)
    }

    /// Drops every timer of a session (when it is freed).
    pub fn cancel_session(&mut self, sid: SessionId) {
        self.set.retain(|(_, _, t)| match t {
            Timer::StopSession(s, _)
            | Timer::TriggerTimeout(s)
            | Timer::PeriodicFlush(s)
            | Timer::FileWrite(s)
            | Timer::StopTimeout(s)
            | Timer::SnapshotTick(s)
            | Timer::ClearIncrementalState(s)
            | Timer::CloneTriggerHit(s, _)
            | Timer::RelayCommit(s) => *s != sid,
            Timer::FlushTimeout(_) => true,
        });
    }

    pub fn len(&self) -> usize {
        self.set.len()
    }

    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

pub const fn ms(v: u32) -> u64 {
    v as u64 * 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_deadline_order_and_cancels() {
        let mut t = Timers::default();
        t.add(30, Timer::FileWrite(1));
        t.add(10, Timer::PeriodicFlush(2));
        t.add(20, Timer::FlushTimeout(5));
        assert_eq!(t.next_deadline(), Some(10));
        assert_eq!(t.pop_due(5), None);
        assert_eq!(t.pop_due(25), Some(Timer::PeriodicFlush(2)));
        assert_eq!(t.pop_due(25), Some(Timer::FlushTimeout(5)));
        assert_eq!(t.pop_due(25), None);
        t.cancel_session(1);
        assert!(t.is_empty());
        t.add(50, Timer::FileWrite(3));
        t.advance(Timer::FileWrite(3), 60);
        t.advance(Timer::FileWrite(4), 10);
        assert_eq!(t.next_deadline(), Some(50));
        t.advance(Timer::FileWrite(3), 10);
        assert_eq!(t.pop_due(10), Some(Timer::FileWrite(3)));
        assert!(t.is_empty());
    }
}
