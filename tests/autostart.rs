//! `tracebox [perfetto args]` on the system sockets: it starts traced and
//! traced_probes, records this kernel, stops the daemons and leaves ftrace
//! off; meanwhile any other client on the system sockets sees the session.
//! One test function: the system sockets and the root tracefs (which
//! `traced_probes --reset-ftrace` resets) are shared resources.

mod cli_support;

use std::process::{Command, Stdio};
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
        if name == "traced" || name == "traced_probes" || name == "traced_perf" {
            found.push(format!("{} {name}", e.file_name().to_string_lossy()));
        }
    }
    found
}

#[test]
fn autostart_records_and_shares_the_system_sockets() {
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

    // A traced that already answers is reused, and left running.
    let mut traced = tracebox().arg("traced").spawn().unwrap();
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
        traced.try_wait().unwrap().is_none(),
        "autostart stopped a traced it did not start"
    );
    // No traced_probes was started for the reused service.
    assert!(
        our_daemons().iter().all(|d| !d.ends_with("traced_probes")),
        "{:?}",
        our_daemons()
    );
    traced.kill().unwrap();
    traced.wait().unwrap();
}
