//! The service core: connection bookkeeping, id allocation, timer dispatch.
//! Session logic lives in the sibling modules (`enable`, `stop`, `flush`,
//! `commit`, `triggers`, `read_pass`, `consumer_ops`), each an `impl` block
//! on [`TracingService`].

use crate::mem::small_map::SmallMap;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::pb::protos::DataSourceDescriptor;
use crate::tracing::core::smb_abi::SmbAbi;

use super::flush::PendingFlush;
use super::producer::Producer;
use super::session::Session;
use super::timers::{Timer, Timers};
use super::trace_buffer::TraceBuffer;
use super::types::*;

pub const MAX_SESSIONS: usize = 15;
pub const MAX_SESSIONS_PER_UID: usize = 5;
const MAX_PRODUCERS: usize = 1024;
/// Bounds what one producer can make the service remember.
const MAX_DATA_SOURCES_PER_PRODUCER: usize = 1024;

/// A connected consumer.
#[derive(Debug, Clone)]
pub struct Consumer {
    pub uid: u32,
    pub session: Option<SessionId>,
    /// ObservableEvents.Type bits the consumer subscribed to.
    pub observe_mask: u32,
}

/// The tracing service state machine. See the module docs of
/// `tracing::service` for the input/output contract.
pub struct TracingService {
    pub(super) env: Box<dyn ServiceEnv>,
    /// Uid stamped on the service's own packets.
    pub(super) service_uid: u32,
    pub(super) producers: SmallMap<ProducerId, Producer>,
    pub(super) consumers: SmallMap<ConsumerId, Consumer>,
    pub(super) sessions: SmallMap<SessionId, Session>,
    pub(super) buffers: SmallMap<BufferId, TraceBuffer>,
    pub(super) flushes: SmallMap<FlushRequestId, PendingFlush>,
    pub(super) outputs: VecDeque<Output>,
    pub(super) timers: Timers,
    last_producer_id: ProducerId,
    last_buffer_id: BufferId,
    next_consumer_id: ConsumerId,
    next_session_id: SessionId,
    next_instance_id: DataSourceInstanceId,
    pub(super) next_flush_id: FlushRequestId,
    pub(super) producers_seen: u64,
    /// Relay connections dropped for their identity frame, ever.
    pub(super) relay_drops: u64,
    /// How often relayed producers are asked to commit (`relay_commit`).
    pub(super) relay_commit_period_ms: u32,
    /// Relayed machines (ids 1..), their system info and clock syncs.
    pub(super) machines: super::machines::Machines,
    /// TraceConfig.lockdown_mode: only producers of the service's uid.
    pub(super) lockdown: bool,
    /// Service-wide counts of rejected commits and patches (TraceStats).
    pub(super) chunks_discarded: u64,
    pub(super) patches_discarded: u64,
    pub(super) data_sources_seen: u64,
    /// write_into_file buffers handed back by the adapter, reused so each
    /// pass does not map and fault in a fresh megabyte.
    pub(super) spare_file_bufs: Vec<Vec<u8>>,
    /// A commit filled a buffer past half since its last read (see
    /// `write_early`).
    pub(super) buffer_half_full: bool,
}

impl TracingService {
    pub fn new(env: Box<dyn ServiceEnv>, service_uid: u32) -> Self {
        TracingService {
            env,
            service_uid,
            producers: SmallMap::new(),
            consumers: SmallMap::new(),
            sessions: SmallMap::new(),
            buffers: SmallMap::new(),
            flushes: SmallMap::new(),
            outputs: VecDeque::new(),
            timers: Timers::default(),
            last_producer_id: 0,
            last_buffer_id: 0,
            next_consumer_id: 1,
            next_session_id: 1,
            next_instance_id: 1,
            next_flush_id: 1,
            producers_seen: 0,
            machines: Default::default(),
            relay_commit_period_ms: super::relay_commit::DEFAULT_RELAY_COMMIT_PERIOD_MS,
            relay_drops: 0,
            lockdown: false,
            chunks_discarded: 0,
            buffer_half_full: false,
            patches_discarded: 0,
            data_sources_seen: 0,
            spare_file_bufs: Vec::new(),
        }
    }

    /// Takes everything the core produced since the last call, in order.
    pub fn take_outputs(&mut self) -> Vec<Output> {
        self.outputs.drain(..).collect()
    }

    /// Gives back the bytes of an [`Output::WriteToFile`] once written, so
    /// the next write_into_file pass reuses the allocation.
    pub fn recycle_file_buffer(&mut self, mut data: Vec<u8>) {
        // Periodic passes write one buffer per step; the final pass at stop
        // emits several before any is written back.
        const KEEP_AT_MOST: usize = 4;
        const MAX_CAPACITY: usize = 4 << 20;
        if self.spare_file_bufs.len() < KEEP_AT_MOST && data.capacity() <= MAX_CAPACITY {
            data.clear();
            self.spare_file_bufs.push(data);
        }
    }

