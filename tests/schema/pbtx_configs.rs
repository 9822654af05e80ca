//! Text configs from tests/data/pbtx/ parse, and decode with the pb-rs
//! TraceConfig type to the values written in the text.

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::cmd::pbtx;
use tracebox::pb::protos::mod_TraceConfig::mod_BufferConfig::FillPolicy;
use tracebox::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
use tracebox::pb::protos::TraceConfig;

fn load(name: &str) -> TraceConfig {
    let path = format!("{}/tests/data/pbtx/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    let bytes = pbtx::trace_config_txt_to_pb(name, &text).unwrap_or_else(|e| panic!("{e}"));
    assert!(!pbtx::looks_like_text(&bytes) || bytes.is_empty());
    TraceConfig::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap()
}

fn ftrace_events(cfg: &TraceConfig, ds: usize) -> Vec<String> {
    let c = cfg.data_sources[ds].config.as_ref().unwrap();
    c.ftrace_config.as_ref().unwrap().ftrace_events.clone()
}

#[test]
fn basic_ftrace() {
    let c = load("basic_ftrace.pbtx");
    assert_eq!(c.duration_ms, Some(10000));
    assert_eq!(c.buffers.len(), 1);
    assert_eq!(c.buffers[0].size_kb, Some(65536));
    assert_eq!(c.buffers[0].fill_policy, Some(FillPolicy::RING_BUFFER));
    let ds = c.data_sources[0].config.as_ref().unwrap();
    assert_eq!(ds.name.as_deref(), Some("linux.ftrace"));
    assert_eq!(ds.target_buffer, Some(0));
    assert_eq!(ftrace_events(&c, 0), ["sched_switch", "sched_wakeup"]);
}

#[test]
fn two_buffers() {
    let c = load("two_buffers.pbtx");
    let policies: Vec<_> = c
        .buffers
        .iter()
        .map(|b| (b.size_kb, b.fill_policy))
        .collect();
    assert_eq!(
        policies,
        [
            (Some(4096), Some(FillPolicy::RING_BUFFER)),
            (Some(8192), Some(FillPolicy::DISCARD))
        ]
    );
    let ss = c.data_sources[1].config.as_ref().unwrap();
    assert_eq!(ss.target_buffer, Some(1));
    assert_eq!(
        ss.sys_stats_config.as_ref().unwrap().meminfo_period_ms,
        Some(5000)
    );
}

#[test]
fn producer_filter() {
    let c = load("producer_filter.pbtx");
    assert_eq!(c.buffers[0].fill_policy, None);
    let ds = &c.data_sources[0];
    assert_eq!(
        ds.config.as_ref().unwrap().name.as_deref(),
        Some("track_event")
    );
    assert_eq!(
        ds.producer_name_filter,
        ["com.android.chrome", "com.google.chrome.canary"]
    );
}

#[test]
fn triggers() {
    let c = load("start_trigger.pbtx");
    let t = c.trigger_config.as_ref().unwrap();
    assert_eq!(t.trigger_mode, Some(TriggerMode::START_TRACING));
    assert_eq!(t.trigger_timeout_ms, Some(30000));
    assert_eq!(t.triggers[0].name.as_deref(), Some("myapp_is_slow"));
    assert_eq!(t.triggers[0].stop_delay_ms, Some(5000));
    let c = load("stop_trigger.pbtx");
    let t = c.trigger_config.as_ref().unwrap();
    assert_eq!(t.trigger_mode, Some(TriggerMode::STOP_TRACING));
    assert_eq!(t.triggers[0].stop_delay_ms, Some(1000));
    assert_eq!(ftrace_events(&c, 0), ["power/cpu_frequency"]);
}

#[test]
fn long_trace() {
    let c = load("long_trace.pbtx");
    assert_eq!(c.write_into_file, Some(true));
    assert_eq!(c.file_write_period_ms, Some(2500));
    assert_eq!(c.max_file_size_bytes, Some(1_000_000_000));
    assert_eq!(c.duration_ms, Some(3_600_000));
    assert_eq!(c.flush_period_ms, Some(30000));
}

#[test]
fn atrace_app() {
    let c = load("atrace_app.pbtx");
    let f = c.data_sources[0]
        .config
        .as_ref()
        .unwrap()
        .ftrace_config
        .as_ref()
        .unwrap();
    assert_eq!(f.atrace_apps, ["com.example.carsettingapplication"]);
    assert_eq!(c.duration_ms, Some(2000));
}

#[test]
fn linux_system() {
    use tracebox::pb::protos::mod_ProcessStatsConfig::Quirks;
    use tracebox::pb::protos::mod_SysStatsConfig::StatCounters;
    use tracebox::pb::protos::{MeminfoCounters, VmstatCounters};
    let c = load("linux_system.pbtx");
    assert_eq!(c.unique_session_name.as_deref(), Some("board-bringup"));
    assert_eq!(c.buffers.len(), 2);
    let f = c.data_sources[0]
        .config
        .as_ref()
        .unwrap()
        .ftrace_config
        .as_ref()
        .unwrap();
    assert_eq!(f.ftrace_events.len(), 4);
    assert_eq!(f.atrace_categories, ["sched"]);
    assert_eq!(f.buffer_size_kb, Some(8192));
    assert_eq!(f.drain_period_ms, Some(250));
    assert_eq!(f.symbolize_ksyms, Some(true));
    assert_eq!(f.throttle_rss_stat, Some(true));
    assert_eq!(f.compact_sched.as_ref().unwrap().enabled, Some(true));
    let p = c.data_sources[1]
        .config
        .as_ref()
        .unwrap()
        .process_stats_config
        .as_ref()
        .unwrap();
    assert_eq!(p.proc_stats_poll_ms, Some(1000));
    assert_eq!(p.quirks, [Quirks::DISABLE_ON_DEMAND]);
    assert_eq!(p.scan_all_processes_on_start, Some(true));
    let s = c.data_sources[2]
        .config
        .as_ref()
        .unwrap()
        .sys_stats_config
        .as_ref()
        .unwrap();
    assert_eq!(
        s.meminfo_counters,
        [
            MeminfoCounters::MEMINFO_MEM_TOTAL,
            MeminfoCounters::MEMINFO_MEM_FREE
        ]
    );
    assert_eq!(
        s.vmstat_counters,
        [
            VmstatCounters::VMSTAT_NR_FREE_PAGES,
            VmstatCounters::VMSTAT_PGFAULT
        ]
    );
    assert_eq!(s.stat_counters, [StatCounters::STAT_CPU_TIMES]);
    assert_eq!(s.cpufreq_period_ms, Some(500));
    let name = c.data_sources[3].config.as_ref().unwrap().name.as_deref();
    assert_eq!(name, Some("linux.system_info"));
}

#[test]
fn every_fixture_parses() {
    let dir = format!("{}/tests/data/pbtx", env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        pbtx::trace_config_txt_to_pb(&path.display().to_string(), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        n += 1;
    }
    assert!(n >= 8);
}

#[test]
fn all_types() {
    use tracebox::pb::protos::mod_TraceConfig::mod_TriggerConfig::TriggerMode;
    let c = load("all_types.pbtx");
    assert_eq!(c.buffers[0].size_kb, Some(1024));
    let t = c.data_sources[0]
        .config
        .as_ref()
        .unwrap()
        .for_testing
        .as_ref()
        .unwrap();
    assert_eq!((t.message_count, t.seed), (Some(10), Some(0xcafe)));
    let d = t.dummy_fields.as_ref().unwrap();
    assert_eq!(d.field_uint32, Some(u32::MAX));
    assert_eq!(d.field_int32, Some(i32::MIN));
    assert_eq!(d.field_uint64, Some(u64::MAX));
    assert_eq!(d.field_int64, Some(i64::MIN));
    assert_eq!(d.field_fixed64, Some(u64::MAX));
    assert_eq!(d.field_sfixed64, Some(-1));
    assert_eq!(d.field_fixed32, Some(7));
    assert_eq!(d.field_sfixed32, Some(-7));
    assert_eq!(d.field_double, Some(-1.5e-3));
    assert_eq!(d.field_float, Some(2.25));
    assert_eq!(d.field_sint64, Some(-123456789012));
    assert_eq!(d.field_sint32, Some(-42));
    assert_eq!(
        d.field_string.as_deref(),
        Some("tab\there and \"quotes\"caf\u{e9}")
    );
    assert_eq!(d.field_bytes.as_deref(), Some(&b"\x00\x01\xff\n"[..]));
    let f = c.data_sources[1]
        .config
        .as_ref()
        .unwrap()
        .ftrace_config
        .as_ref()
        .unwrap();
    assert_eq!(f.ftrace_events, ["sched/sched_switch", "ftrace/print"]);
    let rules = &f.print_filter.as_ref().unwrap().rules;
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].allow, Some(false));
    assert_eq!(rules[1].allow, Some(true));
    assert_eq!(
        c.trigger_config.as_ref().unwrap().trigger_mode,
        Some(TriggerMode::CLONE_SNAPSHOT)
    );
    assert_eq!(
        c.trigger_config.as_ref().unwrap().triggers[0].skip_probability,
        Some(0.25)
    );
    assert_eq!(c.bugreport_score, Some(-5));
}

