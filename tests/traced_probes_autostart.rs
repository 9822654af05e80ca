//! The whole tracebox on the real kernel: `tracebox --txt -c CFG -o OUT`
//! autostarts our traced and `traced_probes --reset-ftrace` (on the system
//! sockets, or private ones with `--private-sockets`), records, reports
//! losses, and leaves the ftrace instance it used removed. Needs no
//! sdk-interop peers.

#[path = "support/probes.rs"]
mod traced_probes_common;

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use traced_probes_common::*;

/// `tracebox EXTRA --txt -c DIR/cfg.txt -o DIR/trace.pftrace` with `config`
/// written there, a private state file and no socket overrides (autostart).
fn tracebox_on(dir: &std::path::Path, config: &str, extra: &[&str]) -> Command {
    let cfg = dir.join("cfg.txt");
    std::fs::write(&cfg, config).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
    c.args(extra)
        .arg("--txt")
        .arg("-c")
        .arg(&cfg)
        .arg("-o")
        .arg(dir.join("trace.pftrace"))
        .env("TRACED_PROBES_STATE_FILE", dir.join("state"))
        .env_remove("PERFETTO_PRODUCER_SOCK_NAME")
        .env_remove("PERFETTO_CONSUMER_SOCK_NAME");
    c
}

/// The top-level instance is one per machine: its users here take turns.
static TOP_LEVEL: Mutex<()> = Mutex::new(());

fn top_level() -> MutexGuard<'static, ()> {
    TOP_LEVEL.lock().unwrap_or_else(|e| e.into_inner())
}

fn top_tracing_on() -> String {
    std::fs::read_to_string(Path::new(TRACEFS).join("tracing_on"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Two stacks on private sockets both want the top-level instance: the
/// second traced_probes neither resets nor takes it over; its client's end
/// line names the data source that failed and why, the first trace runs
/// its full length.
#[test]
fn a_second_probes_wanting_the_top_level_gets_a_setup_error() {
    let _g = top_level();
    let a_dir = tempfile::tempdir().unwrap();
    let b_dir = tempfile::tempdir().unwrap();
    let config = |ms: u32| {
        format!(
            r#"buffers {{ size_kb: 8192 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch" }} }} }}
duration_ms: {ms}
"#
        )
    };
    let mut a = tracebox_on(a_dir.path(), &config(3000), &["--private-sockets"])
        .env_remove("TRACED_PROBES_STATE_FILE")
        .stderr(std::fs::File::create(a_dir.path().join("err")).unwrap())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(20), "tracing on", || {
        top_tracing_on() == "1"
    });
    let b = tracebox_on(b_dir.path(), &config(500), &["--private-sockets"])
        .env_remove("TRACED_PROBES_STATE_FILE")
        .output()
        .unwrap();
    let b_err = String::from_utf8_lossy(&b.stderr);
    assert!(b.status.success(), "{b_err}");
    assert!(
        b_err.contains(
            "linux.ftrace setup error: the top-level ftrace instance is in use by another \
             traced_probes (pid "
        ),
        "{b_err}"
    );
    // Said at the start (before the end line), with the owner and the fix.
    let start = b_err
        .lines()
        .find(|l| l.starts_with("NOT RECORDING AS ASKED:"))
        .unwrap_or_else(|| panic!("nothing said at the start: {b_err}"));
    for want in [
        "top-level ftrace instance",
        "(pid ",
        "--ftrace-instance NAME",
    ] {
        assert!(start.contains(want), "{want} not in {start}");
    }
    assert!(b_err.find(start) < b_err.find("Trace stats:"), "{b_err}");
    // A is still recording: B reset nothing.
    assert_eq!(top_tracing_on(), "1", "{b_err}");
    assert!(a.wait().unwrap().success());
    let a_err = std::fs::read_to_string(a_dir.path().join("err")).unwrap();
    assert!(says_nothing_lost(&a_err), "{a_err}");
    check_trace(
        &a_dir.path().join("trace.pftrace"),
        &["--sched-switch".into(), "--ftrace-stats".into()],
    );
}

#[test]
fn autostarted_probes_record_ftrace_processes_and_cpu_info() {
    let _g = top_level();
    let instance = "tbx_probes_autostart";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let config = format!(
        r#"buffers {{ size_kb: 8192 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch" instance_name: "{instance}" }} }} }}
data_sources {{ config {{ name: "linux.process_stats"
    process_stats_config {{ scan_all_processes_on_start: true }} }} }}
data_sources {{ config {{ name: "linux.system_info" }} }}
duration_ms: 1000
"#
    );
    let out = tmp.path().join("trace.pftrace");
    let st = tracebox_on(tmp.path(), &config, &[]).status().unwrap();
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

#[test]
fn kernel_losses_are_reported_on_stderr() {
    let _g = top_level();
    let instance = "tbx_probes_overrun";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    // Two pages per cpu: a marker flood overruns them whatever the reader does.
    let config = format!(
        r#"buffers {{ size_kb: 8192 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print" instance_name: "{instance}" buffer_size_kb: 4 }} }} }}
duration_ms: 2500
"#
    );
    // Private sockets: the other test here autostarts on the system ones.
    let child = tracebox_on(tmp.path(), &config, &["--private-sockets"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let on = instance_dir(instance).join("tracing_on");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::fs::read_to_string(&on).map_or(true, |s| s.trim() != "1") {
        assert!(
            std::time::Instant::now() < deadline,
            "tracing never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut marker = std::fs::OpenOptions::new()
        .write(true)
        .open(instance_dir(instance).join("trace_marker"))
        .unwrap();
    let flood = std::time::Instant::now();
    while flood.elapsed() < std::time::Duration::from_millis(700) {
        for _ in 0..1000 {
            let _ = std::io::Write::write(&mut marker, b"tbx overrun test marker\n");
        }
    }
    drop(marker);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let lost: u64 = err
        .split("ftrace: the kernel lost ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kernel loss line in {err:?}"));
    assert!(lost > 0, "{err}");
}