    /// Earliest time `on_timer` has work to do.
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.next_deadline()
    }

    /// Runs every timer due at `now`.
    pub fn on_timer(&mut self, now: u64) {
        while let Some(t) = self.timers.pop_due(now) {
            match t {
                Timer::StopSession(sid, generation) => {
                    self.on_stop_session_timer(now, sid, generation)
                }
                Timer::TriggerTimeout(sid) => self.on_trigger_timeout(now, sid),
                Timer::FlushTimeout(id) => self.complete_flush(now, id, false),
                Timer::PeriodicFlush(sid) => self.on_periodic_flush(now, sid),
                Timer::FileWrite(sid) => self.on_file_write_timer(now, sid),
                Timer::StopTimeout(sid) => self.on_stop_timeout(now, sid),
                Timer::SnapshotTick(sid) => self.on_snapshot_tick(now, sid),
                Timer::ClearIncrementalState(sid) => self.on_clear_incremental_state(now, sid),
                Timer::CloneTriggerHit(sid, n) => self.on_clone_trigger_hit(sid, n),
                Timer::RelayCommit(sid) => self.on_relay_commit(now, sid),
            }
        }
    }

    pub(super) fn emit(&mut self, o: Output) {
        self.outputs.push_back(o);
    }

    pub(super) fn send_to_producer(&mut self, producer: ProducerId, cmd: ProducerCommand) {
        self.emit(Output::ProducerCommand { producer, cmd });
    }

    // ---- ids ----

    fn alloc_producer_id(&mut self) -> Option<ProducerId> {
        for _ in 0..u16::MAX {
            self.last_producer_id = self.last_producer_id.wrapping_add(1).max(1);
            if !self.producers.contains_key(&self.last_producer_id) {
                return Some(self.last_producer_id);
            }
        }
        None
    }

    pub(super) fn alloc_buffer_id(&mut self) -> Option<BufferId> {
        for _ in 0..u16::MAX {
            self.last_buffer_id = self.last_buffer_id.wrapping_add(1).max(1);
            if !self.buffers.contains_key(&self.last_buffer_id) {
                return Some(self.last_buffer_id);
            }
        }
        None
    }

    pub(super) fn alloc_session_id(&mut self) -> SessionId {
        let id = self.next_session_id;
        self.next_session_id += 1;
        id
    }

    pub(super) fn alloc_instance_id(&mut self) -> DataSourceInstanceId {
        let id = self.next_instance_id;
        self.next_instance_id += 1;
        id
    }

    // ---- producers ----

    /// A producer finished InitializeConnection. `provided_smb` is the SMB
    /// the producer brought, already validated by the adapter.
    pub fn connect_producer(
        &mut self,
        info: ProducerInfo,
        provided_smb: Option<ProvidedSmb>,
    ) -> Result<ProducerId, String> {
        if self.producers.len() >= MAX_PRODUCERS {
            return Err("too many producers connected".into());
        }
        if self.lockdown && info.uid != self.service_uid {
            return Err(format!(
                "lockdown mode: producers of uid {} are refused",
                info.uid
            ));
        }
        let machine_id = match &info.machine_id_hint {
            None => 0,
            Some(hint) => self.machines.id_for(hint, &info.machine_name)?,
        };
        let id = self.alloc_producer_id().ok_or("producer ids exhausted")?;
        let mut p = Producer::new(info);
        p.machine_id = machine_id;
        if let Some(smb) = provided_smb {
            let abi = SmbAbi::new(Arc::clone(&smb.mem), smb.page_size)
                .map_err(|e| format!("producer-provided SMB rejected: {e}"))?;
            p.smb = Some(abi);
            p.smb_provided = true;
        }
        self.producers.insert(id, p);
        self.producers_seen += 1;
        Ok(id)
    }

    /// For a producer that brought its own SMB: the empty SetupTracing to
    /// push once its GetAsyncCommand stream is open.
    pub fn on_producer_command_stream_open(&mut self, producer: ProducerId) {
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        if p.smb_provided && !p.setup_tracing_sent {
            p.setup_tracing_sent = true;
            let page_size_kb = p.smb.as_ref().map_or(4, |s| s.page_size() / 1024) as u32;
            self.send_to_producer(
                producer,
                ProducerCommand::SetupTracing {
                    page_size_kb,
                    service_created_smb: false,
                },
            );
        }
    }

    /// The producer's connection closed. Its committed data stays in the
    /// buffers; its data source instances are gone.
    pub fn disconnect_producer(&mut self, now: u64, producer: ProducerId) {
        self.on_producer_vanishing(now, producer);
        if self.producers.remove(&producer).is_none() {
            return;
        }
        let sids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for sid in sids {
            let Some(s) = self.sessions.get_mut(&sid) else {
                continue;
            };
            let before = s.instances.len();
            let removed: Vec<_> = s
                .instances
                .iter()
                .filter(|i| i.producer == producer)
                .cloned()
                .collect();
            s.instances.retain(|i| i.producer != producer);
            if before != s.instances.len() {
                for inst in removed {
                    self.notify_instance_state(sid, &inst, false);
                }
                self.check_all_started(now, sid);
                self.check_all_stopped(now, sid);
            }
        }
        self.flush_forget_producer(now, producer);
    }

    pub fn register_data_source(
        &mut self,
        now: u64,
        producer: ProducerId,
        desc: DataSourceDescriptor,
    ) -> Result<(), String> {
        let name = desc.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err("Data source name is empty".into());
        }
        let p = self
            .producers
            .get_mut(&producer)
            .ok_or("unknown producer")?;
        if p.data_sources.len() >= MAX_DATA_SOURCES_PER_PRODUCER
            && !p.data_sources.contains_key(&name)
        {
            return Err(format!(
                "Too many data sources registered (max {MAX_DATA_SOURCES_PER_PRODUCER})"
            ));
        }
        p.data_sources.insert(name.clone(), desc);
        self.data_sources_seen += 1;
        // Sessions already running pick the new data source up.
        let sids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for sid in sids {
            self.setup_matching_instances(now, sid, Some((producer, &name)));
        }
        Ok(())
    }

    /// Replaces a descriptor (matched by `id`, else by name).
    pub fn update_data_source(&mut self, producer: ProducerId, desc: DataSourceDescriptor) {
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        let key = p
            .data_sources
            .iter()
            .find(|(_, d)| desc.id.is_some() && d.id == desc.id)
            .map(|(k, _)| k.clone())
            .or_else(|| desc.name.clone());
        if let Some(k) = key {
            if p.data_sources.contains_key(&k) {
                p.data_sources.insert(k, desc);
            }
        }
    }

    pub fn unregister_data_source(&mut self, now: u64, producer: ProducerId, name: &str) {
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        p.data_sources.remove(name);
        let sids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for sid in sids {
            let Some(s) = self.sessions.get_mut(&sid) else {
                continue;
            };
            let ids: Vec<_> = s
                .instances
                .iter()
                .filter(|i| i.producer == producer && i.name == name)
                .map(|i| i.id)
                .collect();
            for id in ids {
                self.stop_instance(now, sid, id, true);
            }
        }
    }

    pub fn register_trace_writer(
        &mut self,
        producer: ProducerId,
        writer_id: u32,
        target_buffer: u32,
    ) {
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        let (Ok(w), Ok(b)) = (u16::try_from(writer_id), u16::try_from(target_buffer)) else {
            p.abi_violations += 1;
            return;
        };
        if w == 0 || p.writers.len() >= 32 * 1024 {
            p.abi_violations += 1;
            return;
        }
        p.writers.insert(w, b);
        if let Some(buf) = self.buffers.get_mut(&b) {
            buf.forget_evicted(producer, w);
        }
    }

    pub fn unregister_trace_writer(&mut self, producer: ProducerId, writer_id: u32) {
        if let (Some(p), Ok(w)) = (self.producers.get_mut(&producer), u16::try_from(writer_id)) {
            p.writers.remove(&w);
        }
    }

    // ---- consumers ----

    pub fn connect_consumer(&mut self, uid: u32) -> ConsumerId {
        let id = self.next_consumer_id;
        self.next_consumer_id += 1;
        self.consumers.insert(
            id,
            Consumer {
                uid,
                session: None,
                observe_mask: 0,
            },
        );
        id
    }

    /// The consumer went away: its session is destroyed unless detached.
    pub fn disconnect_consumer(&mut self, now: u64, consumer: ConsumerId) {
        let Some(c) = self.consumers.remove(&consumer) else {
            return;
        };
        if let Some(sid) = c.session {
            if self
                .sessions
                .get(&sid)
                .is_some_and(|s| s.detach_key.is_none())
            {
                self.free_session(now, sid);
            }
        }
    }

    /// True while `sid` is detached (no consumer until an Attach).
    pub fn session_is_detached(&self, sid: SessionId) -> bool {
        self.sessions
            .get(&sid)
            .is_some_and(|s| s.detach_key.is_some())
    }

    /// The consumer's session, if any.
    pub fn consumer_session(&self, consumer: ConsumerId) -> Option<SessionId> {
        self.consumers
            .get(&consumer)?
            .session
            .filter(|s| self.sessions.contains_key(s))
    }

    // ---- introspection for adapters and tests ----

    pub fn session_ids(&self) -> Vec<SessionId> {
        self.sessions.keys().copied().collect()
    }

    pub fn session_state(&self, sid: SessionId) -> Option<super::session::SessionState> {
        self.sessions.get(&sid).map(|s| s.state)
    }

    pub fn producer_smb(&self, producer: ProducerId) -> Option<&SmbAbi> {
        self.producers.get(&producer)?.smb.as_ref()
    }

    pub fn num_producers(&self) -> usize {
        self.producers.len()
    }
}
