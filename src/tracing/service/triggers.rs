//! Triggers: named events from producers that start or stop sessions
//! configured with a `trigger_config`.
//!
//! Not implemented: `max_per_24_h` rate limiting and `skip_probability`
//! (accepted and ignored), CLONE_SNAPSHOT notifications.

use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;

use super::config_validation::trigger_mode;
use super::name_matcher::regex_full_match;
use super::service::TracingService;
use super::session::{ReceivedTrigger, SessionState};
use super::types::*;

impl TracingService {
    /// ActivateTriggers from a producer.
    pub fn activate_triggers(&mut self, now: u64, producer: ProducerId, names: &[String]) {
        let Some(p) = self.producers.get(&producer) else {
            return;
        };
        let (pname, puid) = (p.info.name.clone(), p.info.uid);
        let sids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for name in names {
            for &sid in &sids {
                self.trigger_session(now, sid, name, &pname, puid);
            }
        }
    }

    fn trigger_session(&mut self, now: u64, sid: SessionId, name: &str, pname: &str, puid: u32) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let mode = trigger_mode(&s.config);
        if mode == TriggerMode::UNSPECIFIED || !s.is_active() {
            return;
        }
        let Some(t) = s
            .config
            .trigger_config
            .as_ref()
            .and_then(|tc| tc.triggers.iter().find(|t| t.name.as_deref() == Some(name)))
        else {
            return;
        };
        if let Some(re) = t.producer_name_regex.as_deref().filter(|r| !r.is_empty()) {
            if !regex_full_match(re, pname) {
                return;
            }
        }
        let stop_delay_ms = t.stop_delay_ms.unwrap_or(0);
        let first = s.triggers.is_empty();
        s.triggers.push(ReceivedTrigger {
            name: name.to_string(),
            producer_name: pname.to_string(),
            producer_uid: puid,
            boot_time_ns: now,
            stop_delay_ms,
        });
        match mode {
            TriggerMode::START_TRACING if first && s.state == SessionState::Configured => {
                self.start_session(now, sid);
                self.schedule_stop(now, sid, stop_delay_ms);
            }
            TriggerMode::STOP_TRACING if first && s.state == SessionState::Started => {
                self.schedule_stop(now, sid, stop_delay_ms);
            }
            _ => {}
        }
    }

    /// No trigger arrived in `trigger_timeout_ms`: the session ends; its
    /// trace will be empty (ReadBuffers returns nothing).
    pub(super) fn on_trigger_timeout(&mut self, now: u64, sid: SessionId) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        if !s.triggers.is_empty() || !s.is_active() {
            return;
        }
        self.stop_session(now, sid);
    }
}
