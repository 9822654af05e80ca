//! atrace through the real traced_probes (with our traced and perfetto
//! CLI): with an "atrace binary" (a script recording its argv, named by
//! TRACED_PROBES_ATRACE) traced_probes behaves as on Android and tells it
//! the union of the sessions' categories and apps; without one it logs
//! once that atrace is Android-only. Either way the categories' kernel
//! events are recorded.
//!
//! Android rejects atrace in secondary instances, so the scripted tests
//! use the root instance; they take turns (one lock).

use crate::support::probes as traced_probes_common;

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::Trace;
use traced_probes_common::*;

static ROOT_INSTANCE: Mutex<()> = Mutex::new(());

struct Rig {
    tmp: tempfile::TempDir,
    socks: Sockets,
    _traced: Proc,
    probes: Proc,
}

impl Rig {
    /// Our traced and a traced_probes whose atrace is `atrace`.
    fn new(atrace: impl FnOnce(&Path) -> PathBuf) -> Rig {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let bin = atrace(dir);
        let socks = Sockets::in_dir(dir);
        let traced = start_our_traced(&socks, &dir.join("traced.log"));
        let probes = start_probes_with_atrace(&socks.producer, dir, &bin);
        Rig {
            tmp,
            socks,
            _traced: traced,
            probes,
        }
    }

    fn dir(&self) -> &Path {
        self.tmp.path()
    }

    /// A perfetto CLI session with one linux.ftrace source; runs until
    /// [`stop`] is called.
    fn session(&self, name: &str, ftrace_config: &str) -> Child {
        let cfg = self.dir().join(format!("{name}.txt"));
        std::fs::write(
            &cfg,
            format!(
                "duration_ms: 60000\nbuffers {{ size_kb: 8192 fill_policy: DISCARD }}\n\
                 data_sources {{ config {{ name: \"linux.ftrace\" ftrace_config {{ \
                 {ftrace_config} drain_period_ms: 100 }} }} }}\n"
            ),
        )
        .unwrap();
        Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["perfetto", "--txt", "-c"])
            .arg(&cfg)
            .arg("-o")
            .arg(self.dir().join(format!("{name}.pb")))
            .env("PERFETTO_CONSUMER_SOCK_NAME", &self.socks.consumer)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir().join(format!("{name}.log"))).unwrap())
            .spawn()
            .unwrap()
    }

    fn argv_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir().join("argv"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn wait_argv(&self, n: usize) -> Vec<String> {
        wait_until(
            Duration::from_secs(30),
            &format!("{n} atrace calls"),
            || self.argv_lines().len() >= n,
        );
        self.argv_lines()
    }

    /// Waits until traced_probes has started `n` ftrace sources in all.
    fn wait_started(&self, n: usize) {
        wait_until(
            Duration::from_secs(30),
            &format!("{n} ftrace starts"),
            || {
                std::fs::read_to_string(self.dir().join("probes.log"))
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("ftrace: source ") && l.contains(" started on "))
                    .count()
                    >= n
            },
        );
    }

    fn trace(&self, name: &str) -> Trace {
        let bytes = std::fs::read(self.dir().join(format!("{name}.pb"))).unwrap();
        Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).unwrap()
    }

    fn dump(&self) {
        dump(self.dir());
        for e in std::fs::read_dir(self.dir()).unwrap().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "log") {
                eprintln!(
                    "---- {}\n{}",
                    p.display(),
                    std::fs::read_to_string(&p).unwrap_or_default()
                );
            }
        }
    }
}

/// As `start_probes`, with TRACED_PROBES_ATRACE set.
fn start_probes_with_atrace(producer: &str, dir: &Path, atrace: &Path) -> Proc {
    let (r, w) = nix::unistd::pipe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced_probes")
        .env("PERFETTO_PRODUCER_SOCK_NAME", producer)
        .env("TRACED_PROBES_NOTIFY_FD", w.as_raw_fd().to_string())
        .env("TRACED_PROBES_STATE_FILE", dir.join("state"))
        .env("TRACED_PROBES_ATRACE", atrace)
        .env("TRACEBOX_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("probes.log")).unwrap())
        .spawn()
        .unwrap();
    drop(w);
    let mut ready = [0u8; 1];
    let n = nix::unistd::read(r.as_raw_fd(), &mut ready).unwrap_or(0);
    assert_eq!((n, ready[0]), (1, b'1'), "traced_probes not ready");
    Proc {
        child,
        name: "traced_probes",
    }
}

/// An executable script: appends its arguments to `argv`, then `tail`.
fn atrace_script(dir: &Path, tail: &str) -> PathBuf {
    let p = dir.join("atrace");
    let argv = dir.join("argv");
    crate::support::exec_file::write_executable(
        &p,
        &format!("#!/bin/sh\necho \"$*\" >>'{}'\n{tail}\n", argv.display()),
    );
    p
}

/// Graceful stop (SIGTERM), then the exit status must be success.
fn stop(mut c: Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let st = c.wait().unwrap();
    assert!(st.success(), "perfetto: {st:?}");
}

/// Runs `f` on the rig, dumping logs if it panics.
fn with_rig(rig: &Rig, f: impl FnOnce(&Rig)) {
    if let Err(e) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(rig))) {
        rig.dump();
        std::panic::resume_unwind(e);
    }
}

