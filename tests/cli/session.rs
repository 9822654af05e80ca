//! The perfetto client end to end against our traced, with the real
//! Perfetto SDK producer (tests/sdk-interop) as the data source. Every
//! trace is checked with the official descriptors (PyPI perfetto).

use crate::support::cli as cli_support;

use cli_support::{summary, wait_exit, Env};
use std::process::Stdio;
use std::time::Duration;

const SDK_DS: &str = "data_sources { config { name: \"tbx.sdk_test\" } }\n";
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn stop_trigger_ends_the_session() {
    let env = Env::new("stoptrig");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(100);
    let (mut client, out) = env.spawn_session(&format!(
        "buffers {{ size_kb: 4096 }}\n{SDK_DS}trigger_config {{ trigger_mode: STOP_TRACING \
             trigger_timeout_ms: 120000 triggers {{ name: \"stopnow\" stop_delay_ms: 100 }} }}\n"
    ));
    env.wait_query("STARTED", true);
    let t = env.trigger(&["stopnow"]);
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    // Without the trigger the session would run for 120 s.
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
    let s = summary(&out);
    assert!(s.contains("\"triggers\": [\"stopnow\"]"), "{s:?}");
    assert_eq!(s.num("for_testing"), 100, "{s:?}");
}

#[test]
fn start_trigger_starts_the_session() {
    let env = Env::new("starttrig");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(50);
    let (mut client, out) = env.spawn_session(&format!(
        "buffers {{ size_kb: 4096 }}\n{SDK_DS}trigger_config {{ trigger_mode: START_TRACING \
             trigger_timeout_ms: 120000 triggers {{ name: \"go\" stop_delay_ms: 300 }} }}\n"
    ));
    env.wait_query("CONFIGURED", true);
    assert!(env.trigger(&["go"]).status.success());
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
    let s = summary(&out);
    assert!(s.contains("\"triggers\": [\"go\"]"), "{s:?}");
    assert_eq!(s.num("for_testing"), 50, "{s:?}");
    // The session (and so every data source) started only after the trigger.
    let started = s.num("tracing_started_ts");
    let trigger = s.num("trigger_ts");
    assert!(
        trigger > 0 && started >= trigger,
        "started at {started}, trigger at {trigger}"
    );
}

#[test]
fn background_then_sigterm_writes_a_complete_file() {
    let env = Env::new("bg");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(20);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 4096 }}\n{SDK_DS}duration_ms: 120000\n"),
    );
    let out = env.path("t.pftrace");
    let o = env.perfetto(&[
        "--background",
        "--txt",
        "-c",
        &cfg,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let pid: i32 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("pid on stdout");
    env.wait_query("STARTED", true);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + LIMIT;
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "background client did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = summary(&out);
    assert_eq!(s.num("for_testing"), 20, "{s:?}");
    assert!(s.contains("tracing_disabled"), "{s:?}");
}

#[test]
fn query_lists_producers_data_sources_and_sessions() {
    let env = Env::new("query");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(1);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 1024 }}\n{SDK_DS}duration_ms: 120000\nunique_session_name: \"q_sess\"\n"),
    );
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", env.path("t").to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_query("q_sess", true);
    let q = env.perfetto(&["--query"]);
    assert!(q.status.success());
    let text = String::from_utf8_lossy(&q.stdout);
    for want in [
        "PRODUCER PROCESSES",
        "tbx.sdk_test",
        "TRACING SESSIONS",
        "q_sess",
        "STARTED",
    ] {
        assert!(text.contains(want), "{want} missing in:\n{text}");
    }
    let raw = env.perfetto(&["--query-raw"]);
    assert!(raw.status.success());
    let state: tracebox::pb::protos::TracingServiceState =
        tracebox::protozero::decode::decode_message(&raw.stdout)
            .expect("--query-raw is a TracingServiceState");
    assert!(state.data_sources.iter().any(|d| {
        d.ds_descriptor.as_ref().and_then(|x| x.name.as_deref()) == Some("tbx.sdk_test")
    }));
    assert_eq!(state.tracing_sessions.len(), 1);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
}

