//! Creating and starting sessions: EnableTracing, StartTracing, data source
//! matching and setup, lazy SMB creation.

use std::collections::BTreeSet;

use crate::pb::protos::mod_TraceConfig::mod_BufferConfig::FillPolicy;
use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::pb::protos::mod_TraceConfig::{LockdownModeOperation, WriteFlushMode};
use crate::pb::protos::TraceConfig;

use super::config_validation::{trigger_mode, validate_trace_config};
use super::ds_config_bytes::raw_data_source_configs;
use super::service::{TracingService, MAX_SESSIONS, MAX_SESSIONS_PER_UID};
use super::session::{event, ReadState, Session, SessionState};
use super::timers::{ms, Timer};
use super::trace_buffer::{OverwritePolicy, TraceBuffer};
use super::trace_filter::TraceFilter;
use super::types::*;
use crate::protozero::decode::decode_message;

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
        let mut cfg: TraceConfig = decode_message(config_raw)
            .map_err(|e| format!("Failed to decode the TraceConfig: {e}"))?;
        let ds_raw = raw_data_source_configs(config_raw).ok_or("Malformed TraceConfig")?;
        // Lockdown is global and sticky, applied even if the session fails.
        match cfg.lockdown_mode {
            Some(LockdownModeOperation::LOCKDOWN_SET) => self.lockdown = true,
            Some(LockdownModeOperation::LOCKDOWN_CLEAR) => self.lockdown = false,
            _ => {}
        }
        validate_trace_config(&cfg)?;
        // As upstream: a STOP_TRACING or CLONE_SNAPSHOT session lasts its
        // trigger timeout (its data sources see it as trace_duration_ms),
        // so a snapshot session ends there whether or not triggers came.
        if matches!(
            trigger_mode(&cfg),
            TriggerMode::STOP_TRACING | TriggerMode::CLONE_SNAPSHOT
        ) {
            cfg.duration_ms = cfg
                .trigger_config
                .as_ref()
                .and_then(|t| t.trigger_timeout_ms);
        }
        let filter = cfg.trace_filter.as_ref().map(TraceFilter::from_config);
        let filter = filter.transpose()?.map(std::sync::Arc::new);
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
            clone_trigger: None,
            read: ReadState {
                filter,
                relay_drops_seen: self.relay_drops,
                ..Default::default()
            },
            seq_ids: Default::default(),
            stats: Default::default(),
            write_into_file,
            file_bytes_written: 0,
            file_closed: false,
            stop_generation: 0,
            all_started_notified: false,
            disabled_notified: false,
            start_time_ns: 0,
            relay_commit_armed: false,
        };
        self.sessions.insert(sid, session);
        if let Some(c) = self.consumers.get_mut(&consumer) {
            c.session = Some(sid);
        }
        self.note_ignored_fields(now, sid);
        self.setup_matching_instances(now, sid, None);
        self.notify_not_offered(sid);

        match mode {
            // A CLONE_SNAPSHOT session stops at its duration (above).
            TriggerMode::START_TRACING | TriggerMode::STOP_TRACING => {
                let timeout = self.sessions[&sid]
                    .config
                    .trigger_config
                    .as_ref()
                    .and_then(|t| t.trigger_timeout_ms);
                self.timers
                    .add(now + ms(timeout.unwrap_or(0)), Timer::TriggerTimeout(sid));
            }
            TriggerMode::UNSPECIFIED | TriggerMode::CLONE_SNAPSHOT => {}
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
            TriggerMode::UNSPECIFIED | TriggerMode::CLONE_SNAPSHOT => cfg.duration_ms.unwrap_or(0),
            // The trigger timeout / stop delay decide (a STOP trigger
            // overrides the timeout, as upstream).
            TriggerMode::START_TRACING | TriggerMode::STOP_TRACING => 0,
        };
        if stop_after > 0 {
            arm.push((
                now + ms(stop_after),
                Timer::StopSession(sid, s.stop_generation),
            ));
        }
        if let Some(p) = periodic_flush_ms(cfg, s.write_into_file) {
            arm.push((now + ms(p), Timer::PeriodicFlush(sid)));
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
}

/// The period of flushes the service asks for by itself. For
/// write_into_file, `write_flush_mode` decides as upstream: AUTO flushes
/// every 5 s when files are written at least that often and before every
/// write otherwise, ENABLED before every write, DISABLED only as
/// `flush_period_ms` says.
pub(super) fn periodic_flush_ms(cfg: &TraceConfig, write_into_file: bool) -> Option<u32> {
    let asked = cfg.flush_period_ms.filter(|&p| p > 0);
    if !write_into_file {
        return asked;
    }
    match cfg.write_flush_mode {
        Some(WriteFlushMode::WRITE_FLUSH_DISABLED) => asked,
        Some(WriteFlushMode::WRITE_FLUSH_ENABLED) => None,
        _ if file_write_period_ms(cfg) <= DEFAULT_FILE_WRITE_PERIOD_MS => {
            Some(DEFAULT_FILE_WRITE_PERIOD_MS)
        }
        _ => None,
    }
}

/// Whether each periodic write into the file starts with a flush.
pub(super) fn flush_before_write(cfg: &TraceConfig) -> bool {
    match cfg.write_flush_mode {
        Some(WriteFlushMode::WRITE_FLUSH_DISABLED) => false,
        Some(WriteFlushMode::WRITE_FLUSH_ENABLED) => true,
        _ => file_write_period_ms(cfg) > DEFAULT_FILE_WRITE_PERIOD_MS,
    }
}

pub(super) fn file_write_period_ms(cfg: &TraceConfig) -> u32 {
    cfg.file_write_period_ms
        .filter(|&p| p > 0)
        .unwrap_or(DEFAULT_FILE_WRITE_PERIOD_MS)
        .max(MIN_FILE_WRITE_PERIOD_MS)
}
