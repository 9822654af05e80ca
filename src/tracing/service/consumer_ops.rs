//! Consumer requests besides the session lifecycle: stats, state queries,
//! capabilities, event observation, detach/attach, clone.

use std::collections::BTreeSet;

use crate::pb::protos::mod_ObservableEvents::{
    DataSourceInstanceState, DataSourceInstanceStateChange,
};
use crate::pb::protos::mod_TracingServiceState as tss;
use crate::pb::protos::{ObservableEvents, TracingServiceCapabilities, TracingServiceState};

use super::flush::FlushOrigin;
use super::service::TracingService;
use super::session::{DsInstance, ReceivedTrigger, Session, SessionState};
use super::trace_buffer::TraceBuffer;
use super::types::*;

/// ObservableEvents.Type bits.
pub const OBSERVE_DATA_SOURCES_INSTANCES: u32 = 1;
pub const OBSERVE_ALL_DATA_SOURCES_STARTED: u32 = 2;
pub const OBSERVE_CLONE_TRIGGER_HIT: u32 = 4;

/// What a CloneSession request brings besides its target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloneOptions {
    /// The request came with an output file, required to clone a
    /// write_into_file session (the clone is the source's file so far plus
    /// what its buffers hold, written into that file).
    pub with_file: bool,
    /// The CLONE_SNAPSHOT trigger the clone is for (a
    /// `clone_snapshot_trigger` packet in the clone).
    pub trigger: Option<ReceivedTrigger>,
}

/// Which session CloneSession targets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloneSelector {
    Id(SessionId),
    UniqueName(String),
}

fn encode_events(ev: &ObservableEvents) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = quick_protobuf::Writer::new(&mut out);
    let _ = quick_protobuf::MessageWrite::write_message(ev, &mut w);
    out
}

