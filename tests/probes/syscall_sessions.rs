//! `syscall_events` in concurrent sessions through the real traced_probes
//! (our traced and perfetto CLI), in a private tracefs instance: the
//! kernel filter is the union of the sessions' syscalls (lifted while one
//! wants them all), and each session still gets only its own.

use crate::support::probes as traced_probes_common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::Trace;
use tracebox::traced_probes::ftrace::parse::syscalls::syscall_number;
use traced_probes_common::*;

const INSTANCE: &str = "tbx_probes_syscall_sessions";

fn session(dir: &Path, consumer: &str, name: &str, ftrace_config: &str) -> Child {
    let cfg = dir.join(format!("{name}.txt"));
    std::fs::write(
        &cfg,
        format!(
            "duration_ms: 60000\nbuffers {{ size_kb: 16384 fill_policy: DISCARD }}\n\
             data_sources {{ config {{ name: \"linux.ftrace\" ftrace_config {{ \
             {ftrace_config} instance_name: \"{INSTANCE}\" drain_period_ms: 50 }} }} }}\n"
        ),
    )
    .unwrap();
    Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(dir.join(format!("{name}.pb")))
        .env("PERFETTO_CONSUMER_SOCK_NAME", consumer)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("{name}.log"))).unwrap())
        .spawn()
        .unwrap()
}

fn stop(mut c: Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = c.wait().unwrap();
    assert!(st.success(), "perfetto: {st:?}");
}

/// Waits until `n` ftrace sources have started in traced_probes.
fn wait_started(dir: &Path, n: usize) {
    wait_until(
        Duration::from_secs(30),
        &format!("{n} ftrace starts"),
        || {
            std::fs::read_to_string(dir.join("probes.log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("ftrace: source ") && l.contains(" started on "))
                .count()
                >= n
        },
    );
}

fn kernel_filter() -> String {
    read_trim(instance_dir(INSTANCE).join("events/raw_syscalls/sys_enter/filter"))
}

fn wait_filter(want: &str) {
    wait_until(Duration::from_secs(30), &format!("filter {want:?}"), || {
        kernel_filter() == want
    });
    assert_eq!(
        read_trim(instance_dir(INSTANCE).join("events/raw_syscalls/sys_exit/filter")),
        want
    );
}

/// `n` getpid and `n` getppid calls from this thread.
fn calls(n: usize) {
    for _ in 0..n {
        nix::unistd::getpid();
        nix::unistd::getppid();
    }
}

/// (syscall ids of all sys_enter/sys_exit events, per id: enters by `tid`).
fn syscalls_in(path: &Path, tid: u32) -> (Vec<i64>, std::collections::BTreeMap<i64, usize>) {
    let bytes = std::fs::read(path).unwrap();
    let trace = Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap();
    let mut ids = Vec::new();
    let mut mine = std::collections::BTreeMap::new();
    for p in trace.packet {
        if let OneOfdata::ftrace_events(b) = p.data {
            for e in b.event {
                match e.event {
                    OneOfevent::sys_enter(s) => {
                        let id = s.id.unwrap();
                        ids.push(id);
                        if e.pid == Some(tid) {
                            *mine.entry(id).or_insert(0) += 1;
                        }
                    }
                    OneOfevent::sys_exit(s) => ids.push(s.id.unwrap()),
                    _ => {}
                }
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    (ids, mine)
}

#[test]
fn each_session_gets_its_own_syscalls() {
    let _ = std::fs::remove_dir(instance_dir(INSTANCE));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let r = std::panic::catch_unwind(|| run(dir));
    if let Err(e) = r {
        dump(dir);
        for n in ["a", "b", "c"] {
            let t = std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
            eprintln!("---- {n}.log\n{t}");
        }
        std::panic::resume_unwind(e);
    }
}

fn run(dir: &Path) {
    let daemons = start_our_daemons(dir);
    let socks = &daemons.socks;
    let getpid = syscall_number("getpid").unwrap();
    let getppid = syscall_number("getppid").unwrap();
    let me = nix::unistd::gettid().as_raw() as u32;

    let a = session(dir, &socks.consumer, "a", r#"syscall_events: "getpid""#);
    wait_filter(&format!("id == {getpid}"));
    wait_started(dir, 1);
    let b = session(dir, &socks.consumer, "b", r#"syscall_events: "getppid""#);
    let lo = getpid.min(getppid);
    let hi = getpid.max(getppid);
    wait_filter(&format!("id == {lo} || id == {hi}"));
    wait_started(dir, 2);
    calls(20);
    // c wants every syscall: the kernel filter is lifted while it runs.
    let c = session(
        dir,
        &socks.consumer,
        "c",
        r#"ftrace_events: "raw_syscalls/sys_enter" ftrace_events: "raw_syscalls/sys_exit""#,
    );
    wait_filter("none");
    wait_started(dir, 3);
    calls(20);
    stop(c);
    wait_filter(&format!("id == {lo} || id == {hi}"));
    calls(5);
    stop(b);
    wait_filter(&format!("id == {getpid}"));
    calls(5);
    stop(a);
    // The last session gone, the instance is removed (perfetto may exit
    // before traced_probes handled the stop).
    wait_until(Duration::from_secs(30), "instance removed", || {
        !instance_dir(INSTANCE).exists()
    });

    let (ids, mine) = syscalls_in(&dir.join("a.pb"), me);
    assert_eq!(ids, [getpid as i64], "session a");
    assert!(mine[&(getpid as i64)] >= 50, "a: {mine:?}");
    let (ids, mine) = syscalls_in(&dir.join("b.pb"), me);
    assert_eq!(ids, [getppid as i64], "session b");
    assert!(mine[&(getppid as i64)] >= 45, "b: {mine:?}");
    let (ids, mine) = syscalls_in(&dir.join("c.pb"), me);
    assert!(ids.len() > 2, "session c saw only {ids:?}");
    assert!(mine[&(getpid as i64)] >= 20, "c: {mine:?}");
    assert!(mine[&(getppid as i64)] >= 20, "c: {mine:?}");
}
