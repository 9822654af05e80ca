//! Creating and starting sessions: EnableTracing, StartTracing, data source
//! matching and setup, lazy SMB creation.

use std::collections::BTreeSet;

use crate::pb::protos::mod_TraceConfig::mod_BufferConfig::FillPolicy;
use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::pb::protos::TraceConfig;
use crate::tracing::core::smb_abi::{choose_shm_sizes, SmbAbi};

use super::config_validation::{trigger_mode, validate_trace_config};
use super::name_matcher::regex_full_match;
use super::raw_proto::{
    decode_message, raw_data_source_configs, rewrite_data_source_config, OwnedDsFields,
};
use super::service::{TracingService, MAX_SESSIONS, MAX_SESSIONS_PER_UID};
use super::session::{event, DsInstance, InstanceState, Session, SessionState};
use super::timers::{ms, Timer};
use super::trace_buffer::{OverwritePolicy, TraceBuffer};
use super::types::*;

const DEFAULT_SNAPSHOT_INTERVAL_MS: u32 = 10_000;
const DEFAULT_FILE_WRITE_PERIOD_MS: u32 = 5000;
const MIN_FILE_WRITE_PERIOD_MS: u32 = 100;

impl TracingService {
    /// EnableTracing. `config_raw` is the consumer's TraceConfig bytes;
    /// `has_output_file` tells whether the adapter holds an output fd for
    /// `write_into_file` (passed with the request, or opened from
    /// `output_path` by the adapter). On success the EnableTracing reply
    /// stays pending until [`Output::TracingDisabled`].
    pub fn enable_tracing(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        config_raw: &[u8],
        has_output_file: bool,
    ) -> Result<SessionId, String> {
        let uid = self.consumers.get(&consumer).ok_or("unknown consumer")?.uid;
        if self.consumer_session(consumer).is_some() {
            return Err(
                "A Consumer is trying to EnableTracing() but another tracing session is \
                        already active (forgot a call to FreeBuffers() ?)"
                    .into(),
            );
        }
        let cfg: TraceConfig = decode_message(config_raw)
            .map_err(|e| format!("Failed to decode the TraceConfig: {e}"))?;
        let ds_raw = raw_data_source_configs(config_raw).ok_or("Malformed TraceConfig")?;
        validate_trace_config(&cfg)?;
        if let Some(name) = cfg.unique_session_name.as_deref().filter(|n| !n.is_empty()) {
            let clash = self.sessions.values().any(|s| {
                s.state != SessionState::ClonedReadOnly
                    && s.config.unique_session_name.as_deref() == Some(name)
            });
            if clash {
                return Err(format!(
                    "A trace with this unique session name ({name}) already exists"
                ));
            }
        }
        let live = self
            .sessions
            .values()
            .filter(|s| s.state != SessionState::ClonedReadOnly);
        let (total, per_uid) = live.fold((0, 0), |(t, u), s| {
            (t + 1, u + (s.consumer_uid == uid) as usize)
        });
        if per_uid >= MAX_SESSIONS_PER_UID {
            return Err(format!(
                "Too many concurrent tracing sesions ({per_uid}) for uid {uid}"
            ));
        }
        if total >= MAX_SESSIONS {
            return Err(format!("Too many concurrent tracing sesions ({total})"));
        }
        let write_into_file = cfg.write_into_file.unwrap_or(false);
        if write_into_file && !has_output_file {
            return Err(
                "The TraceConfig had write_into_file set but no output file was specified".into(),
            );
        }

        let mut buffers = Vec::with_capacity(cfg.buffers.len());
        for b in &cfg.buffers {
            let policy = match b.fill_policy.unwrap_or_default() {
                FillPolicy::DISCARD => OverwritePolicy::Discard,
                _ => OverwritePolicy::Overwrite,
            };
            let size = b.size_kb.unwrap_or(0) as usize * 1024;
            let created = TraceBuffer::new(size, policy).map_err(|e| e.to_string());
            let id = self
                .alloc_buffer_id()
                .ok_or_else(|| "Buffer ids exhausted".to_string());
            match (created, id) {
                (Ok(buf), Ok(id)) => {
                    self.buffers.insert(id, buf);
                    buffers.push(id);
                }
                (Err(e), _) | (_, Err(e)) => {
                    for id in buffers {
                        self.buffers.remove(&id);
                    }
                    return Err(format!("Failed to allocate tracing buffers: {e}"));
                }
            }
        }

        let sid = self.alloc_session_id();
        let uuid = match (cfg.trace_uuid_msb, cfg.trace_uuid_lsb) {
            (Some(m), Some(l)) if m != 0 || l != 0 => (m, l),
            _ => (self.env.random_u64() as i64, self.env.random_u64() as i64),
        };
        let mode = trigger_mode(&cfg);
        let deferred = cfg.deferred_start.unwrap_or(false);
        let session = Session {
            id: sid,
            consumer: Some(consumer),
            consumer_uid: uid,
            config: cfg,
            config_raw: config_raw.to_vec(),
            ds_configs_raw: ds_raw,
            buffers,
            state: SessionState::Configured,
            instances: Vec::new(),
            producers: BTreeSet::new(),
            detach_key: None,
            uuid,
            initial_clock_snapshot: Vec::new(),
            triggers: Vec::new(),
            read: Default::default(),
            seq_ids: Default::default(),
            stats: Default::default(),
            write_into_file,
            file_bytes_written: 0,
            file_closed: false,
            stop_generation: 0,
            all_started_notified: false,
            disabled_notified: false,
            start_time_ns: 0,
        };
        self.sessions.insert(sid, session);
        if let Some(c) = self.consumers.get_mut(&consumer) {
            c.session = Some(sid);
        }
        self.setup_matching_instances(now, sid, None);

        match mode {
            TriggerMode::START_TRACING
            | TriggerMode::STOP_TRACING
            | TriggerMode::CLONE_SNAPSHOT => {
                let timeout = self.sessions[&sid]
                    .config
                    .trigger_config
                    .as_ref()
                    .and_then(|t| t.trigger_timeout_ms);
                self.timers
                    .add(now + ms(timeout.unwrap_or(0)), Timer::TriggerTimeout(sid));
            }
            TriggerMode::UNSPECIFIED => {}
        }
        if !deferred && mode != TriggerMode::START_TRACING {
            self.start_session(now, sid);
        }
        Ok(sid)
    }

