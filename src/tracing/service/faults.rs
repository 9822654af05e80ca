//! What a session asked for and did not get: producers that vanished
//! mid-trace, data sources no producer offers, instances refused by the
//! per-session bound, data sources that never started, config fields this
//! service does not honour, and a failed write of the output file.
//!
//! Each is written into the trace as a `TracingServiceEvent` (upstream
//! readers skip the fields they do not know; `slow_starting_data_sources`
//! is upstream's own), so the client names them on its end-of-trace line
//! whether it read the trace over IPC or from the file.

use crate::pb::protos::mod_TraceConfig::StatsdLogging;
use crate::pb::protos::TraceConfig;
use crate::protozero::{put_str, VecStream};
pub use crate::schema::service_events::{data_sources_event, field, DsName};

use super::service::TracingService;
use super::session::InstanceState;
use super::types::{ProducerId, SessionId};

/// Data source instances one session may have (all producers together).
pub const MAX_INSTANCES_PER_SESSION: usize = 256;
/// `data_sources` entries one TraceConfig may hold.
pub const MAX_DATA_SOURCES_PER_CONFIG: usize = 256;
/// Names listed per refused-instances event (the rest only counted).
const MAX_LISTED: usize = 32;
/// Refused (producer, data source) pairs remembered so that retries are
/// not counted again; past this many, every refusal counts.
const MAX_REFUSED_REMEMBERED: usize = 4096;

#[derive(Debug, Default, Clone)]
pub struct Faults {
    /// Encoded `(ts, TracingServiceEvent)` not yet written into the trace.
    pub pending: Vec<(u64, Vec<u8>)>,
    pub refused_instances: u64,
    refused_listed: Vec<DsName>,
    /// Refusals already counted (a pair is retried at every registration).
    refused_seen: std::collections::BTreeSet<(ProducerId, String)>,
    /// Config data source names that got at least one instance.
    pub matched_names: std::collections::BTreeSet<String>,
    /// The output file could not be written; the session ends with it.
    pub file_error: Option<String>,
    /// Failed rotation cuts the client named (`rotate`).
    pub rotation_stops: u32,
}

/// TraceConfig fields set in `cfg` that this service accepts but does not
/// act on (trace_filter is refused elsewhere, not listed here).
pub fn ignored_config_fields(cfg: &TraceConfig) -> Vec<&'static str> {
    let mut out = Vec::new();
    let mut flag = |set: bool, name| {
        if set {
            out.push(name);
        }
    };
    // Deflate and zstd are honoured (`compress`); a `compression` naming
    // neither (a codec this service does not know) is not.
    flag(
        cfg.compression.is_some() && super::compress::codec(cfg).is_none(),
        "compression (only deflate and zstd are built)",
    );
    flag(!cfg.session_semaphores.is_empty(), "session_semaphores");
    flag(cfg.exclusive_prio.is_some(), "exclusive_prio");
    flag(cfg.priority_boost.is_some(), "priority_boost");
    flag(
        cfg.incident_report_config.is_some(),
        "incident_report_config",
    );
    flag(cfg.android_report_config.is_some(), "android_report_config");
    flag(
        cfg.buffers.iter().any(|b| b.experimental_mode.is_some()),
        "buffers.experimental_mode",
    );
    flag(
        cfg.builtin_data_sources
            .as_ref()
            .is_some_and(|b| b.enable_concurrent_session_events == Some(true)),
        "builtin_data_sources.enable_concurrent_session_events",
    );
    let triggers = cfg.trigger_config.iter().flat_map(|t| &t.triggers);
    let (mut per_day, mut skip) = (false, false);
    for t in triggers {
        per_day |= t.max_per_24_h.is_some_and(|v| v > 0);
        skip |= t.skip_probability.is_some_and(|v| v > 0.0);
    }
    flag(per_day, "trigger_config.triggers.max_per_24_h");
    flag(skip, "trigger_config.triggers.skip_probability");
    // Android plumbing upstream's client and service act on there: a
    // config asking for it gets none of it here.
    flag(
        cfg.persist_trace_across_reboots == Some(true),
        "persist_trace_across_reboots",
    );
    flag(cfg.notify_traceur == Some(true), "notify_traceur");
    flag(
        cfg.statsd_logging == Some(StatsdLogging::STATSD_LOGGING_ENABLED),
        "statsd_logging",
    );
    flag(
        cfg.experimental_trace_buffer_v2_compaction == Some(true),
        "experimental_trace_buffer_v2_compaction",
    );
    out
}

