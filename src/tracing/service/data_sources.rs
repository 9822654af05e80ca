//! Data source instances: matching config entries to registered data
//! sources (name + producer filters), SetupDataSource with the rewritten
//! raw config, lazy SMB creation, StartDataSource and start acks.

use crate::tracing::core::smb_abi::{choose_shm_sizes, SmbAbi};

use super::ds_config_bytes::{rewrite_data_source_config, OwnedDsFields};
use super::faults::MAX_INSTANCES_PER_SESSION;
use super::name_matcher::regex_full_match;
use super::service::TracingService;
use super::session::{event, DsInstance, InstanceState, SessionState};
use super::types::*;

/// Upstream's machine rule: an explicit `machine_name_filter` picks
/// machines by name (traced's own by its name or "host"); without one,
/// only the host's producers match unless the config sets
/// `trace_all_machines`.
fn machine_matches(
    ds: &crate::pb::protos::mod_TraceConfig::DataSource,
    machine_id: u32,
    machine_name: &str,
    all_machines: bool,
) -> bool {
    let names = &ds.machine_name_filter;
    if names.is_empty() {
        return machine_id == 0 || all_machines;
    }
    names
        .iter()
        .any(|n| n == machine_name || (machine_id == 0 && n == "host"))
}

impl TracingService {
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
        let all_machines = s.config.trace_all_machines.unwrap_or(false);
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
                if self.lockdown && p.info.uid != self.service_uid {
                    continue;
                }
                if !machine_matches(ds, p.machine_id, &p.info.machine_name, all_machines) {
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
        let index = super::config_validation::target_buffer_index(&s.config, &cfg);
        let Some(&global) = index.ok().and_then(|i| s.buffers.get(i)) else {
            return;
        };
        if s.instances.len() >= MAX_INSTANCES_PER_SESSION {
            self.note_refused_instance(sid, producer, &name);
            return;
        }
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
            self.note_refused_instance(sid, producer, &name);
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
            setup_problems: Vec::new(),
        };
        let started = {
            let s = self.sessions.get_mut(&sid).expect("checked above");
            s.read.faults.matched_names.insert(inst.name.clone());
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
        if p.info.machine_id_hint.is_some() {
            // Relayed: no memory can be shared; the producer keeps its own
            // buffer and sends chunks inline, so only the page size goes.
            if !p.setup_tracing_sent {
                let p = self.producers.get_mut(&producer).expect("checked above");
                p.setup_tracing_sent = true;
                self.send_to_producer(
                    producer,
                    ProducerCommand::SetupTracing {
                        page_size_kb: (page / 1024) as u32,
                        service_created_smb: false,
                    },
                );
            }
            return true;
        }
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

    pub(super) fn start_instance(&mut self, now: u64, sid: SessionId, id: DataSourceInstanceId) {
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
        self.arm_relay_commit(now, sid, inst.producer);
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
    /// `problems_untrusted`: what its setup could not give as asked (kept
    /// bounded, passed to observing consumers).
    pub fn notify_data_source_started(
        &mut self,
        now: u64,
        producer: ProducerId,
        id: DataSourceInstanceId,
        problems_untrusted: &[String],
    ) {
        if !problems_untrusted.is_empty() {
            let sid = self.session_of_instance(producer, id);
            let inst = sid.and_then(|sid| self.sessions.get_mut(&sid)?.instance_mut(id));
            if let Some(inst) = inst.filter(|i| i.state == InstanceState::Starting) {
                inst.setup_problems = problems_untrusted
                    .iter()
                    .take(super::session::MAX_SETUP_PROBLEMS)
                    .map(|p| truncate_utf8(p, super::session::MAX_SETUP_PROBLEM_LEN))
                    .collect();
            }
        }
        if let Some(sid) = self.advance_instance(
            producer,
            id,
            InstanceState::Starting,
            InstanceState::Started,
        ) {
            self.check_all_started(now, sid);
        }
    }

    /// Moves a producer's instance from `from` to `to` (a notification in
    /// any other state is stale and ignored) and tells observers. Returns
    /// the session when the instance moved.
    pub(super) fn advance_instance(
        &mut self,
        producer: ProducerId,
        id: DataSourceInstanceId,
        from: InstanceState,
        to: InstanceState,
    ) -> Option<SessionId> {
        let sid = self.session_of_instance(producer, id)?;
        let inst = self.sessions.get_mut(&sid)?.instance_mut(id)?;
        if inst.state != from {
            return None;
        }
        inst.state = to;
        let inst = inst.clone();
        self.notify_instance_state(sid, &inst, to == InstanceState::Started);
        Some(sid)
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

/// The longest prefix of `s` within `max` bytes that ends on a char.
fn truncate_utf8(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}