/// Runs `f` while session `s` runs, then ends `s`; dumps the logs if `f`
/// panicked.
fn while_running(rig: &mut Rig, mut s: Child, f: impl FnOnce(&mut Rig)) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(rig)));
    let _ = s.kill();
    let _ = s.wait();
    if let Err(e) = r {
        rig.dump();
        std::panic::resume_unwind(e);
    }
}

/// What a trace holds: our markers, whether sched events came, and the
/// atrace_errors of its ftrace_stats.
#[derive(Default, Debug)]
struct Seen {
    markers: usize,
    sched: usize,
    atrace_errors: Vec<String>,
}

fn seen(trace: Trace, marker: &str) -> Seen {
    let mut s = Seen::default();
    for p in trace.packet {
        match p.data {
            OneOfdata::ftrace_events(b) => {
                if let Some(c) = &b.compact_sched {
                    s.sched += c.switch_timestamp.len();
                }
                for e in b.event {
                    match e.event {
                        OneOfevent::print(p) => {
                            s.markers += p.buf.unwrap_or_default().starts_with(marker) as usize
                        }
                        OneOfevent::sched_switch(_) => s.sched += 1,
                        _ => {}
                    }
                }
            }
            OneOfdata::ftrace_stats(st) => s.atrace_errors.extend(st.atrace_errors),
            _ => {}
        }
    }
    s
}