impl TracingService {
    pub fn get_trace_stats(&self, consumer: ConsumerId) -> Result<Vec<u8>, String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        Ok(self.trace_stats_for(sid))
    }

    /// QueryServiceState. Sessions of other uids are hidden unless the
    /// consumer is root.
    pub fn query_service_state(
        &self,
        consumer: ConsumerId,
        sessions_only: bool,
    ) -> TracingServiceState {
        let uid = self.consumers.get(&consumer).map_or(u32::MAX, |c| c.uid);
        let mut st = TracingServiceState {
            supports_tracing_sessions: Some(true),
            tracing_service_version: Some(crate::SERVICE_VERSION.to_string()),
            num_sessions: Some(self.sessions.len() as i32),
            num_sessions_started: Some(
                self.sessions
                    .values()
                    .filter(|s| s.state == SessionState::Started)
                    .count() as i32,
            ),
            ..Default::default()
        };
        if !sessions_only {
            for (id, p) in &self.producers {
                st.producers.push(tss::Producer {
                    id: Some(*id as i32),
                    name: Some(p.info.name.clone()),
                    uid: Some(p.info.uid as i32),
                    pid: p.info.pid,
                    sdk_version: Some(p.info.sdk_version.clone()).filter(|v| !v.is_empty()),
                    machine_id: Some(p.machine_id).filter(|&m| m != 0),
                    ..Default::default()
                });
                for d in p.data_sources.values() {
                    st.data_sources.push(tss::DataSource {
                        ds_descriptor: Some(d.clone()),
                        producer_id: Some(*id as i32),
                    });
                }
            }
        }
        for s in self
            .sessions
            .values()
            .filter(|s| uid == 0 || s.consumer_uid == uid)
        {
            st.tracing_sessions.push(tss::TracingSession {
                id: Some(s.id),
                consumer_uid: Some(s.consumer_uid as i32),
                state: Some(s.state.name().to_string()),
                unique_session_name: s.config.unique_session_name.clone(),
                buffer_size_kb: s
                    .config
                    .buffers
                    .iter()
                    .map(|b| b.size_kb.unwrap_or(0))
                    .collect(),
                duration_ms: s.config.duration_ms,
                num_data_sources: Some(s.config.data_sources.len() as u32),
                bugreport_score: s.config.bugreport_score,
                bugreport_filename: s.config.bugreport_filename.clone(),
                is_started: Some(s.state == SessionState::Started),
                ..Default::default()
            });
        }
        st
    }

    pub fn query_capabilities(&self) -> TracingServiceCapabilities {
        use crate::pb::protos::mod_ObservableEvents::Type;
        TracingServiceCapabilities {
            has_query_capabilities: Some(true),
            observable_events: vec![
                Type::TYPE_DATA_SOURCES_INSTANCES,
                Type::TYPE_ALL_DATA_SOURCES_STARTED,
                Type::TYPE_CLONE_TRIGGER_HIT,
            ],
            has_trace_config_output_path: Some(true),
            has_clone_session: Some(true),
        }
    }

    /// ObserveEvents: `mask` of ObservableEvents.Type bits (0 = stop).
    pub fn observe_events(&mut self, consumer: ConsumerId, mask: u32) {
        let Some(c) = self.consumers.get_mut(&consumer) else {
            return;
        };
        c.observe_mask = mask;
        if mask & OBSERVE_DATA_SOURCES_INSTANCES == 0 {
            return;
        }
        // Report the current state of the consumer's instances right away.
        let Some(s) = c.session.and_then(|sid| self.sessions.get(&sid)) else {
            return;
        };
        let mut ev = ObservableEvents::default();
        for i in &s.instances {
            let started = i.state == super::session::InstanceState::Started;
            ev.instance_state_changes.push(state_change(i, started));
        }
        if !ev.instance_state_changes.is_empty() {
            self.emit(Output::ObservableEvents {
                consumer,
                events: encode_events(&ev),
            });
        }
    }

    pub(super) fn notify_instance_state(
        &mut self,
        sid: SessionId,
        inst: &DsInstance,
        started: bool,
    ) {
        let Some(c) = self.sessions.get(&sid).and_then(|s| s.consumer) else {
            return;
        };
        if self
            .consumers
            .get(&c)
            .is_some_and(|c| c.observe_mask & OBSERVE_DATA_SOURCES_INSTANCES != 0)
        {
            let ev = ObservableEvents {
                instance_state_changes: vec![state_change(inst, started)],
                ..Default::default()
            };
            self.emit(Output::ObservableEvents {
                consumer: c,
                events: encode_events(&ev),
            });
        }
    }

    /// Right after EnableTracing: the session's data source names no
    /// producer offers yet, so the client can name them at once (the
    /// trace's `data_sources_not_offered` event comes at the end).
    pub(super) fn notify_not_offered(&mut self, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        let Some(c) = s.consumer.filter(|c| {
            self.consumers
                .get(c)
                .is_some_and(|c| c.observe_mask & OBSERVE_DATA_SOURCES_INSTANCES != 0)
        }) else {
            return;
        };
        let mut missing: Vec<String> = Vec::new();
        for ds in &s.config.data_sources {
            let Some(name) = ds.config.as_ref().and_then(|c| c.name.as_deref()) else {
                continue;
            };
            if !s.read.faults.matched_names.contains(name) && !missing.iter().any(|m| m == name) {
                missing.push(name.to_owned());
            }
        }
        if missing.is_empty() {
            return;
        }
        let ev = ObservableEvents {
            tracebox_data_sources_not_offered: missing,
            ..Default::default()
        };
        self.emit(Output::ObservableEvents {
            consumer: c,
            events: encode_events(&ev),
        });
    }

    pub(super) fn notify_all_started(&mut self, consumer: ConsumerId) {
        if self
            .consumers
            .get(&consumer)
            .is_some_and(|c| c.observe_mask & OBSERVE_ALL_DATA_SOURCES_STARTED != 0)
        {
            let ev = ObservableEvents {
                all_data_sources_started: Some(true),
                ..Default::default()
            };
            self.emit(Output::ObservableEvents {
                consumer,
                events: encode_events(&ev),
            });
        }
    }

    pub(super) fn notify_clone_trigger_hit(
        &mut self,
        consumer: ConsumerId,
        hit: crate::pb::protos::mod_ObservableEvents::CloneTriggerHit,
    ) {
        if self
            .consumers
            .get(&consumer)
            .is_some_and(|c| c.observe_mask & OBSERVE_CLONE_TRIGGER_HIT != 0)
        {
            let ev = ObservableEvents {
                clone_trigger_hit: Some(hit),
                ..Default::default()
            };
            self.emit(Output::ObservableEvents {
                consumer,
                events: encode_events(&ev),
            });
        }
    }

    /// Detach: the session outlives this consumer, findable by (uid, key).
    pub fn detach(&mut self, consumer: ConsumerId, key: &str) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        let uid = self.consumers[&consumer].uid;
        if self
            .sessions
            .values()
            .any(|s| s.consumer_uid == uid && s.detach_key.as_deref() == Some(key))
        {
            return Err(format!("A session with key \"{key}\" is already detached"));
        }
        let s = self
            .sessions
            .get_mut(&sid)
            .expect("consumer_session checked");
        s.detach_key = Some(key.to_string());
        s.consumer = None;
        self.consumers.get_mut(&consumer).expect("exists").session = None;
        Ok(())
    }

    /// Attach: takes over a detached session; returns its raw TraceConfig.
    pub fn attach(&mut self, consumer: ConsumerId, key: &str) -> Result<Vec<u8>, String> {
        let c = self.consumers.get(&consumer).ok_or("unknown consumer")?;
        if c.session.is_some() {
            return Err("This consumer already has a tracing session".into());
        }
        let uid = c.uid;
        let s = self
            .sessions
            .values_mut()
            .find(|s| s.consumer_uid == uid && s.detach_key.as_deref() == Some(key))
            .ok_or_else(|| format!("No detached session with key \"{key}\""))?;
        s.detach_key = None;
        s.consumer = Some(consumer);
        s.disabled_notified = false;
        let (sid, raw) = (s.id, s.config_raw.clone());
        self.consumers.get_mut(&consumer).expect("exists").session = Some(sid);
        Ok(raw)
    }

    /// EnableTracing with `attach_notification_only`: re-arms the
    /// end-of-session notification after Attach.
    pub fn enable_tracing_notification_only(&mut self, consumer: ConsumerId) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        if matches!(self.sessions[&sid].state, SessionState::Disabled) {
            self.notify_tracing_disabled(sid, None);
        }
        Ok(())
    }

    /// CloneSession: flushes the source, then snapshots its buffers into a
    /// new read-only session owned by `consumer` ([`Output::CloneResult`]).
    pub fn clone_session(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        selector: CloneSelector,
        token: RequestToken,
        opts: CloneOptions,
    ) -> Result<(), String> {
        let c = self.consumers.get(&consumer).ok_or("unknown consumer")?;
        if c.session.is_some() {
            return Err("The consumer is already attached to another tracing session".into());
        }
        let uid = c.uid;
        let src = self
            .sessions
            .values()
            .filter(|s| s.state != SessionState::ClonedReadOnly)
            .find(|s| match &selector {
                CloneSelector::Id(id) => s.id == *id,
                CloneSelector::UniqueName(n) => {
                    s.config.unique_session_name.as_deref() == Some(n.as_str())
                }
            })
            .ok_or("Tracing session not found")?;
        if uid != 0 && src.consumer_uid != uid {
            return Err("Not allowed to clone a session from another UID".into());
        }
        if src.write_into_file && !opts.with_file {
            return Err(
                "Failed to clone 'write_into_file' session: a file descriptor is \
                        required to copy existing file"
                    .into(),
            );
        }
        let (sid, timeout) = (src.id, src.flush_timeout_ms());
        self.clear_buffers_before_clone(sid)?;
        let flags = flush_flags::REASON_TRACE_CLONE | flush_flags::INITIATOR_TRACED;
        self.start_flush(
            now,
            sid,
            timeout,
            flags,
            FlushOrigin::Clone {
                consumer,
                token,
                opts,
            },
        );
        Ok(())
    }

    /// `clear_before_clone` buffers drop what they hold before the clone's
    /// flush, so the snapshot has only what that flush brings.
    fn clear_buffers_before_clone(&mut self, sid: SessionId) -> Result<(), String> {
        let s = &self.sessions[&sid];
        for (cfg, bid) in s.config.buffers.iter().zip(&s.buffers) {
            if cfg.clear_before_clone != Some(true) {
                continue;
            }
            let Some(buf) = self.buffers.get_mut(bid) else {
                continue;
            };
            if buf.has_data() {
                *buf = TraceBuffer::new(buf.size(), buf.overwrite_policy())
                    .map_err(|e| format!("Buffer allocation failed: {e}"))?;
            }
        }
        Ok(())
    }

    pub(super) fn finish_clone(
        &mut self,
        now: u64,
        src_sid: SessionId,
        consumer: ConsumerId,
        token: RequestToken,
        opts: CloneOptions,
        slow_flush: Option<&std::collections::BTreeSet<ProducerId>>,
    ) {
        let with_file = opts.with_file;
        let result = self.make_clone(src_sid, consumer, opts.trigger);
        if let Ok(c) = &result {
            self.note_clone_faults(now, src_sid, c.session);
            if let Some(pending) = slow_flush {
                self.note_slow_final_flush(now, src_sid, c.session, pending);
            }
            if c.was_write_into_file {
                // In this order the adapter copies the source's file as it
                // is now, then appends what the source has not yet written.
                self.emit(Output::CopyFileForClone {
                    token,
                    from: src_sid,
                    to: c.session,
                });
                self.write_into_file_pass(now, c.session);
                if let Some(s) = self.sessions.get_mut(&c.session) {
                    s.file_closed = true;
                }
                self.emit(Output::CloseFile { session: c.session });
            }
        }
        debug_assert!(with_file || !result.as_ref().is_ok_and(|c| c.was_write_into_file));
        self.emit(Output::CloneResult {
            consumer,
            token,
            result,
        });
    }

    /// The snapshot of one source buffer: a read-only copy, or the buffer
    /// itself with `transfer_on_clone` (the source gets an empty one).
    fn snapshot_buffer(&mut self, bid: BufferId, transfer: bool) -> Result<TraceBuffer, String> {
        let buf = self.buffers.get_mut(&bid).ok_or("buffer missing")?;
        if !transfer {
            return Ok(buf.clone_read_only());
        }
        let fresh = TraceBuffer::new(buf.size(), buf.overwrite_policy())
            .map_err(|e| format!("Buffer allocation failed: {e}"))?;
        Ok(std::mem::replace(buf, fresh).into_read_only())
    }

    fn make_clone(
        &mut self,
        src_sid: SessionId,
        consumer: ConsumerId,
        clone_trigger: Option<ReceivedTrigger>,
    ) -> Result<CloneResult, String> {
        let uid = self
            .consumers
            .get(&consumer)
            .ok_or("The consumer disconnected")?
            .uid;
        if self.consumers[&consumer].session.is_some() {
            return Err("The consumer is already attached to another tracing session".into());
        }
        let src = self
            .sessions
            .get(&src_sid)
            .ok_or("The source session is gone")?;
        let plan: Vec<(BufferId, bool)> = src
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let transfer = src.config.buffers.get(i).and_then(|c| c.transfer_on_clone);
                (*b, transfer == Some(true))
            })
            .collect();
        let (cfg, raw, ds_raw, snapshot, triggers, wif) = (
            src.config.clone(),
            src.config_raw.clone(),
            src.ds_configs_raw.clone(),
            src.initial_clock_snapshot.clone(),
            src.triggers.clone(),
            src.write_into_file,
        );
        // A write_into_file clone continues the source's file: same
        // sequence ids, and the packets written once per trace (config,
        // uuid, system info) are already there.
        let (read, seq_ids, file_bytes) = if wif {
            let mut read = src.read.clone();
            read.stats_due = true;
            // A clone taken while a cut is pending is one file: what the
            // cut holds for the source's next file goes into it, and its
            // sequences are no longer held.
            if let Some(d) = read.divert.take() {
                read.held_for_new_file.extend(d.into_held());
            }
            (read, src.seq_ids.clone(), src.file_bytes_written)
        } else {
            let read = super::session::ReadState {
                stats_due: true,
                filter: src.read.filter.clone(),
                ..Default::default()
            };
            (read, Default::default(), 0)
        };
        let mut copies = Vec::new();
        for (b, transfer) in plan {
            copies.push(self.snapshot_buffer(b, transfer)?);
        }
        let mut ids = Vec::new();
        for buf in copies {
            let Some(id) = self.alloc_buffer_id() else {
                for id in ids {
                    self.buffers.remove(&id);
                }
                return Err("Buffer ids exhausted".into());
            };
            self.buffers.insert(id, buf);
            ids.push(id);
        }
        let uuid = (self.env.random_u64() as i64, self.env.random_u64() as i64);
        let sid = self.alloc_session_id();
        self.sessions.insert(
            sid,
            Session {
                id: sid,
                consumer: Some(consumer),
                consumer_uid: uid,
                config: cfg,
                config_raw: raw,
                ds_configs_raw: ds_raw,
                buffers: ids,
                state: SessionState::ClonedReadOnly,
                instances: Vec::new(),
                producers: BTreeSet::new(),
                detach_key: None,
                uuid,
                initial_clock_snapshot: snapshot,
                triggers,
                clone_trigger,
                read,
                seq_ids,
                stats: Default::default(),
                write_into_file: wif,
                file_bytes_written: file_bytes,
                file_closed: !wif,
                stop_generation: 0,
                all_started_notified: true,
                disabled_notified: true,
                start_time_ns: 0,
                relay_commit_armed: false,
            },
        );
        self.consumers.get_mut(&consumer).expect("checked").session = Some(sid);
        Ok(CloneResult {
            session: sid,
            uuid_msb: uuid.0,
            uuid_lsb: uuid.1,
            was_write_into_file: wif,
        })
    }
}

fn state_change(i: &DsInstance, started: bool) -> DataSourceInstanceStateChange {
    DataSourceInstanceStateChange {
        producer_name: Some(i.producer_name.clone()),
        data_source_name: Some(i.name.clone()),
        state: Some(if started {
            DataSourceInstanceState::DATA_SOURCE_INSTANCE_STATE_STARTED
        } else {
            DataSourceInstanceState::DATA_SOURCE_INSTANCE_STATE_STOPPED
        }),
        tracebox_setup_problems: if started {
            i.setup_problems.clone()
        } else {
            Vec::new()
        },
    }
}
