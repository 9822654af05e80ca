//! Every packet kind our producers write is one the report knows: a
//! trace of every data source tracebox offers reads without unknown or
//! malformed packets, as a summary, as JSON and as a dump.

use std::process::Command;

use crate::report::{report_ok, start_recording_config, stop_recording};
use crate::report_end_line::py_json;

#[test]
fn a_trace_of_every_data_source_reads_cleanly() {
    let instance = "tbx_report_every";
    let tmp = tempfile::tempdir().unwrap();
    let config = format!(
        r#"buffers {{ size_kb: 16384 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch" ftrace_events: "sched/sched_waking"
    ftrace_events: "ftrace/print" ftrace_events: "task/task_newtask"
    ftrace_events: "raw_syscalls/sys_enter"
    compact_sched {{ enabled: true }} instance_name: "{instance}" }} }} }}
data_sources {{ config {{ name: "linux.process_stats" process_stats_config {{
    scan_all_processes_on_start: true proc_stats_poll_ms: 100 record_thread_names: true }} }} }}
data_sources {{ config {{ name: "linux.sys_stats" sys_stats_config {{
    meminfo_period_ms: 100 vmstat_period_ms: 100 stat_period_ms: 100 }} }} }}
data_sources {{ config {{ name: "linux.system_info" }} }}
data_sources {{ config {{ name: "linux.sysfs_power" }} }}
data_sources {{ config {{ name: "linux.perf" perf_event_config {{
    timebase {{ frequency: 200 }} callstack_sampling {{ }} }} }} }}
duration_ms: 60000
"#
    );
    let rec = start_recording_config(tmp.path(), instance, &config);
    // Some CPU for the sampler and the counters to see.
    let t = std::time::Instant::now();
    let mut x = 0u64;
    while t.elapsed() < std::time::Duration::from_millis(400) {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
    }
    let trace = stop_recording(rec, tmp.path());
    let trace = trace.to_str().unwrap();

    let text = report_ok(&[trace]);
    for bad in ["unknown_packets", "malformed", "non_packet_fields"] {
        assert!(!text.contains(bad), "{bad} in\n{text}");
    }
    // A problem line of the file (not the "Profile:" section's heading).
    let file_problem = text.lines().any(|l| l.trim_start().starts_with("file:"));
    assert!(!file_problem, "file: in\n{text}");
    for source in ["linux.sys_stats", "linux.sysfs_power", "linux.perf"] {
        assert!(text.contains(source), "{source} not in\n{text}");
    }
    let json = report_ok(&["--json", trace]);
    assert_eq!(py_json(&json, "d['complete']"), "True");
    let dump = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["report", "--events", trace])
        .output()
        .unwrap();
    assert!(dump.status.success(), "{dump:?}");
    assert!(
        String::from_utf8_lossy(&dump.stdout).contains(" sys_enter: "),
        "no sys_enter in the dump"
    );
}
