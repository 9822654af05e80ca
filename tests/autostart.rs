//! `tracebox [perfetto args]` on the system sockets: it starts traced and
//! traced_probes, records this kernel, stops the daemons and leaves ftrace
//! off; meanwhile any other client on the system sockets sees the session.
//! The system sockets and the root tracefs (which `traced_probes
//! --reset-ftrace` resets) are shared resources: each test holds SYSTEM.
//!
//! Lifetime: autostarted daemons outlive the client while any session or
//! client uses them, then exit and leave ftrace off.

#[path = "support/cli.rs"]
mod cli_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cli_support::{summary, wait_exit};

fn tracebox() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
    c.env_remove("PERFETTO_PRODUCER_SOCK_NAME")
        .env_remove("PERFETTO_CONSUMER_SOCK_NAME");
    c
}

fn tracing_on() -> String {
    std::fs::read_to_string("/sys/kernel/tracing/tracing_on")
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// A child killed and reaped when dropped.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn our_daemons() -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let argv0 = cmd.split(|b| *b == 0).next().unwrap_or(&[]);
        let name = String::from_utf8_lossy(argv0)
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        // Daemons on private sockets (other tests) have them in their
        // environment; ours use the system sockets.
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        let private = env
            .split(|b| *b == 0)
            .any(|v| v.starts_with(b"PERFETTO_CONSUMER_SOCK_NAME="));
        if (name == "traced" || name == "traced_probes" || name == "traced_perf") && !private {
            found.push(format!("{} {name}", e.file_name().to_string_lossy()));
        }
    }
    found
}

static SYSTEM: Mutex<()> = Mutex::new(());

fn system() -> MutexGuard<'static, ()> {
    SYSTEM.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until no traced/traced_probes is left, then checks ftrace is off.