impl TracingService {
    /// At EnableTracing: the config fields this service will not honour.
    pub(super) fn note_ignored_fields(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let names = ignored_config_fields(&s.config);
        if names.is_empty() {
            return;
        }
        let mut e = VecStream::new();
        put_str(&mut e, field::CONFIG_FIELDS_IGNORED, &names.join(", "));
        s.read.faults.pending.push((now, e.into_bytes()));
    }

    /// An instance was not set up: beyond [`MAX_INSTANCES_PER_SESSION`],
    /// or its producer's shared memory could not be created.
    pub(super) fn note_refused_instance(&mut self, sid: SessionId, pid: ProducerId, ds: &str) {
        let producer = self.producers.get(&pid).map(|p| p.info.name.clone());
        let producer = producer.unwrap_or_default();
        if let Some(s) = self.sessions.get_mut(&sid) {
            let f = &mut s.read.faults;
            f.matched_names.insert(ds.to_owned());
            let key = (pid, ds.to_owned());
            if f.refused_seen.contains(&key) {
                return;
            }
            if f.refused_seen.len() < MAX_REFUSED_REMEMBERED {
                f.refused_seen.insert(key);
            }
            f.refused_instances += 1;
            if f.refused_listed.len() < MAX_LISTED {
                f.refused_listed.push((producer, ds.to_owned()));
            }
        }
    }