/// Writes `<fixture>.bin` into $TRACEBOX_PBTX_OUT for tests/py/check_pbtx.py,
/// which compares them with Python protobuf's own text-format parser.
#[test]
fn dump_for_python() {
    let Ok(out) = std::env::var("TRACEBOX_PBTX_OUT") else {
        return;
    };
    for sub in ["tests/data/pbtx", "configs"] {
        let dir = format!("{}/{sub}", env!("CARGO_MANIFEST_DIR"));
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let bytes = pbtx::trace_config_txt_to_pb("f", &text).unwrap();
            let name = path.file_name().unwrap().to_str().unwrap();
            std::fs::write(format!("{out}/{name}.bin"), bytes).unwrap();
        }
    }
}

/// Prefixes of every fixture, and single-byte replacements with a
/// syntax character, gives a result or an error with a position — never a
/// panic (a cheap stand-in for fuzzing when no nightly toolchain is around).
#[test]
fn mangled_fixtures_never_panic() {
    let dir = format!("{}/tests/data/pbtx", env!("CARGO_MANIFEST_DIR"));
    for entry in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let bytes = text.as_bytes();
        for cut in (0..bytes.len()).step_by(3) {
            if let Ok(t) = std::str::from_utf8(&bytes[..cut]) {
                if let Err(e) = pbtx::trace_config_txt_to_pb("f", t) {
                    assert!(e.line >= 1 && e.col >= 1, "{e}");
                }
            }
        }
        for i in (0..bytes.len()).step_by(11) {
            for c in [b'{', b'}', b'"', b'\\', b'-', b'[', b'#', b'\n', b'x'] {
                let mut m = bytes.to_vec();
                m[i] = c;
                if let Ok(t) = std::str::from_utf8(&m) {
                    let _ = pbtx::trace_config_txt_to_pb("f", t).map_err(|e| e.to_string());
                    let opts = pbtx::ParseOptions {
                        allow_unknown: true,
                    };
                    let _ = pbtx::text_to_proto(pbtx::TRACE_CONFIG, "f", t, opts);
                }
            }
        }
    }
}

