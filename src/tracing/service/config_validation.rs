//! Checks a consumer's TraceConfig before a session is created. Every
//! rejection is a human-readable error returned in EnableTracingResponse.

use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use crate::pb::protos::{DataSourceConfig, TraceConfig};

pub const MAX_BUFFERS_PER_SESSION: usize = 128;
pub const MAX_DURATION_MS: u32 = 7 * 24 * 3600 * 1000;
pub const GUARDRAILS_MAX_DURATION_MS: u32 = 24 * 3600 * 1000;
/// Default cap on the sum of buffer sizes with `enable_extra_guardrails`.
pub const GUARDRAILS_MAX_BUFFER_SIZE_KB: u64 = 128 * 1024;
/// Buffers are addressed with 32-bit offsets.
const MAX_BUFFER_SIZE_KB: u32 = 4 * 1024 * 1024 - 1;

pub use crate::schema::trigger::trigger_mode;

pub fn validate_trace_config(cfg: &TraceConfig) -> Result<(), String> {
    let guardrails = cfg.enable_extra_guardrails.unwrap_or(false);
    let max_duration = if guardrails {
        GUARDRAILS_MAX_DURATION_MS
    } else {
        MAX_DURATION_MS
    };
    let duration = cfg.duration_ms.unwrap_or(0);
    if duration > max_duration {
        return Err(format!(
            "Requested too long trace ({duration} ms > {max_duration} ms)"
        ));
    }

    validate_triggers(cfg, max_duration)?;

    if let Some(name) = &cfg.bugreport_filename {
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err("bugreport_filename contains invalid chars. Use [a-zA-Z0-9-_.]+".into());
        }
    }

    if cfg.buffers.is_empty() {
        return Err("The TraceConfig must define at least one buffer".into());
    }
    if cfg.buffers.len() > MAX_BUFFERS_PER_SESSION {
        return Err(format!(
            "Too many buffers configured ({} > {MAX_BUFFERS_PER_SESSION})",
            cfg.buffers.len()
        ));
    }
    for (i, b) in cfg.buffers.iter().enumerate() {
        let kb = b.size_kb.unwrap_or(0);
        if kb == 0 {
            return Err(format!("Buffer {i} has size_kb == 0"));
        }
        if kb > MAX_BUFFER_SIZE_KB {
            return Err(format!(
                "Buffer {i} is too large ({kb} KB, must be < 4 GiB)"
            ));
        }
    }

    if guardrails {
        if cfg.deferred_start.unwrap_or(false) {
            return Err("deferred_start=true is not supported in unsupervised traces".into());
        }
        let mut sum = 0u64;
        for b in &cfg.buffers {
            let kb = b.size_kb.unwrap_or(0);
            if kb % 4 != 0 {
                return Err(format!(
                    "buffer size_kb ({kb}) must be a multiple of 4 with guardrails"
                ));
            }
            sum += kb as u64;
        }
        let max = cfg
            .guardrail_overrides
            .as_ref()
            .and_then(|g| g.max_tracing_buffer_size_kb)
            .filter(|&m| m > 0)
            .map_or(GUARDRAILS_MAX_BUFFER_SIZE_KB, u64::from);
        if sum > max {
            return Err(format!(
                "Requested too large trace buffer ({sum} KB > {max} KB)"
            ));
        }
    }

    for (i, b) in cfg.buffers.iter().enumerate() {
        let Some(name) = b.name.as_deref().filter(|n| !n.is_empty()) else {
            continue;
        };
        if let Some(first) = cfg.buffers[..i]
            .iter()
            .position(|o| o.name.as_deref() == Some(name))
        {
            return Err(format!(
                "Duplicate buffer name \"{name}\" at index {i} (first occurrence at index {first})"
            ));
        }
    }

    let max_ds = super::faults::MAX_DATA_SOURCES_PER_CONFIG;
    if cfg.data_sources.len() > max_ds {
        return Err(format!(
            "Too many data sources configured ({} > {max_ds})",
            cfg.data_sources.len()
        ));
    }
    for (i, ds) in cfg.data_sources.iter().enumerate() {
        let Some(c) = &ds.config else {
            return Err(format!("data_sources[{i}] has no config"));
        };
        if c.name.as_deref().unwrap_or("").is_empty() {
            return Err(format!("data_sources[{i}] has no name"));
        }
        let target = target_buffer_index(cfg, c)?;
        if target >= cfg.buffers.len() {
            return Err(format!(
                "data source \"{}\" has target_buffer {target} but only {} buffers are configured",
                c.name.as_deref().unwrap_or(""),
                cfg.buffers.len()
            ));
        }
    }
    Ok(())
}