fn write_markers(tracefs_dir: &Path, marker: &str, n: usize) {
    for i in 0..n {
        let path = tracefs_dir.join("trace_marker");
        std::fs::write(&path, format!("{marker} {i}"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn atrace_gets_the_union_of_concurrent_sessions() {
    let _root = ROOT_INSTANCE.lock().unwrap_or_else(|e| e.into_inner());
    let rig = Rig::new(|d| atrace_script(d, "exit 0"));
    with_rig(&rig, |rig| {
        let a = rig.session(
            "a",
            r#"atrace_categories: "view" atrace_categories: "gfx" atrace_apps: "com.tbx.a""#,
        );
        assert_eq!(
            rig.wait_argv(1),
            ["--async_start --only_userspace gfx view -a com.tbx.a"]
        );
        let b = rig.session(
            "b",
            r#"atrace_categories: "am" atrace_categories: "gfx" atrace_apps: "com.tbx.b""#,
        );
        assert_eq!(
            rig.wait_argv(2)[1],
            "--async_start --only_userspace am gfx view -a com.tbx.a,com.tbx.b"
        );
        rig.wait_started(2);
        write_markers(Path::new(TRACEFS), "tbx-atrace-union", 5);
        stop(b);
        // Back to what session a alone wants.
        assert_eq!(
            rig.wait_argv(3)[2],
            "--async_start --only_userspace gfx view -a com.tbx.a"
        );
        stop(a);
        assert_eq!(
            rig.wait_argv(4),
            [
                "--async_start --only_userspace gfx view -a com.tbx.a",
                "--async_start --only_userspace am gfx view -a com.tbx.a,com.tbx.b",
                "--async_start --only_userspace gfx view -a com.tbx.a",
                "--async_stop --only_userspace",
            ]
        );
        for name in ["a", "b"] {
            let s = seen(rig.trace(name), "tbx-atrace-union");
            assert_eq!(s.markers, 5, "{name}: {s:?}");
            assert!(s.atrace_errors.is_empty(), "{name}: {s:?}");
        }
        // Nothing more was run after the last stop.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(rig.argv_lines().len(), 4);
    });
}

#[test]
fn a_failing_atrace_is_reported_and_tracing_goes_on() {
    let _root = ROOT_INSTANCE.lock().unwrap_or_else(|e| e.into_inner());
    let rig = Rig::new(|d| atrace_script(d, "echo 'tbx: no category bogus' >&2\nexit 1"));
    with_rig(&rig, |rig| {
        let s = rig.session(
            "f",
            r#"atrace_categories: "sched" atrace_categories: "bogus" atrace_apps: "com.tbx.f""#,
        );
        assert_eq!(
            rig.wait_argv(1),
            ["--async_start --only_userspace bogus sched -a com.tbx.f"]
        );
        rig.wait_started(1);
        write_markers(Path::new(TRACEFS), "tbx-atrace-fail", 10);
        stop(s);
        let seen = seen(rig.trace("f"), "tbx-atrace-fail");
        assert_eq!(seen.markers, 10, "{seen:?}");
        assert!(seen.sched > 0, "no sched events: {seen:?}");
        assert_eq!(seen.atrace_errors.len(), 1, "{seen:?}");
        let e = &seen.atrace_errors[0];
        assert!(e.starts_with("tbx: no category bogus\n"), "{e}");
        assert!(
            e.contains("atrace --async_start --only_userspace bogus sched -a com.tbx.f failed: exit status: 1"),
            "{e}"
        );
        let log = std::fs::read_to_string(rig.dir().join("probes.log")).unwrap();
        assert!(log.contains("tbx: no category bogus"), "{log}");
        // atrace never got on, so there is nothing to stop.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(rig.argv_lines().len(), 1, "{:?}", rig.argv_lines());
    });
}

/// Android: atrace in a secondary instance is refused (as upstream).
#[test]
fn atrace_in_a_secondary_instance_is_refused_on_android() {
    let instance = "tbx_atrace_secondary";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let rig = Rig::new(|d| atrace_script(d, "exit 0"));
    with_rig(&rig, |rig| {
        let s = rig.session(
            "s",
            &format!(r#"atrace_apps: "com.tbx.s" instance_name: "{instance}""#),
        );
        wait_until(Duration::from_secs(30), "the refusal", || {
            std::fs::read_to_string(rig.dir().join("probes.log"))
                .unwrap_or_default()
                .contains("secondary ftrace instances do not support atrace")
        });
        stop(s);
        assert!(rig.argv_lines().is_empty());
        assert!(!instance_dir(instance).exists());
    });
}

/// Linux (no atrace binary): one note in the log, the categories' kernel
/// events and the markers are recorded, no atrace errors.
#[test]
fn without_atrace_the_categories_still_record() {
    let instance = "tbx_atrace_linux";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let rig = Rig::new(|d| d.join("no-atrace-here"));
    with_rig(&rig, |rig| {
        for round in 0..2 {
            let name = format!("l{round}");
            let s = rig.session(
                &name,
                &format!(
                    r#"atrace_categories: "sched" atrace_apps: "com.tbx.l" instance_name: "{instance}""#
                ),
            );
            rig.wait_started(round + 1);
            write_markers(&instance_dir(instance), "tbx-atrace-linux", 10);
            stop(s);
            // The last user removes the instance (perfetto may exit first).
            wait_until(Duration::from_secs(30), "instance removed", || {
                !instance_dir(instance).exists()
            });
            let seen = seen(rig.trace(&name), "tbx-atrace-linux");
            assert_eq!(seen.markers, 10, "{seen:?}");
            assert!(seen.sched > 0, "no sched events: {seen:?}");
            assert!(seen.atrace_errors.is_empty(), "{seen:?}");
        }
        let log = std::fs::read_to_string(rig.dir().join("probes.log")).unwrap();
        assert_eq!(log.matches("atrace is Android-only").count(), 1, "{log}");
    });
}

/// traced_probes told to exit with a session running still stops atrace
/// before it goes.
#[test]
fn atrace_is_stopped_when_traced_probes_exits() {
    let _root = ROOT_INSTANCE.lock().unwrap_or_else(|e| e.into_inner());
    let mut rig = Rig::new(|d| atrace_script(d, "exit 0"));
    let s = rig.session("x", r#"atrace_apps: "com.tbx.x""#);
    while_running(&mut rig, s, |rig| {
        assert_eq!(
            rig.wait_argv(1),
            ["--async_start --only_userspace -a com.tbx.x"]
        );
        rig.probes.signal(nix::sys::signal::Signal::SIGTERM);
        let st = rig.probes.wait_exit(Duration::from_secs(30));
        assert!(st.is_some_and(|s| s.success()), "{st:?}");
        assert_eq!(
            rig.argv_lines(),
            [
                "--async_start --only_userspace -a com.tbx.x",
                "--async_stop --only_userspace"
            ]
        );
    });
}

/// SIGTERM ends traced_probes within a second even while the atrace it
/// runs at exit (`--async_stop`) hangs; the log says what that leaves.
#[test]
fn a_hanging_atrace_does_not_hold_sigterm_past_a_second() {
    let _root = ROOT_INSTANCE.lock().unwrap_or_else(|e| e.into_inner());
    let mut rig =
        Rig::new(|d| atrace_script(d, "case \"$*\" in *--async_stop*) sleep 3;; esac\nexit 0"));
    let s = rig.session("x", r#"atrace_apps: "com.tbx.hang""#);
    while_running(&mut rig, s, |rig| {
        assert_eq!(
            rig.wait_argv(1),
            ["--async_start --only_userspace -a com.tbx.hang"]
        );
        let t0 = std::time::Instant::now();
        rig.probes.signal(nix::sys::signal::Signal::SIGTERM);
        let st = rig.probes.wait_exit(Duration::from_secs(30));
        let took = t0.elapsed();
        assert!(st.is_some_and(|s| s.success()), "{st:?}");
        assert!(took < Duration::from_secs(1), "exit took {took:?}");
        // Queued at the stop, and started unless the machine was too slow
        // to spawn it within the wait.
        let argv = rig.argv_lines();
        assert!(
            argv.get(1)
                .is_none_or(|a| a == "--async_stop --only_userspace"),
            "{argv:?}"
        );
        let log = std::fs::read_to_string(rig.dir().join("probes.log")).unwrap();
        assert!(log.contains("atrace still running at exit"), "{log}");
    });
}
