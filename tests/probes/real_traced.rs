//! traced_probes against the REAL Perfetto service (tests/sdk-interop's
//! real-traced) with the SDK's consumer. Needs the sdk-interop binaries,
//! which scripts/test.sh builds first.
//! Runs as root on the real kernel; every test uses its own tracefs
//! instance, sockets and state file.

use crate::support::probes as traced_probes_common;

use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use traced_probes_common::*;

fn config_text(instance: &str, extra: &str) -> String {
    format!(
        r#"
buffers {{ size_kb: 32768 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.process_stats"
    process_stats_config {{ scan_all_processes_on_start: true proc_stats_poll_ms: 100 }} }} }}
data_sources {{ config {{ name: "linux.sys_stats"
    sys_stats_config {{ meminfo_period_ms: 100 }} }} }}
data_sources {{ config {{ name: "linux.system_info" }} }}
data_sources {{ config {{ name: "linux.ftrace"
    ftrace_config {{
        ftrace_events: "sched/sched_switch"
        ftrace_events: "ftrace/print"
        ftrace_events: "tbx_no_such_group/no_such_event"
        atrace_categories: "sched"
        instance_name: "{instance}"
        buffer_size_kb: 1024
        drain_period_ms: 50
    }} }} }}
{extra}
"#
    )
}

/// True once the ftrace data source of `instance` has started.
fn ftrace_started(instance: &str) -> bool {
    let d = instance_dir(instance);
    read_trim(d.join("tracing_on")) == "1"
        && read_trim(d.join("events/sched/sched_switch/enable")) == "1"
}

#[test]
fn session_has_process_tree_sys_stats_cpu_info_and_ftrace_markers() {
    let (Some(traced_bin), Some(consumer_bin)) =
        (interop_bin("real-traced"), interop_bin("sdk-consumer"))
    else {
        return;
    };
    full_session("tbx_probes_e2e", &consumer_bin, |socks, log| {
        start_real_traced(&traced_bin, socks, log)
    });
}

/// The same session with our own traced in the middle.
#[test]
fn full_session_through_our_traced() {
    let Some(consumer_bin) = interop_bin("sdk-consumer") else {
        return;
    };
    full_session("tbx_probes_e2e_ours", &consumer_bin, start_our_traced);
}

fn full_session(instance: &str, consumer_bin: &Path, traced: impl FnOnce(&Sockets, &Path) -> Proc) {
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let state = dir.join("state");
    let _traced = traced(&socks, &dir.join("traced.log"));
    let mut probes = start_probes(&socks.producer, &state, &[], &dir.join("probes.log"), true);

    let cfg = dir.join("config.pb");
    write_config(&cfg, &config_text(instance, ""));
    let (out, stop) = (dir.join("trace.pb"), dir.join("stop"));
    let mut consumer = start_consumer(
        consumer_bin,
        &socks,
        &cfg,
        &out,
        &stop,
        &dir.join("consumer.log"),
    );
    wait_until(Duration::from_secs(30), "ftrace data source start", || {
        ftrace_started(instance)
    });
    assert!(state.exists(), "state file must exist while tracing");
    let markers: Vec<String> = (0..3)
        .map(|i| format!("tbx-probes-marker-{}-{i}", std::process::id()))
        .collect();
    for m in &markers {
        std::fs::write(instance_dir(instance).join("trace_marker"), m).unwrap();
    }
    // A process born after the initial scan, seen only through ftrace (its
    // marker's pid): process_stats must describe it on demand.
    let child_marker = format!("tbx-probes-child-{}", std::process::id());
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo {child_marker} > {}/trace_marker; sleep 1",
            instance_dir(instance).display()
        ))
        .spawn()
        .unwrap();
    let child_pid = child.id();
    // Let sys_stats poll a few times, then stop the session.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&stop, "").unwrap();
    let st = consumer.wait_exit(Duration::from_secs(60));
    if st.map(|s| s.success()) != Some(true) {
        dump(dir);
        panic!("sdk-consumer failed: {st:?}");
    }

    let _ = child.wait();
    let mut args = vec![
        "--pid".to_string(),
        std::process::id().to_string(),
        "--pid".to_string(),
        child_pid.to_string(),
        "--marker".to_string(),
        child_marker,
        "--meminfo".into(),
        "--cpu-info".into(),
        "--sched-switch".into(),
        "--ftrace-stats".into(),
        "--unknown-event".into(),
        "tbx_no_such_group/no_such_event".into(),
        "--process-stats".into(),
    ];
    for m in &markers {
        args.push("--marker".into());
        args.push(m.clone());
    }
    check_trace(&out, &args);

    // Session over: the instance we created is gone, the state file too.
    wait_until(Duration::from_secs(10), "instance removal", || {
        !instance_dir(instance).exists()
    });
    // The crash state goes with the release, after the stop was told.
    wait_until(Duration::from_secs(10), "crash state removal", || {
        !state.exists()
    });
    // SIGTERM: clean exit 0.
    probes.signal(Signal::SIGTERM);
    let st = probes.wait_exit(Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(0), "traced_probes exit");
}

