//! Flushes: asking producers to commit what they hold, waiting for their
//! acks (CommitData.flush_request_id) or a timeout, then acting on the
//! result (consumer reply, stop after duration, clone).

use std::collections::BTreeSet;

use super::consumer_ops::CloneOptions;
use super::service::TracingService;
use super::session::{event, InstanceState};
use super::timers::{ms, Timer};
use super::types::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlushOrigin {
    Consumer {
        consumer: ConsumerId,
        token: RequestToken,
        /// Its reason is the trace's stop: the client's final flush
        /// (Ctrl-C, `--attach --stop`), named in the trace if it times out.
        stop: bool,
    },
    /// Flush before stopping (duration expiry, stop trigger).
    StopSession,
    Periodic,
    /// Flush before a periodic write into the file (`write_flush_mode`).
    FileWrite,
    Clone {
        consumer: ConsumerId,
        token: RequestToken,
        opts: CloneOptions,
    },
    /// Flush before switching a write_into_file session's output file.
    Rotate {
        consumer: ConsumerId,
        token: RequestToken,
    },
}

#[derive(Debug, Clone)]
pub struct PendingFlush {
    pub session: SessionId,
    pub pending: BTreeSet<ProducerId>,
    pub origin: FlushOrigin,
}

impl TracingService {
    /// Flush from the consumer; answered with [`Output::FlushResult`].
    pub fn flush(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        timeout_ms: u32,
        flags: u64,
        token: RequestToken,
    ) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        let timeout = if timeout_ms == 0 {
            self.sessions[&sid].flush_timeout_ms()
        } else {
            timeout_ms
        };
        self.start_flush(
            now,
            sid,
            timeout,
            flags,
            FlushOrigin::Consumer {
                consumer,
                token,
                stop: flags & 0xf == flush_flags::REASON_TRACE_STOP,
            },
        );
        Ok(())
    }

    pub(super) fn start_flush(
        &mut self,
        now: u64,
        sid: SessionId,
        timeout_ms: u32,
        flags: u64,
        origin: FlushOrigin,
    ) -> FlushRequestId {
        let id = self.next_flush_id;
        self.next_flush_id += 1;
        let mut per_producer: std::collections::BTreeMap<ProducerId, Vec<DataSourceInstanceId>> =
            Default::default();
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.stats.flushes_requested += 1;
            s.add_event(event::FLUSH_STARTED, now);
            for i in &s.instances {
                if !i.no_flush && i.state != InstanceState::Stopped {
                    per_producer.entry(i.producer).or_default().push(i.id);
                }
            }
        }
        let pending: BTreeSet<_> = per_producer.keys().copied().collect();
        for (producer, instance_ids) in per_producer {
            self.send_to_producer(
                producer,
                ProducerCommand::Flush {
                    request_id: id,
                    instance_ids,
                    flags,
                },
            );
        }
        let empty = pending.is_empty();
        self.flushes.insert(
            id,
            PendingFlush {
                session: sid,
                pending,
                origin,
            },
        );
        if empty {
            self.complete_flush(now, id, true);
        } else {
            self.timers
                .add(now + ms(timeout_ms), Timer::FlushTimeout(id));
        }
        id
    }

    /// CommitData with `flush_request_id`: every flush up to that id is done
    /// for this producer.
    pub(super) fn on_flush_ack(&mut self, now: u64, producer: ProducerId, ack: FlushRequestId) {
        let mut done = Vec::new();
        // Sorted by id: the ones up to `ack`.
        for (id, f) in self.flushes.iter_mut().take_while(|(id, _)| **id <= ack) {
            if f.pending.remove(&producer) && f.pending.is_empty() {
                done.push(*id);
            }
        }
        for id in done {
            self.complete_flush(now, id, true);
        }
    }

    /// Ends a flush (all acked, or timed out when `success` is false).
    pub(super) fn complete_flush(&mut self, now: u64, id: FlushRequestId, success: bool) {
        let Some(f) = self.flushes.remove(&id) else {
            return;
        };
        if let Some(s) = self.sessions.get_mut(&f.session) {
            if success {
                s.stats.flushes_succeeded += 1;
                s.add_event(event::ALL_DATA_SOURCES_FLUSHED, now);
            } else {
                s.stats.flushes_failed += 1;
            }
        }
        match f.origin {
            FlushOrigin::Consumer {
                consumer,
                token,
                stop,
            } => {
                if stop && !success {
                    self.note_slow_final_flush(now, f.session, f.session, &f.pending);
                }
                self.emit(Output::FlushResult {
                    consumer,
                    token,
                    success,
                })
            }
            FlushOrigin::StopSession => {
                if let Some(s) = self.sessions.get_mut(&f.session) {
                    s.stats.final_flush_outcome = if success { 1 } else { 2 };
                }
                if !success {
                    self.note_slow_final_flush(now, f.session, f.session, &f.pending);
                }
                self.stop_session(now, f.session);
            }
            FlushOrigin::Periodic => {}
            FlushOrigin::FileWrite => self.write_file_period(now, f.session),
            FlushOrigin::Clone {
                consumer,
                token,
                opts,
            } => {
                let slow = (!success).then_some(&f.pending);
                self.finish_clone(now, f.session, consumer, token, opts, slow)
            }
            FlushOrigin::Rotate { consumer, token } => {
                self.finish_rotate(now, f.session, consumer, token)
            }
        }
    }

    /// A producer disconnected: it will never ack.
    pub(super) fn flush_forget_producer(&mut self, now: u64, producer: ProducerId) {
        let mut done = Vec::new();
        for (id, f) in self.flushes.iter_mut() {
            if f.pending.remove(&producer) && f.pending.is_empty() {
                done.push(*id);
            }
        }
        for id in done {
            self.complete_flush(now, id, true);
        }
    }

    /// The session is gone: pending consumer flushes fail.
    pub(super) fn flush_forget_session(&mut self, _now: u64, sid: SessionId) {
        let ids: Vec<_> = self
            .flushes
            .iter()
            .filter(|(_, f)| f.session == sid)
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            let f = self.flushes.remove(&id).expect("listed above");
            match f.origin {
                FlushOrigin::Consumer {
                    consumer, token, ..
                } => self.emit(Output::FlushResult {
                    consumer,
                    token,
                    success: false,
                }),
                FlushOrigin::Clone {
                    consumer, token, ..
                } => self.emit(Output::CloneResult {
                    consumer,
                    token,
                    result: Err("The session was destroyed while cloning".into()),
                }),
                FlushOrigin::Rotate { consumer, token } => self.emit(Output::RotateResult {
                    consumer,
                    token,
                    result: Err("The session was destroyed while rotating".into()),
                }),
                _ => {}
            }
        }
    }

    pub(super) fn on_periodic_flush(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if !s.is_active() {
            return;
        }
        let period = s.config.flush_period_ms.filter(|&p| p > 0).unwrap_or(5000);
        let timeout = s.flush_timeout_ms();
        self.timers.add(now + ms(period), Timer::PeriodicFlush(sid));
        let flags = flush_flags::REASON_PERIODIC | flush_flags::INITIATOR_TRACED;
        self.start_flush(now, sid, timeout, flags, FlushOrigin::Periodic);
    }

    pub(super) fn on_clear_incremental_state(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if !s.is_active() {
            return;
        }
        let period = s
            .config
            .incremental_state_config
            .as_ref()
            .and_then(|c| c.clear_period_ms)
            .unwrap_or(0);
        self.clear_incremental_state_now(sid);
        if period > 0 {
            self.timers
                .add(now + ms(period), Timer::ClearIncrementalState(sid));
        }
    }

    /// ClearIncrementalState to every started data source of the session
    /// that handles it.
    pub(super) fn clear_incremental_state_now(&mut self, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        let mut per_producer: std::collections::BTreeMap<ProducerId, Vec<DataSourceInstanceId>> =
            Default::default();
        for i in &s.instances {
            if i.handles_incremental_state_clear && i.state == InstanceState::Started {
                per_producer.entry(i.producer).or_default().push(i.id);
            }
        }
        for (producer, instance_ids) in per_producer {
            self.send_to_producer(
                producer,
                ProducerCommand::ClearIncrementalState { instance_ids },
            );
        }
    }
}
