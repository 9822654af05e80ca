//! traced_probes flags on the real kernel (root): --cleanup-after-crash and
//! --reset-ftrace leave tracing off and events disabled, using the state
//! file a crashed run leaves behind; --version. Each test owns an instance.

use crate::support::probes as traced_probes_common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use traced_probes_common::*;

/// An instance left "mid-trace": tracing on, sched_switch enabled, and a
/// state file saying a previous run was using it.
fn dirty_instance(name: &str, state: &Path) {
    let d = instance_dir(name);
    let _ = std::fs::create_dir(&d);
    std::fs::write(d.join("events/sched/sched_switch/enable"), "1").unwrap();
    std::fs::write(d.join("tracing_on"), "1").unwrap();
    std::fs::write(state, format!("instance {name} existing\n")).unwrap();
}

fn assert_clean(name: &str) {
    let d = instance_dir(name);
    assert_eq!(read_trim(d.join("tracing_on")), "0");
    assert_eq!(read_trim(d.join("events/sched/sched_switch/enable")), "0");
}

#[test]
fn cleanup_after_crash_resets_the_instance_and_exits_0() {
    let name = "tbx_probes_cleanup_flag";
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    dirty_instance(name, &state);
    let st = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["traced_probes", "--cleanup-after-crash"])
        .env("TRACED_PROBES_STATE_FILE", &state)
        .status()
        .unwrap();
    let clean = std::panic::catch_unwind(|| assert_clean(name));
    let _ = std::fs::remove_dir(instance_dir(name));
    clean.unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(!state.exists(), "state file consumed");
}

#[test]
fn reset_ftrace_cleans_then_runs_until_sigterm() {
    let name = "tbx_probes_reset_flag";
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    dirty_instance(name, &state);
    // No traced on this socket: the daemon keeps retrying with backoff.
    let sock = tmp.path().join("nobody.sock");
    let mut p = start_probes(
        sock.to_str().unwrap(),
        &state,
        &["--reset-ftrace"],
        &tmp.path().join("probes.log"),
        false,
    );
    wait_until(Duration::from_secs(10), "reset", || !state.exists());
    let clean = std::panic::catch_unwind(|| assert_clean(name));
    let _ = std::fs::remove_dir(instance_dir(name));
    clean.unwrap();
    assert_eq!(read_trim(Path::new(TRACEFS).join("tracing_on")), "0");
    p.signal(Signal::SIGTERM);
    let st = p.wait_exit(Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(0));
}

#[test]
fn version_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["traced_probes", "--version"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("tracebox "));
}

#[test]
fn background_prints_the_daemon_pid_and_sigterm_stops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["traced_probes", "--background"])
        .env(
            "PERFETTO_PRODUCER_SOCK_NAME",
            tmp.path().join("nobody.sock"),
        )
        .env("TRACED_PROBES_STATE_FILE", tmp.path().join("state"))
        .output()
        .unwrap();
    assert!(out.status.success());
    let pid: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Alive (not a zombie): state is the field after "(comm)".
    let state = |s: String| {
        s.rsplit(')')
            .next()
            .unwrap_or("")
            .split_whitespace()
            .next()
            .map(str::to_string)
    };
    assert!(
        matches!(state(stat()).as_deref(), Some("S" | "R")),
        "{}",
        stat()
    );
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    wait_until(Duration::from_secs(10), "daemon exit", || {
        matches!(state(stat()).as_deref(), None | Some("Z"))
    });
}