#[test]
fn reregisters_after_traced_restarts() {
    let (Some(traced_bin), Some(consumer_bin)) =
        (interop_bin("real-traced"), interop_bin("sdk-consumer"))
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let state = dir.join("state");
    let mut traced = start_real_traced(&traced_bin, &socks, &dir.join("traced.log"));
    let _probes = start_probes(&socks.producer, &state, &[], &dir.join("probes.log"), true);
    let has_probes = |s: &Sockets| {
        let ds = registered_data_sources(&s.consumer);
        [
            "linux.ftrace",
            "linux.process_stats",
            "linux.sys_stats",
            "linux.system_info",
            "linux.sysfs_power",
        ]
        .iter()
        .all(|n| ds.iter().any(|d| d == n))
    };
    wait_until(Duration::from_secs(10), "registration", || {
        has_probes(&socks)
    });

    traced.signal(Signal::SIGTERM);
    assert!(traced.wait_exit(Duration::from_secs(10)).is_some());
    drop(traced);
    let _ = std::fs::remove_file(&socks.producer);
    let _ = std::fs::remove_file(&socks.consumer);
    let _traced2 = start_real_traced(&traced_bin, &socks, &dir.join("traced2.log"));
    wait_until(Duration::from_secs(40), "re-registration", || {
        has_probes(&socks)
    });

    // And a session on the new service works end to end.
    let cfg = dir.join("config.pb");
    write_config(
        &cfg,
        r#"buffers { size_kb: 4096 }
           data_sources { config { name: "linux.system_info" } }
           data_sources { config { name: "linux.sys_stats"
               sys_stats_config { meminfo_period_ms: 100 } } }"#,
    );
    let (out, stop) = (dir.join("trace.pb"), dir.join("stop"));
    let mut consumer = start_consumer(
        &consumer_bin,
        &socks,
        &cfg,
        &out,
        &stop,
        &dir.join("consumer.log"),
    );
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&stop, "").unwrap();
    let st = consumer.wait_exit(Duration::from_secs(60));
    if st.map(|s| s.success()) != Some(true) {
        dump(dir);
        panic!("sdk-consumer failed: {st:?}");
    }
    check_trace(&out, &["--cpu-info".into(), "--meminfo".into()]);
}

#[test]
fn sigkill_mid_session_is_cleaned_by_cleanup_after_crash() {
    crash_then("tbx_probes_crash", |_socks, state, _dir| {
        // It undoes what the state file records (the crashed instance,
        // checked by crash_then) and leaves the top level, which it does
        // not own, as it was.
        let top = read_trim(Path::new(TRACEFS).join("tracing_on"));
        let cleanup = std::process::Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["traced_probes", "--cleanup-after-crash"])
            .env("TRACED_PROBES_STATE_FILE", state)
            .status()
            .unwrap();
        assert_eq!(cleanup.code(), Some(0));
        assert_eq!(read_trim(Path::new(TRACEFS).join("tracing_on")), top);
        None
    });
}

#[test]
fn sigkill_mid_session_is_cleaned_by_the_next_start() {
    crash_then("tbx_probes_crash2", |socks, state, dir| {
        Some(start_probes(
            &socks.producer,
            state,
            &[],
            &dir.join("probes2.log"),
            true,
        ))
    });
}