fn wait_daemons_gone_and_ftrace_off() {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !our_daemons().is_empty() {
        assert!(
            Instant::now() < deadline,
            "daemons left behind: {:?}",
            our_daemons()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(tracing_on(), "0");
}

fn wait_tracing_on() {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tracing_on() != "1" {
        assert!(Instant::now() < deadline, "tracing never started");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `tracebox ARGS -o DIR/NAME.pftrace`, stderr into DIR/NAME.err.
fn record(dir: &Path, name: &str, args: &[&str]) -> Child {
    tracebox()
        .args(args)
        .arg("-o")
        .arg(dir.join(format!("{name}.pftrace")))
        .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .spawn()
        .unwrap()
}

fn stderr_of(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(format!("{name}.err"))).unwrap_or_default()
}

/// Sched events in DIR/NAME.pftrace over at least `min_span_ms`.
fn assert_sched_over(dir: &Path, name: &str, min_span_ms: i64) {
    let s = summary(&dir.join(format!("{name}.pftrace")));
    assert!(
        s.num("compact_switches") > 0 || s.contains("\"sched_switch\""),
        "{name}: no sched events: {s:?}"
    );
    let span = s.num("ftrace_span_ms");
    assert!(span >= min_span_ms, "{name}: sched over {span} ms only");
}

fn sigint(c: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

#[test]
fn twenty_back_to_back_recordings_stopped_by_sigint_are_complete() {
    let _g = system();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for i in 0..20 {
        let name = format!("q{i}");
        let mut c = record(d, &name, &["-t", "60s", "sched/sched_switch"]);
        wait_tracing_on();
        std::thread::sleep(Duration::from_millis(300));
        sigint(&c);
        let code = wait_exit(&mut c, Duration::from_secs(60));
        let err = stderr_of(d, &name);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(err.contains("Wrote "), "{name}: {err}");
        assert!(err.starts_with("tracebox: "), "{name}: {err}");
    }
    for i in 0..20 {
        assert_sched_over(d, &format!("q{i}"), 100);
    }
    wait_daemons_gone_and_ftrace_off();
}

#[test]
fn overlapping_recordings_share_the_daemons_and_leave_nothing() {
    let _g = system();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A starts the daemons; B, 1.5 s later, reuses them and outlives A.
    let mut a = record(d, "a", &["-t", "3s", "sched/sched_switch"]);
    std::thread::sleep(Duration::from_millis(1500));
    let mut b = record(d, "b", &["-t", "5s", "sched/sched_switch"]);
    assert_eq!(
        wait_exit(&mut a, Duration::from_secs(60)),
        0,
        "{}",
        stderr_of(d, "a")
    );
    assert_eq!(
        wait_exit(&mut b, Duration::from_secs(60)),
        0,
        "{}",
        stderr_of(d, "b")
    );
    assert!(stderr_of(d, "a").starts_with("tracebox: started traced (pid "));
    assert!(
        stderr_of(d, "b").starts_with("tracebox: using the running traced (pid "),
        "{}",
        stderr_of(d, "b")
    );
    assert_sched_over(d, "a", 2500);
    assert_sched_over(d, "b", 4500);
    wait_daemons_gone_and_ftrace_off();

    // Three with staggered ends; the second detaches and is attached later.
    let cfg = d.join("detach.pbtx");
    std::fs::write(
        &cfg,
        r#"buffers { size_kb: 8192 }
data_sources { config { name: "linux.ftrace" ftrace_config { ftrace_events: "sched/sched_switch" } } }
duration_ms: 4000
write_into_file: true
file_write_period_ms: 500
"#,
    )
    .unwrap();
    let mut c1 = record(d, "c1", &["-t", "2s", "sched/sched_switch"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut c2 = record(
        d,
        "c2",
        &[
            "--txt",
            "-c",
            cfg.to_str().unwrap(),
            "--detach=tbx_autostart_key",
        ],
    );
    assert_eq!(
        wait_exit(&mut c2, Duration::from_secs(30)),
        0,
        "{}",
        stderr_of(d, "c2")
    );
    let mut c3 = record(d, "c3", &["-t", "3s", "sched/sched_switch"]);
    assert_eq!(
        wait_exit(&mut c1, Duration::from_secs(60)),
        0,
        "{}",
        stderr_of(d, "c1")
    );
    assert_eq!(
        wait_exit(&mut c3, Duration::from_secs(60)),
        0,
        "{}",
        stderr_of(d, "c3")
    );
    // Every client is gone; the detached session keeps the daemons.
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        !our_daemons().is_empty(),
        "the detached session lost its daemons"
    );
    let att = tracebox()
        .args(["--attach=tbx_autostart_key"])
        .output()
        .unwrap();
    assert!(
        att.status.success(),
        "{}",
        String::from_utf8_lossy(&att.stderr)
    );
    assert_sched_over(d, "c1", 1500);
    assert_sched_over(d, "c2", 3500);
    assert_sched_over(d, "c3", 2500);
    wait_daemons_gone_and_ftrace_off();
}

#[test]
fn autostart_records_and_shares_the_system_sockets() {
    let _g = system();
    let consumer = tracebox::ipc::default_sockets::default_consumer_socket();
    assert!(
        !tracebox::cmd::autostart::service_answers(consumer),
        "a traced already runs on {consumer}; this test needs the system sockets to itself"
    );
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("trace.pftrace");
    let mut rec = tracebox()
        .args([
            "-t",
            "3s",
            "sched/sched_switch",
            "-o",
            out.to_str().unwrap(),
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    // A second, unrelated client on the default sockets sees the session.
    let deadline = Instant::now() + Duration::from_secs(20);
    let seen = loop {
        let q = tracebox().args(["perfetto", "--query"]).output().unwrap();
        let text = String::from_utf8_lossy(&q.stdout).into_owned();
        if text.contains("STARTED") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "session never visible on the system sockets:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(seen.contains("linux.ftrace"), "{seen}");
    assert!(seen.contains("perfetto.traced_probes"), "{seen}");
    assert!(seen.contains("perfetto.traced_perf"), "{seen}");

    assert_eq!(wait_exit(&mut rec, Duration::from_secs(60)), 0);
    let s = summary(&out);
    assert!(
        s.num("compact_switches") > 0 || s.contains("\"sched_switch\""),
        "no sched events: {s:?}"
    );
    assert!(s.contains("\"process_tree\""), "no process tree: {s:?}");

    // The daemons we started are gone and ftrace is left off.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !our_daemons().is_empty() {
        assert!(
            Instant::now() < deadline,
            "daemons left behind: {:?}",
            our_daemons()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(tracing_on(), "0");
    assert!(!tracebox::cmd::autostart::service_answers(consumer));

    // The seed documents' configs run as written (text format, autostart).
    // atrace_app.pbtx records ftrace/print: markers written meanwhile land.
    let cfg =
        |name: &str| concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pbtx/").to_owned() + name;
    let out = dir.path().join("atrace_app.pftrace");
    let mut rec = tracebox()
        .args([
            "--txt",
            "-c",
            &cfg("atrace_app.pbtx"),
            "-o",
            out.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let me = std::process::id();
    let mut written = 0;
    while rec.try_wait().unwrap().is_none() {
        let _ = std::fs::write(
            "/sys/kernel/tracing/trace_marker",
            format!("C|{me}|tbx_counter|{written}"),
        );
        written += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(rec.wait().unwrap().success());
    let s = summary(&out);
    assert!(
        s.contains(&format!("C|{me}|tbx_counter|")),
        "no markers: {s:?}"
    );

    let out = dir.path().join("basic_ftrace.pftrace");
    let st = tracebox()
        .args([
            "--txt",
            "-c",
            &cfg("basic_ftrace.pbtx"),
            "-o",
            out.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let s = summary(&out);
    assert!(
        s.contains("\"sched_switch\"") || s.num("compact_switches") > 0,
        "{s:?}"
    );

    // --private-sockets: upstream's isolated daemons, nothing on the
    // system sockets.
    let out = dir.path().join("private.pftrace");
    let st = tracebox()
        .args([
            "--private-sockets",
            "-t",
            "500ms",
            "-o",
            out.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    assert!(summary(&out).contains("\"trace_config\""));
    assert!(!tracebox::cmd::autostart::service_answers(consumer));

    // Stale socket files that nobody answers on are replaced.
    let producer = tracebox::ipc::default_sockets::default_producer_socket();
    for path in [consumer, producer] {
        let _ = std::fs::remove_file(path);
        drop(std::os::unix::net::UnixListener::bind(path).unwrap());
        assert!(std::path::Path::new(path).exists());
    }
    let out = dir.path().join("stale.pftrace");
    let st = tracebox()
        .args(["-t", "500ms", "-o", out.to_str().unwrap()])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "stale socket files blocked autostart");
    assert!(summary(&out).contains("\"trace_config\""));

    // The daemons of the run above exit once idle; wait for that, or the
    // traced below would not be the one that answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !our_daemons().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", our_daemons());
        std::thread::sleep(Duration::from_millis(20));
    }
    // A traced that already answers is reused, and left running (killed
    // when this test ends, even by a failed assertion).
    let mut traced = KillOnDrop(tracebox().arg("traced").spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(10);
    while !tracebox::cmd::autostart::service_answers(consumer) {
        assert!(Instant::now() < deadline, "traced did not come up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = dir.path().join("reuse.pftrace");
    let st = tracebox()
        .args(["-t", "500ms", "-o", out.to_str().unwrap()])
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    assert!(summary(&out).contains("\"trace_config\""));
    assert!(
        traced.0.try_wait().unwrap().is_none(),
        "autostart stopped a traced it did not start"
    );
    // No traced_probes was started for the reused service.
    assert!(
        our_daemons().iter().all(|d| !d.ends_with("traced_probes")),
        "{:?}",
        our_daemons()
    );
    drop(traced);
}
