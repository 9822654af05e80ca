//! The trigger mode a TraceConfig asks for, as traced acts on it: traced
//! decides with it and the client words its end line with it, so both
//! read it here.

use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::pb::protos::TraceConfig;

/// UNSPECIFIED without a trigger config; `use_clone_snapshot_if_available`
/// (valid on STOP_TRACING only) makes it CLONE_SNAPSHOT, as upstream's
/// GetTriggerMode.
pub fn trigger_mode(cfg: &TraceConfig) -> TriggerMode {
    let tc = cfg.trigger_config.as_ref();
    if tc.is_some_and(|t| t.use_clone_snapshot_if_available == Some(true)) {
        return TriggerMode::CLONE_SNAPSHOT;
    }
    tc.and_then(|t| t.trigger_mode).unwrap_or_default()
}