#[test]
fn detach_and_attach_finish_the_file() {
    let env = Env::new("detach");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(30);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 4096 }}\n{SDK_DS}write_into_file: true\nfile_write_period_ms: 100\n"),
    );
    let out = env.path("t.pftrace");
    let d = env.perfetto(&[
        "--detach=key1",
        "--txt",
        "-c",
        &cfg,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    assert_eq!(env.perfetto(&["--is_detached=key1"]).status.code(), Some(0));
    assert_eq!(
        env.perfetto(&["--is_detached=other"]).status.code(),
        Some(2)
    );
    let a = env.perfetto(&["--attach=key1", "--stop"]);
    let err = String::from_utf8_lossy(&a.stderr);
    assert!(a.status.success(), "{err}");
    // Read back from the file traced handed over, as a plain recording.
    assert!(err.contains("Trace stats: nothing lost\n"), "{err}");
    let s = summary(&out);
    assert_eq!(s.num("for_testing"), 30, "{s:?}");
    assert_eq!(env.perfetto(&["--is_detached=key1"]).status.code(), Some(2));
}

/// Perfetto's own traced does not hand the output file to an attaching
/// client: the end line says the trace was not read back, never `nothing
/// lost` (issue 33, defect 6).
#[test]
fn attach_to_a_real_traced_says_the_file_was_not_read_back() {
    let env = Env::new("detachreal");
    let _traced = env.start_real_traced();
    let _producer = env.start_sdk_producer(30);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 4096 }}\n{SDK_DS}write_into_file: true\nfile_write_period_ms: 100\n"),
    );
    let out = env.path("t.pftrace");
    let d = env.perfetto(&[
        "--detach=k",
        "--txt",
        "-c",
        &cfg,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(d.status.success(), "{}", String::from_utf8_lossy(&d.stderr));
    let a = env.perfetto(&["--attach=k", "--stop"]);
    let err = String::from_utf8_lossy(&a.stderr);
    assert!(a.status.success(), "{err}");
    assert!(
        err.contains(
            "INCOMPLETE: the trace file was not read back (the service did not hand it to the \
             attaching client): what the kernel lost and what the trace itself records are \
             unknown"
        ),
        "{err}"
    );
    assert!(!err.contains("nothing lost"), "{err}");
    assert_eq!(summary(&out).num("for_testing"), 30);
}

#[test]
fn clone_snapshots_a_running_session() {
    let env = Env::new("clone");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(40);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 4096 }}\n{SDK_DS}duration_ms: 120000\nunique_session_name: \"to_clone\"\n"),
    );
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_query("to_clone", true);
    // The snapshot must find the packets: clone only after they exist.
    env.wait_producer_written();
    let snap = env.path("snap.pftrace");
    let c = env.perfetto(&["--clone-by-name", "to_clone", "-o", snap.to_str().unwrap()]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    assert_eq!(summary(&snap).num("for_testing"), 40);
    // The original keeps running and still finishes its own file.
    assert!(client.try_wait().unwrap().is_none());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
    assert_eq!(summary(&out).num("for_testing"), 40);
}

