//! Relayed producers under shared-memory emulation keep their chunks in a
//! private buffer until a chunk fills or a flush comes: a link that dies
//! takes every chunk not yet sent with it. So the service asks each
//! relayed producer of a running session for a flush every
//! `relay_commit_period_ms` (traced's `--relay-commit-period-ms`, 1000 by
//! default): a dying link then loses at most that window, and the end line
//! says so (`faults`).
//!
//! These flushes are fire-and-forget: nothing waits for their acks, and a
//! producer that does not answer is only missing from the window it could
//! have saved (acks are cumulative, so a later one also settles them).

use super::service::TracingService;
use super::session::InstanceState;
use super::timers::{ms, Timer};
use super::types::*;

/// The default window a relayed producer's data may be lost in.
pub const DEFAULT_RELAY_COMMIT_PERIOD_MS: u32 = 1000;
/// Bounds of `--relay-commit-period-ms`.
pub const MIN_RELAY_COMMIT_PERIOD_MS: u32 = 50;
pub const MAX_RELAY_COMMIT_PERIOD_MS: u32 = 60_000;

impl TracingService {
    /// Sets how often relayed producers are asked to commit.
    pub fn set_relay_commit_period_ms(&mut self, period_ms: u32) -> Result<(), String> {
        let (min, max) = (MIN_RELAY_COMMIT_PERIOD_MS, MAX_RELAY_COMMIT_PERIOD_MS);
        if !(min..=max).contains(&period_ms) {
            return Err(format!(
                "--relay-commit-period-ms {period_ms}: not within {min}..{max}"
            ));
        }
        self.relay_commit_period_ms = period_ms;
        Ok(())
    }

    pub fn relay_commit_period_ms(&self) -> u32 {
        self.relay_commit_period_ms
    }

    /// An instance of `producer` starts in session `sid`: if the producer
    /// is relayed, rounds run (once per session, while it has relayed
    /// instances).
    pub(super) fn arm_relay_commit(&mut self, now: u64, sid: SessionId, producer: ProducerId) {
        if self
            .producers
            .get(&producer)
            .is_none_or(|p| p.machine_id == 0)
        {
            return;
        }
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if !std::mem::replace(&mut s.relay_commit_armed, true) {
            let at = now + ms(self.relay_commit_period_ms);
            self.timers.add(at, Timer::RelayCommit(sid));
        }
    }

    /// One round: a flush to every relayed producer with a running
    /// instance in the session, then the next round (none once there is
    /// no such instance: the next relayed start arms them again).
    pub(super) fn on_relay_commit(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        s.relay_commit_armed = false;
        if !s.is_active() {
            return;
        }
        let mut per_producer: std::collections::BTreeMap<ProducerId, Vec<DataSourceInstanceId>> =
            Default::default();
        let mut relayed_live = None;
        for i in &s.instances {
            let relayed = self
                .producers
                .get(&i.producer)
                .is_some_and(|p| p.machine_id != 0);
            if !relayed || i.state == InstanceState::Stopped {
                continue;
            }
            relayed_live = Some(i.producer);
            if !i.no_flush && i.state == InstanceState::Started {
                per_producer.entry(i.producer).or_default().push(i.id);
            }
        }
        if let Some(p) = relayed_live {
            self.arm_relay_commit(now, sid, p);
        }
        if per_producer.is_empty() {
            return;
        }
        let request_id = self.next_flush_id;
        self.next_flush_id += 1;
        let flags = super::flush_flags::REASON_PERIODIC | super::flush_flags::INITIATOR_TRACED;
        for (producer, instance_ids) in per_producer {
            self.send_to_producer(
                producer,
                ProducerCommand::Flush {
                    request_id,
                    instance_ids,
                    flags,
                },
            );
        }
    }
}
