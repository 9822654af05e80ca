//! The whole tracebox on the real kernel: `tracebox --txt -c CFG -o OUT`
//! autostarts our traced and `traced_probes --reset-ftrace` on private
//! sockets, records, and leaves the ftrace instance it used removed.
//! Needs no sdk-interop peers.

mod traced_probes_common;

use std::process::Command;

use traced_probes_common::*;

#[test]
fn autostarted_probes_record_ftrace_processes_and_cpu_info() {
    let instance = "tbx_probes_autostart";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("cfg.txt");
    std::fs::write(
        &cfg,
        format!(
            r#"buffers {{ size_kb: 8192 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch" instance_name: "{instance}" }} }} }}
data_sources {{ config {{ name: "linux.process_stats"
    process_stats_config {{ scan_all_processes_on_start: true }} }} }}
data_sources {{ config {{ name: "linux.system_info" }} }}
duration_ms: 1000
"#
        ),
    )
    .unwrap();
    let out = tmp.path().join("trace.pftrace");
    let st = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("--txt")
        .arg("-c")
        .arg(&cfg)
        .arg("-o")
        .arg(&out)
        .env("TRACED_PROBES_STATE_FILE", tmp.path().join("state"))
        .env_remove("PERFETTO_PRODUCER_SOCK_NAME")
        .env_remove("PERFETTO_CONSUMER_SOCK_NAME")
        .status()
        .unwrap();
    assert!(st.success(), "{st:?}");
    check_trace(
        &out,
        &[
            "--pid".into(),
            std::process::id().to_string(),
            "--sched-switch".into(),
            "--cpu-info".into(),
            "--ftrace-stats".into(),
        ],
    );
    assert!(!instance_dir(instance).exists());
    assert!(!tmp.path().join("state").exists());
}