/// Kills traced_probes with SIGKILL mid-session (ftrace left running in a
/// tracefs instance it created), runs `recover`, and checks that the
/// instance is gone and the state file consumed.
fn crash_then(instance: &str, recover: impl FnOnce(&Sockets, &Path, &Path) -> Option<Proc>) {
    let (Some(traced_bin), Some(consumer_bin)) =
        (interop_bin("real-traced"), interop_bin("sdk-consumer"))
    else {
        return;
    };
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let state = dir.join("state");
    let _traced = start_real_traced(&traced_bin, &socks, &dir.join("traced.log"));
    let mut probes = start_probes(&socks.producer, &state, &[], &dir.join("probes.log"), true);
    let cfg = dir.join("config.pb");
    write_config(&cfg, &config_text(instance, ""));
    let (out, stop) = (dir.join("trace.pb"), dir.join("stop"));
    let mut consumer = start_consumer(
        &consumer_bin,
        &socks,
        &cfg,
        &out,
        &stop,
        &dir.join("consumer.log"),
    );
    // Mid-session means after the start: the SDK consumer's start_blocking
    // returns only once every data source acked its start, and it never
    // returns (nor sees the stop file) if the producer dies before acking
    // (the service reports that data source stopped, and the SDK keeps
    // waiting for it). Ftrace is turned on just before its ack.
    wait_consumer_started(&dir.join("consumer.log"));
    assert!(ftrace_started(instance));
    probes.signal(Signal::SIGKILL);
    probes.wait_exit(Duration::from_secs(10)).unwrap();
    // End the session (otherwise traced would hand it to the restarted
    // producer, which would rightly set the instance up again).
    std::fs::write(&stop, "").unwrap();
    consumer.wait_exit(Duration::from_secs(60)).unwrap();
    // The kernel is left tracing, as after a real crash.
    assert!(ftrace_started(instance));
    assert!(state.exists());

    let _restarted = recover(&socks, &state, dir);
    wait_until(Duration::from_secs(10), "instance removal", || {
        !instance_dir(instance).exists()
    });
    // The crash state goes with the release, after the stop was told.
    wait_until(Duration::from_secs(10), "crash state removal", || {
        !state.exists()
    });
}

fn ftrace_only_config(instance: &str, events: &[&str]) -> String {
    let events: String = events
        .iter()
        .map(|e| format!("ftrace_events: \"{e}\"\n"))
        .collect();
    format!(
        r#"buffers {{ size_kb: 8192 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace"
    ftrace_config {{ {events} instance_name: "{instance}" drain_period_ms: 50 }} }} }}"#
    )
}

#[test]
fn concurrent_sessions_share_the_instance_and_see_only_their_events() {
    let (Some(traced_bin), Some(consumer_bin)) =
        (interop_bin("real-traced"), interop_bin("sdk-consumer"))
    else {
        return;
    };
    let instance = "tbx_probes_shared";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let state = dir.join("state");
    let _traced = start_real_traced(&traced_bin, &socks, &dir.join("traced.log"));
    let _probes = start_probes(&socks.producer, &state, &[], &dir.join("probes.log"), true);
    let ev = |e: &str| read_trim(instance_dir(instance).join(format!("events/{e}/enable")));

    // Session A: markers (and sched_wakeup, whose switch tells us A started).
    let cfg_a = dir.join("a.pb");
    write_config(
        &cfg_a,
        &ftrace_only_config(instance, &["ftrace/print", "sched/sched_wakeup"]),
    );
    let (out_a, stop_a) = (dir.join("a.trace"), dir.join("a.stop"));
    let mut a = start_consumer(
        &consumer_bin,
        &socks,
        &cfg_a,
        &out_a,
        &stop_a,
        &dir.join("consumer.log"),
    );
    wait_until(Duration::from_secs(30), "session A start", || {
        read_trim(instance_dir(instance).join("tracing_on")) == "1"
            && ev("sched/sched_wakeup") == "1"
    });
    // Session B: sched_switch only.
    let cfg_b = dir.join("b.pb");
    write_config(
        &cfg_b,
        &ftrace_only_config(instance, &["sched/sched_switch"]),
    );
    let (out_b, stop_b) = (dir.join("b.trace"), dir.join("b.stop"));
    let mut b = start_consumer(
        &consumer_bin,
        &socks,
        &cfg_b,
        &out_b,
        &stop_b,
        &dir.join("consumer_b.log"),
    );
    wait_until(Duration::from_secs(30), "session B setup", || {
        ev("sched/sched_switch") == "1"
    });
    let marker = format!("tbx-probes-shared-{}", std::process::id());
    std::fs::write(instance_dir(instance).join("trace_marker"), &marker).unwrap();
    std::thread::sleep(Duration::from_millis(300));

    std::fs::write(&stop_a, "").unwrap();
    assert!(a
        .wait_exit(Duration::from_secs(60))
        .is_some_and(|s| s.success()));
    // A is gone: its events are off, B's stay on, the instance stays.
    wait_until(Duration::from_secs(10), "A's events off", || {
        ev("sched/sched_wakeup") == "0"
    });
    assert_eq!(ev("sched/sched_switch"), "1");
    assert_eq!(read_trim(instance_dir(instance).join("tracing_on")), "1");

    std::fs::write(&stop_b, "").unwrap();
    assert!(b
        .wait_exit(Duration::from_secs(60))
        .is_some_and(|s| s.success()));
    wait_until(Duration::from_secs(10), "instance removal", || {
        !instance_dir(instance).exists()
    });
    // The crash state goes with the release, after the stop was told.
    wait_until(Duration::from_secs(10), "crash state removal", || {
        !state.exists()
    });
    check_trace(
        &out_a,
        &[
            "--marker".into(),
            marker.clone(),
            "--no-sched-switch".into(),
        ],
    );
    check_trace(&out_b, &["--sched-switch".into(), "--no-prints".into()]);
}