    /// StartTracing (for `deferred_start` sessions).
    pub fn start_tracing(&mut self, now: u64, consumer: ConsumerId) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        if self.sessions[&sid].state != SessionState::Configured {
            return Err(
                "StartTracing() called on a session that is not in CONFIGURED state".into(),
            );
        }
        if trigger_mode(&self.sessions[&sid].config) == TriggerMode::START_TRACING {
            return Err("StartTracing() is not allowed on a START_TRACING trigger session".into());
        }
        self.start_session(now, sid);
        Ok(())
    }

    /// ChangeTraceConfig: only the producer name filters of existing
    /// data source entries may change; producers newly matching get the
    /// data source (instances already running are left alone).
    pub fn change_trace_config(
        &mut self,
        now: u64,
        consumer: ConsumerId,
        config_raw: &[u8],
    ) -> Result<(), String> {
        let sid = self
            .consumer_session(consumer)
            .ok_or("No tracing session for this consumer")?;
        let new: TraceConfig = decode_message(config_raw)
            .map_err(|e| format!("Failed to decode the TraceConfig: {e}"))?;
        let s = self
            .sessions
            .get_mut(&sid)
            .expect("consumer_session checked");
        if !s.is_active() {
            return Err("ChangeTraceConfig() on a session that is not running".into());
        }
        let strip = |c: &TraceConfig| {
            let mut c = c.clone();
            for ds in &mut c.data_sources {
                ds.producer_name_filter.clear();
                ds.producer_name_regex_filter.clear();
            }
            c
        };
        if strip(&s.config) != strip(&new) {
            return Err("ChangeTraceConfig() may only change producer_name_filter and producer_name_regex_filter".into());
        }
        for (old, new) in s.config.data_sources.iter_mut().zip(new.data_sources) {
            old.producer_name_filter = new.producer_name_filter;
            old.producer_name_regex_filter = new.producer_name_regex_filter;
        }
        self.setup_matching_instances(now, sid, None);
        Ok(())
    }

    /// Configured -> Started: starts every instance and arms timers.
    pub(super) fn start_session(&mut self, now: u64, sid: SessionId) {
        let snapshot = self.env.clock_snapshot();
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if s.state != SessionState::Configured {
            return;
        }
        s.state = SessionState::Started;
        s.start_time_ns = now;
        s.initial_clock_snapshot = snapshot;
        s.add_event(event::TRACING_STARTED, now);
        let cfg = &s.config;
        let mut arm = Vec::new();
        let stop_after = match trigger_mode(cfg) {
            TriggerMode::UNSPECIFIED => cfg.duration_ms.unwrap_or(0),
            _ => 0, // the trigger timeout / stop delay decide
        };
        if stop_after > 0 {
            arm.push((
                now + ms(stop_after),
                Timer::StopSession(sid, s.stop_generation),
            ));
        }
        let write_flush_auto = s.write_into_file;
        if let Some(p) = cfg.flush_period_ms.filter(|&p| p > 0) {
            arm.push((now + ms(p), Timer::PeriodicFlush(sid)));
        } else if write_flush_auto {
            arm.push((
                now + ms(DEFAULT_FILE_WRITE_PERIOD_MS),
                Timer::PeriodicFlush(sid),
            ));
        }
        if s.write_into_file {
            arm.push((now + ms(file_write_period_ms(cfg)), Timer::FileWrite(sid)));
        }
        let builtin = cfg.builtin_data_sources.clone().unwrap_or_default();
        if !builtin.disable_clock_snapshotting.unwrap_or(false) {
            let p = builtin
                .snapshot_interval_ms
                .filter(|&v| v > 0)
                .unwrap_or(DEFAULT_SNAPSHOT_INTERVAL_MS);
            arm.push((now + ms(p), Timer::SnapshotTick(sid)));
        }
        if let Some(p) = cfg
            .incremental_state_config
            .as_ref()
            .and_then(|c| c.clear_period_ms)
            .filter(|&p| p > 0)
        {
            arm.push((now + ms(p), Timer::ClearIncrementalState(sid)));
        }
        for (at, t) in arm {
            self.timers.add(at, t);
        }
        let ids: Vec<_> = s.instances.iter().map(|i| i.id).collect();
        for id in ids {
            self.start_instance(now, sid, id);
        }
        self.check_all_started(now, sid);
    }

    /// Sets up instances for every (config entry, producer) pair that
    /// matches; `only` restricts to one producer's newly registered source.
    pub(super) fn setup_matching_instances(
        &mut self,
        now: u64,
        sid: SessionId,
        only: Option<(ProducerId, &str)>,
    ) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if !s.is_active() {
            return;
        }
        let mut todo = Vec::new();
        for (idx, ds) in s.config.data_sources.iter().enumerate() {
            let Some(name) = ds.config.as_ref().and_then(|c| c.name.as_deref()) else {
                continue;
            };
            for (pid, p) in &self.producers {
                if let Some((op, oname)) = only {
                    if op != *pid || oname != name {
                        continue;
                    }
                }
                if !p.data_sources.contains_key(name) {
                    continue;
                }
                let pname = p.info.name.as_str();
                let exact = &ds.producer_name_filter;
                let regex = &ds.producer_name_regex_filter;
                let passes = (exact.is_empty() && regex.is_empty())
                    || exact.iter().any(|f| f == pname)
                    || regex.iter().any(|r| regex_full_match(r, pname));
                let already = s
                    .instances
                    .iter()
                    .any(|i| i.producer == *pid && i.name == name);
                if passes && !already {
                    todo.push((idx, *pid));
                }
            }
        }
        for (idx, pid) in todo {
            self.setup_instance(now, sid, idx, pid);
        }
    }

    fn setup_instance(&mut self, now: u64, sid: SessionId, ds_idx: usize, producer: ProducerId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        let ds = &s.config.data_sources[ds_idx];
        let cfg = ds.config.clone().unwrap_or_default();
        let name = cfg.name.clone().unwrap_or_default();
        let Some(&global) = s.buffers.get(cfg.target_buffer.unwrap_or(0) as usize) else {
            return;
        };
        let (shm_kb, page_kb) = self.producers.get(&producer).map_or((0, 0), |p| {
            s.config
                .producers
                .iter()
                .find(|pc| pc.producer_name.as_deref() == Some(p.info.name.as_str()))
                .map_or((0, 0), |pc| {
                    (pc.shm_size_kb.unwrap_or(0), pc.page_size_kb.unwrap_or(0))
                })
        });
        let owned = OwnedDsFields {
            target_buffer: global as u32,
            trace_duration_ms: s.duration_ms(),
            stop_timeout_ms: s.stop_timeout_ms(),
            enable_extra_guardrails: s.config.enable_extra_guardrails.unwrap_or(false),
            session_initiator: 0,
            tracing_session_id: sid,
            prefer_suspend_clock_for_duration: s
                .config
                .prefer_suspend_clock_for_duration
                .unwrap_or(false),
        };
        let raw = rewrite_data_source_config(&s.ds_configs_raw[ds_idx], &owned);
        if !self.ensure_smb(producer, shm_kb, page_kb) {
            return;
        }
        let Some(p) = self.producers.get_mut(&producer) else {
            return;
        };
        let desc = p.data_sources.get(&name).cloned().unwrap_or_default();
        p.allowed_buffers.insert(global);
        let producer_name = p.info.name.clone();
        let id = self.alloc_instance_id();
        let inst = DsInstance {
            id,
            producer,
            producer_name,
            name,
            state: InstanceState::Configured,
            will_notify_on_start: desc.will_notify_on_start.unwrap_or(false),
            will_notify_on_stop: desc.will_notify_on_stop.unwrap_or(false),
            handles_incremental_state_clear: desc.handles_incremental_state_clear.unwrap_or(false),
            no_flush: desc.no_flush.unwrap_or(false),
            config: raw.clone(),
        };
        let started = {
            let s = self.sessions.get_mut(&sid).expect("checked above");
            s.instances.push(inst);
            s.producers.insert(producer);
            s.state == SessionState::Started
        };
        self.send_to_producer(
            producer,
            ProducerCommand::SetupDataSource {
                instance_id: id,
                config: raw,
            },
        );
        if started {
            self.start_instance(now, sid, id);
            self.check_all_started(now, sid);
        }
    }

    /// Creates the producer's SMB on first use and queues SetupTracing.
    fn ensure_smb(&mut self, producer: ProducerId, cfg_shm_kb: u32, cfg_page_kb: u32) -> bool {
        let Some(p) = self.producers.get(&producer) else {
            return false;
        };
        if p.smb.is_some() {
            return true;
        }
        let (size, page) = choose_shm_sizes(
            cfg_shm_kb,
            cfg_page_kb,
            p.info.shm_size_hint_bytes,
            p.info.page_size_hint_bytes,
        );
        let Some(mem) = self.env.create_smb(producer, size, page) else {
            return false;
        };
        let Ok(abi) = SmbAbi::new(mem, page) else {
            return false;
        };
        let p = self.producers.get_mut(&producer).expect("checked above");
        p.smb = Some(abi);
        p.setup_tracing_sent = true;
        self.send_to_producer(
            producer,
            ProducerCommand::SetupTracing {
                page_size_kb: (page / 1024) as u32,
                service_created_smb: true,
            },
        );
        true
    }

    fn start_instance(&mut self, _now: u64, sid: SessionId, id: DataSourceInstanceId) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let Some(inst) = s.instance_mut(id) else {
            return;
        };
        if inst.state != InstanceState::Configured {
            return;
        }
        inst.state = if inst.will_notify_on_start {
            InstanceState::Starting
        } else {
            InstanceState::Started
        };
        let inst = inst.clone();
        self.send_to_producer(
            inst.producer,
            ProducerCommand::StartDataSource {
                instance_id: id,
                config: inst.config.clone(),
            },
        );
        if inst.state == InstanceState::Started {
            self.notify_instance_state(sid, &inst, true);
        }
    }

    /// NotifyDataSourceStarted from a producer.
    pub fn notify_data_source_started(
        &mut self,
        now: u64,
        producer: ProducerId,
        id: DataSourceInstanceId,
    ) {
        let Some(sid) = self.session_of_instance(producer, id) else {
            return;
        };
        let s = self.sessions.get_mut(&sid).expect("found above");
        let inst = s.instance_mut(id).expect("found above");
        if inst.state != InstanceState::Starting {
            return;
        }
        inst.state = InstanceState::Started;
        let inst = inst.clone();
        self.notify_instance_state(sid, &inst, true);
        self.check_all_started(now, sid);
    }

    pub(super) fn session_of_instance(
        &self,
        producer: ProducerId,
        id: DataSourceInstanceId,
    ) -> Option<SessionId> {
        self.sessions
            .iter()
            .find(|(_, s)| {
                s.instances
                    .iter()
                    .any(|i| i.id == id && i.producer == producer)
            })
            .map(|(sid, _)| *sid)
    }

    /// Emits `all_data_sources_started` once every instance has started.
    pub(super) fn check_all_started(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        if s.state != SessionState::Started || s.all_started_notified {
            return;
        }
        if s.instances
            .iter()
            .any(|i| matches!(i.state, InstanceState::Configured | InstanceState::Starting))
        {
            return;
        }
        s.all_started_notified = true;
        s.add_event(event::ALL_DATA_SOURCES_STARTED, now);
        if let Some(c) = s.consumer {
            self.notify_all_started(c);
        }
    }
}

pub(super) fn file_write_period_ms(cfg: &TraceConfig) -> u32 {
    cfg.file_write_period_ms
        .filter(|&p| p > 0)
        .unwrap_or(DEFAULT_FILE_WRITE_PERIOD_MS)
        .max(MIN_FILE_WRITE_PERIOD_MS)
}
