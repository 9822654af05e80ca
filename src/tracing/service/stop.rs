//! Stopping and freeing sessions: DisableTracing, StopDataSource acks and
//! their timeout, duration expiry, FreeBuffers.

use super::flush::FlushOrigin;
use super::service::TracingService;
use super::session::{event, InstanceState, SessionState};
use super::timers::{ms, Timer};
use super::types::*;

impl TracingService {
    /// DisableTracing from the consumer.
    pub fn disable_tracing(&mut self, now: u64, consumer: ConsumerId) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        self.stop_session(now, sid);
        Ok(())
    }

    /// Sends StopDataSource to every instance; the session becomes Disabled
    /// once all acks arrived (or after `data_source_stop_timeout_ms`).
    pub(super) fn stop_session(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if !s.is_active() {
            return;
        }
        self.scrape_session_smbs(sid);
        self.note_unfulfilled(now, sid);
        let s = self.sessions.get_mut(&sid).expect("checked above");
        s.state = SessionState::Stopping;
        let timeout = s.stop_timeout_ms();
        let ids: Vec<_> = s.instances.iter().map(|i| i.id).collect();
        for id in ids {
            self.stop_instance(now, sid, id, false);
        }
        self.timers.add(now + ms(timeout), Timer::StopTimeout(sid));
        self.check_all_stopped(now, sid);
    }

    /// Sends StopDataSource for one instance. `remove` drops the instance
    /// (its producer unregistered the data source).
    pub(super) fn stop_instance(
        &mut self,
        now: u64,
        sid: SessionId,
        id: DataSourceInstanceId,
        remove: bool,
    ) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let Some(inst) = s.instance_mut(id) else {
            return;
        };
        if matches!(inst.state, InstanceState::Stopping | InstanceState::Stopped) && !remove {
            return;
        }
        let was_running = !matches!(inst.state, InstanceState::Stopping | InstanceState::Stopped);
        // One that never reported started (its setup failed, e.g. a
        // refused linux.perf) is named as such; it wrote nothing to wait
        // for, so it is not also a stop that timed out.
        let never_started = matches!(
            inst.state,
            InstanceState::Configured | InstanceState::Starting
        );
        inst.state = if inst.will_notify_on_stop && !remove && !never_started {
            InstanceState::Stopping
        } else {
            InstanceState::Stopped
        };
        let inst = inst.clone();
        if remove {
            s.instances.retain(|i| i.id != id);
        }
        if was_running {
            self.send_to_producer(
                inst.producer,
                ProducerCommand::StopDataSource { instance_id: id },
            );
        }
        if inst.state == InstanceState::Stopped && was_running {
            self.notify_instance_state(sid, &inst, false);
        }
        self.check_all_stopped(now, sid);
    }

    /// NotifyDataSourceStopped from a producer.
    pub fn notify_data_source_stopped(
        &mut self,
        now: u64,
        producer: ProducerId,
        id: DataSourceInstanceId,
    ) {
        if let Some(sid) = self.advance_instance(
            producer,
            id,
            InstanceState::Stopping,
            InstanceState::Stopped,
        ) {
            self.check_all_stopped(now, sid);
        }
    }

    pub(super) fn check_all_stopped(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if s.state != SessionState::Stopping {
            return;
        }
        if s.instances
            .iter()
            .any(|i| i.state == InstanceState::Stopping)
        {
            return;
        }
        self.finalize_disable(now, sid);
    }

    pub(super) fn on_stop_timeout(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if s.state != SessionState::Stopping {
            return;
        }
        self.note_stop_timed_out(now, sid);
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        for i in s.instances.iter_mut() {
            i.state = InstanceState::Stopped;
        }
        self.finalize_disable(now, sid);
    }

    /// The session is now Disabled: final file drain, consumer notified.
    pub(super) fn finalize_disable(&mut self, now: u64, sid: SessionId) {
        let snapshot = self.env.clock_snapshot();
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        s.state = SessionState::Disabled;
        s.add_event(event::TRACING_DISABLED, now);
        s.read.stats_due = true;
        if !snapshot.is_empty() && !s.initial_clock_snapshot.is_empty() {
            s.read.pending_clock_snapshots.push(snapshot);
        }
        let write_into_file = s.write_into_file && !s.file_closed;
        if write_into_file {
            self.release_rotation_hold(sid);
            self.write_into_file_pass(now, sid);
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.file_closed = true;
            }
            self.emit(Output::CloseFile { session: sid });
        }
        let error = self
            .sessions
            .get(&sid)
            .and_then(|s| s.read.faults.file_error.clone());
        self.notify_tracing_disabled(sid, error);
    }

    /// Completes the consumer's pending EnableTracing, once.
    pub(super) fn notify_tracing_disabled(&mut self, sid: SessionId, error: Option<String>) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if s.disabled_notified {
            return;
        }
        s.disabled_notified = true;
        if let Some(c) = s.consumer {
            self.emit(Output::TracingDisabled { consumer: c, error });
        }
    }

    /// `duration_ms` or a trigger's stop delay elapsed: flush, then stop.
    pub(super) fn on_stop_session_timer(&mut self, now: u64, sid: SessionId, generation: u32) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if s.stop_generation != generation || !s.is_active() {
            return;
        }
        let timeout = s.flush_timeout_ms();
        let flags = flush_flags::REASON_TRACE_STOP | flush_flags::INITIATOR_TRACED;
        self.start_flush(now, sid, timeout, flags, FlushOrigin::StopSession);
    }

    /// Schedules flush + stop `delay_ms` from now (replacing earlier plans).
    pub(super) fn schedule_stop(&mut self, now: u64, sid: SessionId, delay_ms: u32) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        s.stop_generation += 1;
        let generation = s.stop_generation;
        self.timers
            .add(now + ms(delay_ms), Timer::StopSession(sid, generation));
    }

    /// FreeBuffers from the consumer: destroys its session.
    pub fn free_buffers(&mut self, now: u64, consumer: ConsumerId) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        self.free_session(now, sid);
        if let Some(c) = self.consumers.get_mut(&consumer) {
            c.session = None;
        }
        Ok(())
    }

    /// Stops (if needed) and destroys a session and its buffers.
    pub(super) fn free_session(&mut self, now: u64, sid: SessionId) {
        if self.sessions.get(&sid).is_some_and(|s| s.is_active()) {
            self.stop_session(now, sid);
        }
        if self
            .sessions
            .get(&sid)
            .is_some_and(|s| s.state == SessionState::Stopping)
        {
            self.finalize_disable(now, sid);
        }
        let Some(s) = self.sessions.remove(&sid) else {
            return;
        };
        self.timers.cancel_session(sid);
        for b in &s.buffers {
            self.buffers.remove(b);
            for p in self.producers.values_mut() {
                p.allowed_buffers.remove(b);
            }
        }
        self.flush_forget_session(now, sid);
        if let Some(c) = s.consumer.and_then(|c| self.consumers.get_mut(&c)) {
            if c.session == Some(sid) {
                c.session = None;
            }
        }
    }
}