#[test]
fn sigterm_mid_session_leaves_ftrace_clean() {
    let (Some(traced_bin), Some(consumer_bin)) =
        (interop_bin("real-traced"), interop_bin("sdk-consumer"))
    else {
        return;
    };
    let instance = "tbx_probes_sigterm";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let state = dir.join("state");
    let _traced = start_real_traced(&traced_bin, &socks, &dir.join("traced.log"));
    let mut probes = start_probes(&socks.producer, &state, &[], &dir.join("probes.log"), true);
    let cfg = dir.join("config.pb");
    write_config(&cfg, &config_text(instance, ""));
    let (out, stop) = (dir.join("trace.pb"), dir.join("stop"));
    let _consumer = start_consumer(
        &consumer_bin,
        &socks,
        &cfg,
        &out,
        &stop,
        &dir.join("consumer.log"),
    );
    wait_until(Duration::from_secs(30), "ftrace data source start", || {
        ftrace_started(instance)
    });
    probes.signal(Signal::SIGTERM);
    let st = probes.wait_exit(Duration::from_secs(10));
    assert_eq!(st.and_then(|s| s.code()), Some(0));
    assert!(
        !instance_dir(instance).exists(),
        "instance we created is removed"
    );
    assert!(!state.exists());
}

#[test]
fn traced_dying_mid_session_restores_ftrace() {
    let (Some(traced_bin), Some(consumer_bin)) =
        (interop_bin("real-traced"), interop_bin("sdk-consumer"))
    else {
        return;
    };
    let instance = "tbx_probes_traced_dies";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let state = dir.join("state");
    let traced = start_real_traced(&traced_bin, &socks, &dir.join("traced.log"));
    let mut probes = start_probes(&socks.producer, &state, &[], &dir.join("probes.log"), true);
    let cfg = dir.join("config.pb");
    write_config(&cfg, &config_text(instance, ""));
    let (out, stop) = (dir.join("trace.pb"), dir.join("stop"));
    let _consumer = start_consumer(
        consumer_bin.as_path(),
        &socks,
        &cfg,
        &out,
        &stop,
        &dir.join("consumer.log"),
    );
    wait_until(Duration::from_secs(30), "ftrace data source start", || {
        ftrace_started(instance)
    });
    traced.signal(Signal::SIGKILL);
    drop(traced);
    // traced_probes notices, tears every instance down (then drops the
    // crash marker) and keeps running.
    wait_until(
        Duration::from_secs(10),
        "instance and marker removal",
        || !instance_dir(instance).exists() && !state.exists(),
    );
    assert!(probes.child.try_wait().unwrap().is_none(), "still running");
}
