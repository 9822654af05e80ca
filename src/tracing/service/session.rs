//! State of one tracing session.

use std::collections::BTreeSet;

use crate::pb::protos::TraceConfig;

use super::sequence_ids::SequenceIdAllocator;
use super::types::{BufferId, ConsumerId, DataSourceInstanceId, ProducerId, SessionId};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Buffers exist, data sources set up, not started (deferred start or
    /// waiting for a START_TRACING trigger).
    Configured,
    Started,
    /// StopDataSource sent; waiting for acks (or the stop timeout).
    Stopping,
    Disabled,
    /// A read-only snapshot made by CloneSession.
    ClonedReadOnly,
}

impl SessionState {
    pub fn name(self) -> &'static str {
        match self {
            SessionState::Configured => "CONFIGURED",
            SessionState::Started => "STARTED",
            SessionState::Stopping => "STOP_WAIT",
            SessionState::Disabled => "DISABLED",
            SessionState::ClonedReadOnly => "CLONED_READ_ONLY",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    Configured,
    Starting,
    Started,
    Stopping,
    Stopped,
}

/// One data source running in one producer for this session.
#[derive(Debug, Clone)]
pub struct DsInstance {
    pub id: DataSourceInstanceId,
    pub producer: ProducerId,
    pub producer_name: String,
    pub name: String,
    pub state: InstanceState,
    pub will_notify_on_start: bool,
    pub will_notify_on_stop: bool,
    pub handles_incremental_state_clear: bool,
    pub no_flush: bool,
    /// The rewritten raw DataSourceConfig sent to the producer.
    pub config: Vec<u8>,
    /// What its setup could not give as asked, as its producer said when
    /// it started (bounded: [`MAX_SETUP_PROBLEMS`] of
    /// [`MAX_SETUP_PROBLEM_LEN`] bytes).
    pub setup_problems: Vec<String>,
}

pub const MAX_SETUP_PROBLEMS: usize = 16;
pub const MAX_SETUP_PROBLEM_LEN: usize = 1024;

/// A trigger the session accepted (emitted as a `trigger` packet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedTrigger {
    pub name: String,
    pub producer_name: String,
    pub producer_uid: u32,
    pub boot_time_ns: u64,
    pub stop_delay_ms: u32,
}

/// Things the read pass emits once per session.
#[derive(Debug, Default, Clone)]
pub struct ReadState {
    pub did_emit_initial_packets: bool,
    pub did_emit_initial_clock_snapshot: bool,
    pub triggers_emitted: usize,
    pub sync_marker_due: bool,
    pub stats_due: bool,
    /// Snapshots taken after the initial one, not yet emitted.
    pub pending_clock_snapshots: Vec<Vec<(u32, u64)>>,
    /// `(TracingServiceEvent field, ts)` not yet emitted.
    pub pending_events: Vec<(u32, u64)>,
    /// TraceConfig.trace_filter, applied to every packet read out.
    pub filter: Option<std::sync::Arc<super::trace_filter::TraceFilter>>,
    pub filter_stats: super::trace_filter::FilterStats,
    /// A periodic write into the file is draining a backlog in steps
    /// (its flush, if any, was done).
    pub file_backlog: bool,
    /// What the session asked for and did not get.
    pub faults: super::faults::Faults,
    /// What was written about remote machines.
    pub machines_seen: super::machines::MachinesSeen,
    /// The service's relay-connection drop count already accounted for.
    pub relay_drops_seen: u64,
    /// While a rotation drains the old file: packets of sequences that
    /// cleared their incremental state, held for the new file.
    pub divert: Option<super::rotate_divert::Divert>,
    /// Held packets to write into the new file after its header.
    pub held_for_new_file: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SessionStats {
    pub invalid_packets: u64,
    pub flushes_requested: u64,
    pub flushes_succeeded: u64,
    pub flushes_failed: u64,
    /// 1 succeeded, 2 failed (TraceStats.FinalFlushOutcome).
    pub final_flush_outcome: u32,
}

#[derive(Debug)]
pub struct Session {
    pub id: SessionId,
    pub consumer: Option<ConsumerId>,
    pub consumer_uid: u32,
    pub config: TraceConfig,
    pub config_raw: Vec<u8>,
    /// Raw DataSourceConfig of each `config.data_sources` entry.
    pub ds_configs_raw: Vec<Vec<u8>>,
    /// Session buffer index -> global buffer id.
    pub buffers: Vec<BufferId>,
    pub state: SessionState,
    pub instances: Vec<DsInstance>,
    /// Producers that have at least one instance (ever) in this session.
    pub producers: BTreeSet<ProducerId>,
    pub detach_key: Option<String>,
    pub uuid: (i64, i64),
    pub initial_clock_snapshot: Vec<(u32, u64)>,
    pub triggers: Vec<ReceivedTrigger>,
    /// The CLONE_SNAPSHOT trigger this clone was made for.
    pub clone_trigger: Option<ReceivedTrigger>,
    pub read: ReadState,
    pub seq_ids: SequenceIdAllocator,
    pub stats: SessionStats,
    pub write_into_file: bool,
    pub file_bytes_written: u64,
    pub file_closed: bool,
    /// Bumped when a new stop is scheduled; older StopSession timers are stale.
    pub stop_generation: u32,
    /// Set once `all_data_sources_started` was reported.
    pub all_started_notified: bool,
    /// The EnableTracing reply was already sent (or is not expected).
    pub disabled_notified: bool,
    pub start_time_ns: u64,
    /// A `Timer::RelayCommit` round is pending (`relay_commit`).
    pub relay_commit_armed: bool,
}

impl Session {
    pub fn is_active(&self) -> bool {
        matches!(self.state, SessionState::Configured | SessionState::Started)
    }

    pub fn instance_mut(&mut self, id: DataSourceInstanceId) -> Option<&mut DsInstance> {
        self.instances.iter_mut().find(|i| i.id == id)
    }

    /// Adds a lifecycle event unless service events are disabled.
    pub fn add_event(&mut self, field: u32, ts: u64) {
        let disabled = self
            .config
            .builtin_data_sources
            .as_ref()
            .and_then(|b| b.disable_service_events)
            .unwrap_or(false);
        if !disabled {
            self.read.pending_events.push((field, ts));
        }
    }

    pub fn duration_ms(&self) -> u32 {
        self.config.duration_ms.unwrap_or(0)
    }

    pub fn flush_timeout_ms(&self) -> u32 {
        self.config
            .flush_timeout_ms
            .filter(|&v| v > 0)
            .unwrap_or(5000)
    }

    pub fn stop_timeout_ms(&self) -> u32 {
        self.config
            .data_source_stop_timeout_ms
            .filter(|&v| v > 0)
            .unwrap_or(5000)
    }
}

/// `TracingServiceEvent` field numbers.
pub mod event {
    pub const ALL_DATA_SOURCES_STARTED: u32 = 1;
    pub const TRACING_STARTED: u32 = 2;
    pub const ALL_DATA_SOURCES_FLUSHED: u32 = 3;
    pub const READ_TRACING_BUFFERS_COMPLETED: u32 = 4;
    pub const TRACING_DISABLED: u32 = 5;
    pub const FLUSH_STARTED: u32 = 9;
}