#[test]
fn other_sources() {
    use tracebox::pb::protos::mod_PerfEvents::PerfClock;
    use tracebox::pb::protos::{
        AndroidLogConfig, AndroidLogId, AndroidLogPriority, AndroidPowerConfig, ChromeConfig,
        HeapprofdConfig, PerfEventConfig, TrackEventConfig,
    };
    // Sub-configs traced only forwards are opaque bytes in our pb-rs types
    // (build.rs), most of them kept by field number; decode them explicitly.
    fn sub<M: for<'a> quick_protobuf::MessageRead<'a>>(b: Option<&[u8]>) -> M {
        let b = b.expect("sub-config present");
        M::from_reader(&mut quick_protobuf::BytesReader::from_bytes(b), b).unwrap()
    }
    let c = load("other_sources.pbtx");
    let cfg = |i: usize| c.data_sources[i].config.as_ref().unwrap();
    let perf: PerfEventConfig = sub(cfg(0).perf_event_config.as_deref());
    let tb = perf.timebase.as_ref().unwrap();
    assert_eq!(tb.timestamp_clock, Some(PerfClock::PERF_CLOCK_MONOTONIC));
    // Oneof members, as pb-rs prints them.
    let interval = format!("{:?} {:?}", tb.interval, tb.event);
    assert_eq!(interval, "frequency(100) counter(SW_CPU_CLOCK)");
    let h: HeapprofdConfig = sub(cfg(1).opaque_sub_config(105));
    assert_eq!(h.sampling_interval_bytes, Some(4096));
    assert_eq!(
        h.continuous_dump_config.as_ref().unwrap().dump_interval_ms,
        Some(1000)
    );
    let l: AndroidLogConfig = sub(cfg(2).opaque_sub_config(107));
    assert_eq!(
        l.log_ids,
        [AndroidLogId::LID_DEFAULT, AndroidLogId::LID_SYSTEM]
    );
    assert_eq!(l.min_prio, Some(AndroidLogPriority::PRIO_INFO));
    let p: AndroidPowerConfig = sub(cfg(3).opaque_sub_config(106));
    assert_eq!(p.battery_poll_ms, Some(250));
    let te: TrackEventConfig = sub(cfg(4).opaque_sub_config(113));
    assert_eq!(te.enabled_categories, ["*"]);
    let chrome: ChromeConfig = sub(cfg(5).opaque_sub_config(101));
    assert_eq!(
        chrome.trace_config.as_deref(),
        Some("{\"record_mode\":\"record-continuously\"}")
    );
}