    /// A producer's connection closed. Before its shared memory goes, the
    /// chunks it finished or was writing are copied into the buffers of
    /// every session it wrote into; sessions in which it still had running
    /// instances record that it vanished, and when. A relayed producer's
    /// uncommitted chunks died with its link: the event names the window
    /// they cover (`relay_commit`).
    pub(super) fn on_producer_vanishing(&mut self, now: u64, producer: ProducerId) {
        let relayed = self
            .producers
            .get(&producer)
            .is_some_and(|p| p.machine_id != 0);
        let window_ms = relayed.then_some(self.relay_commit_period_ms);
        let sids: Vec<SessionId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.producers.contains(&producer))
            .map(|(id, _)| *id)
            .collect();
        for sid in sids {
            self.scrape_producer_smb(sid, producer, true);
            let Some(s) = self.sessions.get(&sid) else {
                continue;
            };
            if !s.is_active() && s.state != super::session::SessionState::Stopping {
                continue;
            }
            let lost = self.instance_names(sid, |i| {
                i.producer == producer && i.state != InstanceState::Stopped
            });
            if let (false, Some(s)) = (lost.is_empty(), self.sessions.get_mut(&sid)) {
                let mut e = data_sources_event(field::PRODUCER_DISCONNECTED, &lost);
                if let Some(w) = window_ms {
                    let mut v = VecStream::new();
                    crate::protozero::put_varint(&mut v, field::UNCOMMITTED_WINDOW_MS, w.into());
                    e.extend_from_slice(v.as_bytes());
                }
                s.read.faults.pending.push((now, e));
            }
        }
    }

    /// The last flush of `into`'s trace timed out (the final flush of
    /// session `sid`, or the flush a clone `into` of it waited for): the
    /// data sources of `sid` whose producers had not answered it (what
    /// they held then may be missing).
    pub(super) fn note_slow_final_flush(
        &mut self,
        now: u64,
        sid: SessionId,
        into: SessionId,
        pending: &std::collections::BTreeSet<ProducerId>,
    ) {
        let slow = self.instance_names(sid, |i| {
            pending.contains(&i.producer) && !i.no_flush && i.state != InstanceState::Stopped
        });
        if let (false, Some(s)) = (slow.is_empty(), self.sessions.get_mut(&into)) {
            let e = data_sources_event(field::LAST_FLUSH_SLOW_DATA_SOURCES, &slow);
            s.read.faults.pending.push((now, e));
        }
    }

    /// `data_source_stop_timeout_ms` ran out: the data sources still
    /// stopping (what they commit from now on is not in the trace).
    pub(super) fn note_stop_timed_out(&mut self, now: u64, sid: SessionId) {
        let late = self.instance_names(sid, |i| i.state == InstanceState::Stopping);
        if let (false, Some(s)) = (late.is_empty(), self.sessions.get_mut(&sid)) {
            let e = data_sources_event(field::DATA_SOURCES_STOP_TIMED_OUT, &late);
            s.read.faults.pending.push((now, e));
        }
    }

    /// `(producer, data source)` of the session's instances that `pick`
    /// selects; a relayed producer is named with its machine.
    fn instance_names(
        &self,
        sid: SessionId,
        pick: impl Fn(&super::session::DsInstance) -> bool,
    ) -> Vec<DsName> {
        let Some(s) = self.sessions.get(&sid) else {
            return Vec::new();
        };
        s.instances
            .iter()
            .filter(|i| pick(i))
            .map(|i| {
                let label = self.producers.get(&i.producer).map(|p| p.label());
                (label.unwrap_or(i.producer_name.clone()), i.name.clone())
            })
            .collect()
    }

    /// When the session stops: data sources that never started, data
    /// source names no producer offered, instances refused.
    pub(super) fn note_unfulfilled(&mut self, now: u64, sid: SessionId) {
        self.note_unfulfilled_into(now, sid, sid);
    }

    /// A clone `to` of session `from` starts with what `from` has not yet
    /// written of its faults, and what `from` did not get so far: a
    /// snapshot names them as the finished trace would.
    pub(super) fn note_clone_faults(&mut self, now: u64, from: SessionId, to: SessionId) {
        let Some(src) = self.sessions.get(&from) else {
            return;
        };
        let mut faults = src.read.faults.clone();
        // The clone's own file writes fail on their own.
        faults.file_error = None;
        if let Some(dst) = self.sessions.get_mut(&to) {
            dst.read.faults = faults;
        }
        self.note_unfulfilled_into(now, from, to);
    }

    /// The unfulfilled parts of `from` (its instances, its config and what
    /// matched), written as events of `to`.
    fn note_unfulfilled_into(&mut self, now: u64, from: SessionId, to: SessionId) {
        let Some(s) = self.sessions.get(&from) else {
            return;
        };
        let slow: Vec<DsName> = s
            .instances
            .iter()
            .filter(|i| matches!(i.state, InstanceState::Configured | InstanceState::Starting))
            .map(|i| (i.producer_name.clone(), i.name.clone()))
            .collect();
        let Some(s) = self.sessions.get_mut(&to) else {
            return;
        };
        let mut missing: Vec<DsName> = Vec::new();
        for ds in &s.config.data_sources {
            let Some(name) = ds.config.as_ref().and_then(|c| c.name.as_deref()) else {
                continue;
            };
            let matched = s.read.faults.matched_names.contains(name);
            if !matched && !missing.iter().any(|m| m.1 == name) {
                missing.push((String::new(), name.to_owned()));
            }
        }
        let f = &mut s.read.faults;
        if !slow.is_empty() {
            let e = data_sources_event(field::SLOW_STARTING_DATA_SOURCES, &slow);
            f.pending.push((now, e));
        }
        if !missing.is_empty() {
            let e = data_sources_event(field::DATA_SOURCES_NOT_OFFERED, &missing);
            f.pending.push((now, e));
        }
        if f.refused_instances > 0 {
            let mut list = std::mem::take(&mut f.refused_listed);
            let unlisted = f.refused_instances - list.len() as u64;
            if unlisted > 0 {
                list.push((String::new(), format!("{unlisted} more")));
            }
            let e = data_sources_event(field::DATA_SOURCES_NOT_SET_UP, &list);
            f.pending.push((now, e));
        }
    }

    /// The adapter could not write the session's output file: the file is
    /// closed, the session stops, and the consumer gets `error`. If the
    /// session's end was already announced (the failed write was its final
    /// one, queued before that announcement), returns the consumer whose
    /// queued announcement must carry `error`.
    pub fn file_write_failed(
        &mut self,
        now: u64,
        sid: SessionId,
        error: String,
    ) -> Option<super::types::ConsumerId> {
        let s = self.sessions.get_mut(&sid)?;
        s.file_closed = true;
        s.read.faults.file_error.get_or_insert(error);
        if s.disabled_notified {
            return s.consumer;
        }
        self.stop_session(now, sid);
        // A session already stopping ends with the error too.
        let s = self.sessions.get(&sid)?;
        if s.state == super::session::SessionState::Disabled {
            let e = s.read.faults.file_error.clone();
            self.notify_tracing_disabled(sid, e);
        }
        None
    }
}