/// The config-relative buffer a data source writes into: `target_buffer`,
/// or the buffer whose `name` is `target_buffer_name` (both set: they
/// must agree; a `target_buffer` of 0 counts as unset, as upstream).
pub fn target_buffer_index(cfg: &TraceConfig, ds: &DataSourceConfig) -> Result<usize, String> {
    let index = ds.target_buffer.unwrap_or(0) as usize;
    let Some(name) = ds.target_buffer_name.as_deref().filter(|n| !n.is_empty()) else {
        return Ok(index);
    };
    let ds_name = ds.name.as_deref().unwrap_or("");
    let Some(found) = cfg
        .buffers
        .iter()
        .position(|b| b.name.as_deref() == Some(name))
    else {
        return Err(format!(
            "Data source \"{ds_name}\" specified target_buffer_name \"{name}\" which does not \
             match any buffer"
        ));
    };
    if index > 0 && index != found {
        return Err(format!(
            "Data source \"{ds_name}\" specified both target_buffer={index} and \
             target_buffer_name=\"{name}\" (index {found}) but they don't match"
        ));
    }
    Ok(found)
}

fn validate_triggers(cfg: &TraceConfig, max_duration: u32) -> Result<(), String> {
    let Some(tc) = &cfg.trigger_config else {
        return Ok(());
    };
    let mode = trigger_mode(cfg);
    let has_trigger_config = mode != TriggerMode::UNSPECIFIED;
    let timeout = tc.trigger_timeout_ms.unwrap_or(0);
    if has_trigger_config && (timeout == 0 || timeout > max_duration) {
        return Err(format!(
            "Traces with triggers must provide a positive trigger_timeout_ms <= {max_duration} ms \
             (received {timeout} ms)"
        ));
    }
    let asked = tc.trigger_mode.unwrap_or_default();
    if tc.use_clone_snapshot_if_available.unwrap_or(false) && asked != TriggerMode::STOP_TRACING {
        return Err(
            "trigger_mode must be STOP_TRACING when use_clone_snapshot_if_available=true".into(),
        );
    }
    if has_trigger_config && cfg.duration_ms.unwrap_or(0) != 0 {
        return Err("duration_ms was set, this must not be set for traces with triggers.".into());
    }
    if matches!(
        mode,
        TriggerMode::STOP_TRACING | TriggerMode::CLONE_SNAPSHOT
    ) && cfg.write_into_file.unwrap_or(false)
    {
        return Err(
            "Specifying trigger mode STOP_TRACING/CLONE_SNAPSHOT and write_into_file together is unsupported"
                .into(),
        );
    }
    if !has_trigger_config && !tc.triggers.is_empty() {
        return Err("The trigger_config has triggers but no trigger_mode".into());
    }
    let mut seen = std::collections::BTreeSet::new();
    for t in &tc.triggers {
        let name = t.name.as_deref().unwrap_or("");
        if !seen.insert(name) {
            return Err(format!("Duplicate trigger name: {name}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pb::protos::mod_TraceConfig::mod_TriggerConfig::Trigger;
    use crate::pb::protos::mod_TraceConfig::{BufferConfig, DataSource, TriggerConfig};
    use crate::pb::protos::DataSourceConfig;

    fn base() -> TraceConfig {
        TraceConfig {
            buffers: vec![BufferConfig {
                size_kb: Some(64),
                ..Default::default()
            }],
            data_sources: vec![DataSource {
                config: Some(DataSourceConfig {
                    name: Some("ds".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn trig(mode: TriggerMode, timeout: u32, names: &[&str]) -> Option<TriggerConfig> {
        Some(TriggerConfig {
            trigger_mode: Some(mode),
            trigger_timeout_ms: Some(timeout),
            triggers: names
                .iter()
                .map(|n| Trigger {
                    name: Some(n.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    fn err(cfg: &TraceConfig) -> String {
        validate_trace_config(cfg).unwrap_err()
    }

    #[test]
    fn accepts_plain_config() {
        validate_trace_config(&base()).unwrap();
    }

    #[test]
    fn buffer_rules() {
        let mut c = base();
        c.buffers.clear();
        assert!(err(&c).contains("at least one buffer"));
        let mut c = base();
        c.buffers[0].size_kb = Some(0);
        assert!(err(&c).contains("size_kb == 0"));
        let mut c = base();
        c.buffers = vec![
            BufferConfig {
                size_kb: Some(4),
                ..Default::default()
            };
            129
        ];
        assert!(err(&c).contains("Too many buffers"));
        let mut c = base();
        c.data_sources[0].config.as_mut().unwrap().target_buffer = Some(1);
        assert!(err(&c).contains("target_buffer 1"));
    }

    #[test]
    fn buffers_by_name() {
        let mut c = base();
        c.buffers.push(BufferConfig {
            size_kb: Some(64),
            name: Some("big".into()),
            ..Default::default()
        });
        let named = |c: &mut TraceConfig, name: &str, index: Option<u32>| {
            let ds = c.data_sources[0].config.as_mut().unwrap();
            ds.target_buffer_name = Some(name.into());
            ds.target_buffer = index;
        };
        named(&mut c, "big", None);
        validate_trace_config(&c).unwrap();
        let ds = c.data_sources[0].config.clone().unwrap();
        assert_eq!(target_buffer_index(&c, &ds), Ok(1));
        named(&mut c, "big", Some(1));
        validate_trace_config(&c).unwrap();
        named(&mut c, "big", Some(0)); // 0 is "unset"
        validate_trace_config(&c).unwrap();
        named(&mut c, "small", None);
        assert!(err(&c).contains("\"small\" which does not match any buffer"));
        c.buffers.push(BufferConfig {
            size_kb: Some(64),
            name: Some("x".into()),
            ..Default::default()
        });
        named(&mut c, "big", Some(2));
        assert!(err(&c).contains("target_buffer=2 and target_buffer_name=\"big\" (index 1)"));
        named(&mut c, "big", None);
        c.buffers[2].name = Some("big".into());
        assert!(err(&c).contains("Duplicate buffer name \"big\" at index 2"));
    }

    #[test]
    fn clone_snapshot_if_available_is_clone_snapshot() {
        let mut c = base();
        c.trigger_config = trig(TriggerMode::STOP_TRACING, 1000, &["a"]);
        assert_eq!(trigger_mode(&c), TriggerMode::STOP_TRACING);
        c.trigger_config
            .as_mut()
            .unwrap()
            .use_clone_snapshot_if_available = Some(true);
        assert_eq!(trigger_mode(&c), TriggerMode::CLONE_SNAPSHOT);
        validate_trace_config(&c).unwrap();
        c.trigger_config.as_mut().unwrap().trigger_mode = Some(TriggerMode::START_TRACING);
        assert!(err(&c).contains("must be STOP_TRACING"));
    }

    #[test]
    fn trigger_rules() {
        let mut c = base();
        c.trigger_config = trig(TriggerMode::START_TRACING, 0, &["a"]);
        assert!(err(&c).contains("trigger_timeout_ms"));
        c.trigger_config = trig(TriggerMode::START_TRACING, 1000, &["a", "a"]);
        assert!(err(&c).contains("Duplicate trigger name: a"));
        c.trigger_config = trig(TriggerMode::STOP_TRACING, 1000, &["a"]);
        c.duration_ms = Some(10);
        assert!(err(&c).contains("duration_ms was set"));
        c.duration_ms = None;
        c.write_into_file = Some(true);
        assert!(err(&c).contains("write_into_file"));
        c.write_into_file = None;
        validate_trace_config(&c).unwrap();
        c.trigger_config = trig(TriggerMode::START_TRACING, MAX_DURATION_MS + 1, &["a"]);
        assert!(err(&c).contains("trigger_timeout_ms"));
    }

    #[test]
    fn duration_and_guardrails() {
        let mut c = base();
        c.duration_ms = Some(MAX_DURATION_MS + 1);
        assert!(err(&c).contains("too long"));
        c.duration_ms = Some(GUARDRAILS_MAX_DURATION_MS + 1);
        validate_trace_config(&c).unwrap();
        c.enable_extra_guardrails = Some(true);
        assert!(err(&c).contains("too long"));
        c.duration_ms = None;
        c.deferred_start = Some(true);
        assert!(err(&c).contains("deferred_start"));
        c.deferred_start = None;
        c.buffers[0].size_kb = Some(6);
        assert!(err(&c).contains("multiple of 4"));
        c.buffers[0].size_kb = Some(256 * 1024);
        assert!(err(&c).contains("too large"));
    }
}
