//! Light mode: `-t`, `-b`, `-s`, `-a` and positional events/categories
//! become a TraceConfig, the way upstream's client builds it.

use super::units::{parse_size_kb, parse_time_ms};
use crate::pb::protos::{
    mod_TraceConfig::{BufferConfig, DataSource},
    DataSourceConfig, FtraceConfig, SysStatsConfig, TraceConfig,
};

/// Light-mode inputs, as typed.
#[derive(Debug, Default, Clone)]
pub struct LightOptions {
    pub time: Option<String>,
    pub buffer: Option<String>,
    pub size: Option<String>,
    pub apps: Vec<String>,
    pub categories: Vec<String>,
    /// `--ftrace-instance NAME`: record ftrace into this instance.
    pub ftrace_instance: Option<String>,
}

impl LightOptions {
    /// True if any light-mode option was given (then `-c` is refused).
    pub fn any(&self) -> bool {
        self.time.is_some()
            || self.buffer.is_some()
            || self.size.is_some()
            || !self.apps.is_empty()
            || !self.categories.is_empty()
            || self.ftrace_instance.is_some()
    }
}

fn data_source(name: &str) -> DataSourceConfig {
    DataSourceConfig {
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn push(cfg: &mut TraceConfig, ds: DataSourceConfig) {
    cfg.data_sources.push(DataSource {
        config: Some(ds),
        ..Default::default()
    });
}

/// Builds the TraceConfig for light mode, or says which flag is invalid.
pub fn build(opts: &LightOptions) -> Result<TraceConfig, String> {
    let time = opts.time.as_deref().unwrap_or("10s");
    let duration_ms = parse_time_ms(time)
        .ok_or_else(|| format!("--time argument is invalid: '{time}' (use e.g. 10s, 500ms, 2m)"))?;
    if duration_ms > u32::MAX as u64 {
        return Err(format!(
            "--time argument is too large: '{time}' (at most {}h)",
            u32::MAX as u64 / 3_600_000
        ));
    }
    let buffer = opts.buffer.as_deref().unwrap_or("32mb");
    let buffer_kb = parse_size_kb(buffer)
        .filter(|kb| *kb <= u32::MAX as u64)
        .ok_or_else(|| {
            format!("--buffer argument is invalid: '{buffer}' (use e.g. 32mb, 512kb)")
        })?;
    let max_file_kb = match opts.size.as_deref() {
        None => 0,
        Some(s) => parse_size_kb(s)
            .ok_or_else(|| format!("--size argument is invalid: '{s}' (use e.g. 1gb, 100mb)"))?,
    };

    if let Some(name) = &opts.ftrace_instance {
        let ok = !name.is_empty()
            && name != "."
            && name != ".."
            && name.bytes().all(|b| b.is_ascii_graphic() && b != b'/');
        if !ok {
            return Err(format!(
                "--ftrace-instance argument is invalid: '{name}' (a tracefs instance name, \
                 no '/' or spaces)"
            ));
        }
    }
    let mut cfg = TraceConfig {
        duration_ms: Some(duration_ms as u32),
        max_file_size_bytes: Some(max_file_kb * 1024),
        flush_period_ms: Some(30_000),
        buffers: vec![BufferConfig {
            size_kb: Some(buffer_kb as u32),
            ..Default::default()
        }],
        ..Default::default()
    };
    if max_file_kb > 0 {
        cfg.write_into_file = Some(true);
    }

    let mut ftrace = FtraceConfig::default();
    let mut hyp = None;
    for cat in &opts.categories {
        if cat.contains('/') {
            ftrace.ftrace_events.push(cat.clone());
        } else if cat == "hyp" || cat == "hypervisor" {
            hyp = Some(cat.clone());
        } else {
            ftrace.atrace_categories.push(cat.clone());
        }
        match cat.as_str() {
            "gfx" => push(
                &mut cfg,
                data_source("android.surfaceflinger.frametimeline"),
            ),
            "disk" => push(
                &mut cfg,
                DataSourceConfig {
                    sys_stats_config: Some(SysStatsConfig {
                        diskstat_period_ms: Some(1000),
                        ..Default::default()
                    }),
                    ..data_source("linux.sys_stats")
                },
            ),
            _ => {}
        }
    }
    ftrace.atrace_apps = opts.apps.clone();
    if !ftrace.ftrace_events.is_empty()
        || !ftrace.atrace_categories.is_empty()
        || !ftrace.atrace_apps.is_empty()
    {
        ftrace.symbolize_ksyms = Some(true);
        ftrace.instance_name = opts.ftrace_instance.clone();
        push(
            &mut cfg,
            DataSourceConfig {
                ftrace_config: Some(ftrace),
                ..data_source("linux.ftrace")
            },
        );
    }
    if let Some(instance) = hyp {
        let ftrace = FtraceConfig {
            ftrace_events: vec![format!("{instance}/*")],
            instance_name: Some(instance),
            ..Default::default()
        };
        push(
            &mut cfg,
            DataSourceConfig {
                ftrace_config: Some(ftrace),
                ..data_source("linux.ftrace")
            },
        );
    }
    for name in ["linux.process_stats", "linux.system_info"] {
        push(
            &mut cfg,
            DataSourceConfig {
                target_buffer: Some(0),
                ..data_source(name)
            },
        );
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(cats: &[&str]) -> LightOptions {
        LightOptions {
            categories: cats.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    fn names(cfg: &TraceConfig) -> Vec<String> {
        cfg.data_sources
            .iter()
            .map(|d| d.config.as_ref().unwrap().name.clone().unwrap())
            .collect()
    }

    #[test]
    fn defaults() {
        let cfg = build(&LightOptions::default()).unwrap();
        assert_eq!(cfg.duration_ms, Some(10_000));
        assert_eq!(cfg.buffers[0].size_kb, Some(32 * 1024));
        assert_eq!(cfg.flush_period_ms, Some(30_000));
        assert_eq!(cfg.write_into_file, None);
        assert_eq!(names(&cfg), ["linux.process_stats", "linux.system_info"]);
    }

    #[test]
    fn events_and_categories() {
        let cfg = build(&opts(&["sched/sched_switch", "sched", "freq", "disk"])).unwrap();
        assert_eq!(
            names(&cfg),
            [
                "linux.sys_stats",
                "linux.ftrace",
                "linux.process_stats",
                "linux.system_info"
            ]
        );
        let ftrace = cfg.data_sources[1]
            .config
            .as_ref()
            .unwrap()
            .ftrace_config
            .as_ref()
            .unwrap();
        assert_eq!(ftrace.ftrace_events, ["sched/sched_switch"]);
        assert_eq!(ftrace.atrace_categories, ["sched", "freq", "disk"]);
        assert_eq!(ftrace.symbolize_ksyms, Some(true));
    }

    #[test]
    fn hypervisor_gets_its_own_instance() {
        let cfg = build(&opts(&["hyp"])).unwrap();
        let ftrace = cfg.data_sources[0]
            .config
            .as_ref()
            .unwrap()
            .ftrace_config
            .as_ref()
            .unwrap();
        assert_eq!(ftrace.instance_name.as_deref(), Some("hyp"));
        assert_eq!(ftrace.ftrace_events, ["hyp/*"]);
    }

    #[test]
    fn ftrace_instance_names_the_instance() {
        let mut o = opts(&["sched"]);
        o.ftrace_instance = Some("mine".into());
        let cfg = build(&o).unwrap();
        let ftrace = cfg.data_sources[0].config.as_ref().unwrap();
        let ftrace = ftrace.ftrace_config.as_ref().unwrap();
        assert_eq!(ftrace.instance_name.as_deref(), Some("mine"));
        for bad in ["", "a/b", "..", "a b"] {
            o.ftrace_instance = Some(bad.into());
            assert!(build(&o).is_err(), "{bad}");
        }
    }

    #[test]
    fn size_turns_on_streaming() {
        let o = LightOptions {
            size: Some("10mb".into()),
            ..Default::default()
        };
        let cfg = build(&o).unwrap();
        assert_eq!(cfg.write_into_file, Some(true));
        assert_eq!(cfg.max_file_size_bytes, Some(10 * 1024 * 1024));
    }

    #[test]
    fn units_are_mandatory() {
        for (t, b) in [(Some("10"), None), (None, Some("32")), (Some("1x"), None)] {
            let o = LightOptions {
                time: t.map(Into::into),
                buffer: b.map(Into::into),
                ..Default::default()
            };
            assert!(build(&o).is_err(), "{t:?} {b:?}");
        }
    }
}