#[test]
fn background_wait_returns_once_data_sources_started() {
    let env = Env::new("bgwait");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(10);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 1024 }}\n{SDK_DS}duration_ms: 120000\n"),
    );
    let out = env.path("t.pftrace");
    let o = env.perfetto(&["-D", "--txt", "-c", &cfg, "-o", out.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let pid: i32 = String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .expect("pid on stdout");
    // Started before the parent returned: no waiting needed here.
    let q = String::from_utf8_lossy(&env.perfetto(&["--query"]).stdout).into_owned();
    assert!(q.contains("STARTED"), "{q}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = std::time::Instant::now() + LIMIT;
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "background client did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(summary(&out).num("for_testing"), 10);
}

#[test]
fn notify_fd_gets_a_status_byte_once_started() {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let env = Env::new("notify");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(5);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 1024 }}\n{SDK_DS}duration_ms: 120000\n"),
    );
    let (rd, wr) = nix::unistd::pipe().unwrap();
    nix::fcntl::fcntl(
        wr.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .unwrap();
    let fd = wr.as_raw_fd().to_string();
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&[
            "--notify-fd",
            &fd,
            "--txt",
            "-c",
            &cfg,
            "-o",
            out.to_str().unwrap(),
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(wr);
    // Other tests' children may inherit the write end too, so read one byte
    // rather than waiting for EOF.
    let mut byte = [9u8; 1];
    std::fs::File::from(rd).read_exact(&mut byte).unwrap();
    assert_eq!(byte, [0u8], "status byte 0 = all data sources started");
    let q = String::from_utf8_lossy(&env.perfetto(&["--query"]).stdout).into_owned();
    assert!(q.contains("STARTED"), "{q}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
    assert_eq!(summary(&out).num("for_testing"), 5);
}

#[test]
fn live_status_line_on_a_terminal_only() {
    let env = Env::new("status");
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(5);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 1024 }}\n{SDK_DS}duration_ms: 2500\n"),
    );
    let out = env.path("t.pftrace");
    let link = env.dir.path().join("perfetto");
    let cmd = format!("{} --txt -c {cfg} -o {}", link.display(), out.display());
    // util-linux `script` gives the client a pseudo-terminal as stderr.
    let mut c = std::process::Command::new("script");
    c.args(["-q", "-e", "-c", &cmd, "/dev/null"]);
    c.env("PERFETTO_PRODUCER_SOCK_NAME", &env.producer)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &env.consumer);
    let o = c.output().expect("run script(1)");
    let tty = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{tty}");
    assert!(
        tty.contains("/ 2.5s]") && tty.contains("recorded, nothing lost"),
        "{tty}"
    );
    // Without a terminal there is no status line. The SDK producer exits
    // after its session: a fresh one, or the line rightly names it as gone.
    env.wait_query("tbx.sdk_test", false);
    drop(_producer);
    let _producer = env.start_sdk_producer(5);
    let plain = env.perfetto(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()]);
    assert!(plain.status.success());
    let plain_err = String::from_utf8_lossy(&plain.stderr);
    assert!(!plain_err.contains("recorded,"), "{plain_err}");
    // The end-of-trace line is printed either way.
    assert!(
        plain_err.contains("Trace stats: nothing lost"),
        "{plain_err}"
    );
    assert!(tty.contains("Trace stats: nothing lost"), "{tty}");
}

#[test]
fn the_end_of_a_trace_reports_losses_without_a_terminal() {
    let env = Env::new("losses");
    let _traced = env.start_traced();
    // ~1.3 MB of packets into a 64 KB buffer that refuses to wrap.
    let _producer = env.start_sdk_producer(20_000);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 64 fill_policy: DISCARD }}\n{SDK_DS}duration_ms: 2000\n"),
    );
    let out = env.path("t.pftrace");
    let o = env.perfetto(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("Trace stats: LOST "))
        .unwrap_or_else(|| panic!("no loss line in {err:?}"));
    let dropped: i64 = line["Trace stats: LOST ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    assert!(dropped > 0, "{line:?}");
    // The same figure is in the trace's own stats.
    let s = summary(&out);
    assert!(s.num("chunks_discarded") >= dropped, "{s:?}");
}

/// While a session runs the client sleeps in poll(2) on the service socket
/// and its signalfd: it does not wake up on a timer (before, it polled
/// every 100 ms). A stop still ends it at once.
#[test]
fn a_waiting_client_sleeps_until_the_service_speaks() {
    let env = Env::new("idle");
    let _traced = env.start_traced();
    let (mut client, _out) = env.spawn_session(
        "buffers { size_kb: 1024 }\ntrigger_config { trigger_mode: STOP_TRACING \
         trigger_timeout_ms: 120000 triggers { name: \"idle_stop\" stop_delay_ms: 0 } }\n",
    );
    env.wait_query("STARTED", true);
    let wakeups = || -> u64 {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", client.id())).unwrap();
        tasks
            .map(|t| {
                let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
                let line = status
                    .lines()
                    .find(|l| l.starts_with("voluntary_ctxt_switches:"))
                    .unwrap();
                line.split_whitespace()
                    .nth(1)
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    };
    let before = wakeups();
    std::thread::sleep(Duration::from_millis(1500));
    let woke = wakeups() - before;
    assert!(woke <= 2, "the idle client woke {woke} times in 1.5 s");
    let t = env.trigger(&["idle_stop"]);
    assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    assert_eq!(wait_exit(&mut client, LIMIT), 0);
}
