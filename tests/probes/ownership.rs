//! Who may reset a tracefs instance: its live owner only. Two full stacks
//! (traced + traced_probes on private sockets, each in its own instance)
//! record side by side while one of them starts, stops, is SIGKILLed and
//! cleans up after itself; a SIGKILLed traced_probes is cleaned up by its
//! successor on the same socket, never by an unrelated one. Crash state
//! files are the default ones (keyed by the producer socket).
//!
//! Bounds: what one config can make traced_probes allocate (instances,
//! data sources per session, buffer size), and SIGTERM in every state.

use crate::support::probes as traced_probes_common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use traced_probes_common::*;

/// `tracebox traced_probes ARGS` on `socks`, its crash state where it
/// puts it by default; waits for "ready" if asked.
fn probes(socks: &Sockets, args: &[&str], log: &Path, wait_ready: bool) -> Proc {
    probes_env(socks, args, log, wait_ready, &[])
}

/// [`probes`] with extra environment variables.
fn probes_env(
    socks: &Sockets,
    args: &[&str],
    log: &Path,
    wait_ready: bool,
    env: &[(&str, &Path)],
) -> Proc {
    let (r, w) = nix::unistd::pipe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced_probes")
        .args(args)
        .envs(env.iter().copied())
        .env("PERFETTO_PRODUCER_SOCK_NAME", &socks.producer)
        .env("TRACED_PROBES_NOTIFY_FD", w.as_raw_fd().to_string())
        .env_remove("TRACED_PROBES_STATE_FILE")
        .env("TRACEBOX_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(
            std::fs::File::options()
                .create(true)
                .append(true)
                .open(log)
                .unwrap(),
        )
        .spawn()
        .unwrap();
    drop(w);
    if wait_ready {
        let mut f = std::fs::File::from(r);
        let mut b = [0u8; 1];
        assert_eq!(f.read(&mut b).unwrap_or(0), 1, "traced_probes not ready");
    }
    Proc {
        child,
        name: "traced_probes",
    }
}

/// A client recording ftrace/print in `instance` until SIGINT.
fn client(dir: &Path, socks: &Sockets, instance: &str, name: &str) -> (Child, PathBuf) {
    let cfg = dir.join(format!("{name}.pbtx"));
    std::fs::write(
        &cfg,
        format!(
            r#"buffers {{ size_kb: 16384 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print" instance_name: "{instance}" }} }} }}
duration_ms: 120000
"#
        ),
    )
    .unwrap();
    let out = dir.join(format!("{name}.pftrace"));
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(&out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .spawn()
        .unwrap();
    (child, out)
}

fn tracing_on(instance: &str) -> String {
    read_trim(instance_dir(instance).join("tracing_on"))
}

/// Tracing on after traced_probes took the instance over (a new instance
/// starts with tracing on; the take-over sets buffer_percent to 5 first).
fn wait_recording(instance: &str) {
    wait_until(Duration::from_secs(30), "tracing on", || {
        read_trim(instance_dir(instance).join("buffer_percent")) == "5"
            && tracing_on(instance) == "1"
    });
}

/// Writes `tag-N` markers into `instance` until `stop`; returns how many.
fn flood(instance: &str, tag: &'static str, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let path = instance_dir(instance).join("trace_marker");
    std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        let mut n = 0u64;
        let t0 = std::time::Instant::now();
        while !stop.load(Ordering::Relaxed) {
            if let Err(e) = f.write_all(format!("{tag}-{n}\n").as_bytes()) {
                panic!("{tag}-{n} refused after {:?}: {e}", t0.elapsed());
            }
            n += 1;
            std::thread::sleep(Duration::from_micros(300));
        }
        n
    })
}

/// The `tag-N` markers found in a trace file (print buffers are stored as
/// written).
fn markers_in(trace: &Path, tag: &str) -> BTreeSet<u64> {
    let bytes = std::fs::read(trace).unwrap();
    let pat = format!("{tag}-");
    let pat = pat.as_bytes();
    let mut found = BTreeSet::new();
    let mut i = 0;
    while let Some(at) = bytes[i..].windows(pat.len()).position(|w| w == pat) {
        let start = i + at + pat.len();
        let digits: Vec<u8> = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .copied()
            .collect();
        if bytes.get(start + digits.len()) == Some(&b'\n') {
            if let Ok(n) = String::from_utf8(digits).unwrap().parse() {
                found.insert(n);
            }
        }
        i = start;
    }
    found
}

fn sigint(c: &Child) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
}

/// Stops a client with SIGINT and checks its trace holds every marker.
fn finish(mut c: Child, out: &Path, dir: &Path, name: &str, tag: &str, written: u64) {
    sigint(&c);
    wait_until(Duration::from_secs(60), "the client's exit", || {
        c.try_wait().unwrap().is_some()
    });
    let code = c.wait().unwrap().code().unwrap_or(-1);
    let err = std::fs::read_to_string(dir.join(format!("{name}.err"))).unwrap_or_default();
    assert_eq!(code, 0, "{name}: {err}");
    assert!(says_nothing_lost(&err), "{name}: {err}");
    let found = markers_in(out, tag);
    let missing: Vec<u64> = (0..written)
        .filter(|n| !found.contains(n))
        .take(10)
        .collect();
    assert!(
        written > 0 && missing.is_empty(),
        "{name}: {written} markers written, {} in the trace, missing e.g. {missing:?}",
        found.len()
    );
}

fn kill9(p: &mut Proc) {
    p.child.kill().unwrap();
    p.child.wait().unwrap();
}

#[test]
fn two_stacks_record_side_by_side_while_one_crashes_and_cleans_up() {
    let pid = std::process::id();
    let (i1, i2) = (format!("tbx_own_a_{pid}"), format!("tbx_own_b_{pid}"));
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (d1, d2) = (d1.path(), d2.path());
    let (s1, s2) = (Sockets::in_dir(d1), Sockets::in_dir(d2));
    let _t1 = start_our_traced(&s1, &d1.join("traced.log"));
    let _p1 = probes(&s1, &[], &d1.join("probes.log"), true);
    let (c1, out1) = client(d1, &s1, &i1, "c1");
    wait_recording(&i1);
    let stop1 = Arc::new(AtomicBool::new(false));
    let w1 = flood(&i1, "tbx1", stop1.clone());

    // Stack 2 starts, records, stops.
    let _t2 = start_our_traced(&s2, &d2.join("traced.log"));
    let mut p2 = probes(&s2, &[], &d2.join("probes.log"), true);
    for round in ["r1", "r3"] {
        if round == "r3" {
            // Crashed and cleaned up meanwhile (below).
            p2 = probes(&s2, &[], &d2.join("probes.log"), true);
        }
        let (c2, out2) = client(d2, &s2, &i2, round);
        wait_recording(&i2);
        let stop2 = Arc::new(AtomicBool::new(false));
        let w2 = flood(&i2, "tbx2", stop2.clone());
        std::thread::sleep(Duration::from_millis(700));
        stop2.store(true, Ordering::Relaxed);
        let n2 = w2.join().unwrap();
        finish(c2, &out2, d2, round, "tbx2", n2);
        if round == "r3" {
            break;
        }
        // Stack 2 is SIGKILLed mid-trace and cleans up after the crash.
        let (mut c2, _) = client(d2, &s2, &i2, "r2");
        wait_recording(&i2);
        kill9(&mut p2);
        assert_eq!(tracing_on(&i2), "1");
        let st = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["traced_probes", "--cleanup-after-crash"])
            .env("PERFETTO_PRODUCER_SOCK_NAME", &s2.producer)
            .env_remove("TRACED_PROBES_STATE_FILE")
            .status()
            .unwrap();
        assert!(st.success());
        assert!(
            !instance_dir(&i2).exists(),
            "the crashed instance was not cleaned: {}",
            std::fs::read_to_string(d2.join("probes.log")).unwrap()
        );
        let _ = c2.kill();
        let _ = c2.wait();
        // Stack 1 never stopped recording.
        assert_eq!(tracing_on(&i1), "1");
    }
    std::thread::sleep(Duration::from_millis(300));
    stop1.store(true, Ordering::Relaxed);
    let n1 = w1.join().unwrap();
    finish(c1, &out1, d1, "c1", "tbx1", n1);
    wait_until(Duration::from_secs(10), "instances removed", || {
        !instance_dir(&i1).exists() && !instance_dir(&i2).exists()
    });
}

#[test]
fn a_sigkilled_probes_is_cleaned_by_its_successor_only() {
    let inst = format!("tbx_own_kill_{}", std::process::id());
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (da, db) = (da.path(), db.path());
    let (sa, sb) = (Sockets::in_dir(da), Sockets::in_dir(db));
    let mut ta = start_our_traced(&sa, &da.join("traced.log"));
    let mut pa = probes(&sa, &[], &da.join("probes.log"), true);
    let (mut c, _) = client(da, &sa, &inst, "c");
    wait_recording(&inst);
    kill9(&mut pa);
    let _ = c.kill();
    let _ = c.wait();
    kill9(&mut ta);
    assert_eq!(tracing_on(&inst), "1");

    // An unrelated traced_probes (other sockets) starts, and another one
    // cleans up "after a crash": neither touches the dead one's instance.
    let _tb = start_our_traced(&sb, &db.join("traced.log"));
    let _pb = probes(&sb, &[], &db.join("probes.log"), true);
    let st = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["traced_probes", "--cleanup-after-crash"])
        .env("PERFETTO_PRODUCER_SOCK_NAME", &sb.producer)
        .env_remove("TRACED_PROBES_STATE_FILE")
        .status()
        .unwrap();
    assert!(st.success());
    assert!(instance_dir(&inst).exists());
    assert_eq!(tracing_on(&inst), "1");

    // Its successor on the same socket cleans it at start (no traced
    // needed: cleanup comes before connecting).
    let _pa2 = probes(&sa, &[], &da.join("probes2.log"), false);
    wait_until(Duration::from_secs(10), "the successor's cleanup", || {
        !instance_dir(&inst).exists()
            && std::fs::read_to_string(da.join("probes2.log"))
                .unwrap_or_default()
                .contains("cleaned ftrace state left by a previous run")
    });
}

/// `TRACED_PROBES_LOCK_DIR` moves the lock files and the default crash
/// state (Android has no /run): a second stack pointed at the same
/// directory is refused the instance the first one owns, naming its pid.
#[test]
fn the_lock_dir_override_holds_the_locks_and_the_crash_state() {
    let inst = format!("tbx_own_lockdir_{}", std::process::id());
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (d1, d2) = (d1.path(), d2.path());
    let locks = d1.join("locks");
    let (s1, s2) = (Sockets::in_dir(d1), Sockets::in_dir(d2));
    let env = [("TRACED_PROBES_LOCK_DIR", locks.as_path())];
    let _t1 = start_our_traced(&s1, &d1.join("traced.log"));
    let p1 = probes_env(&s1, &[], &d1.join("probes.log"), true, &env);
    let (mut c1, _) = client(d1, &s1, &inst, "c1");
    wait_recording(&inst);
    let lock = locks.join(format!("instance.{inst}.lock"));
    assert_eq!(read_trim(&lock), p1.pid().to_string());
    assert!(!Path::new("/run/tracebox-ftrace")
        .join(format!("instance.{inst}.lock"))
        .exists());
    let state: Vec<_> = std::fs::read_dir(&locks)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("state."))
        .collect();
    assert_eq!(state.len(), 1, "{state:?}");
    let text = std::fs::read_to_string(locks.join(&state[0])).unwrap();
    assert!(text.contains(&format!("instance {inst} created")), "{text}");

    let _t2 = start_our_traced(&s2, &d2.join("traced.log"));
    let _p2 = probes_env(&s2, &[], &d2.join("probes.log"), true, &env);
    let config = format!(
        "buffers {{ size_kb: 1024 }}\nduration_ms: 500\n\
         data_sources {{ config {{ name: \"linux.ftrace\" ftrace_config {{ \
         ftrace_events: \"ftrace/print\" instance_name: \"{inst}\" }} }} }}\n"
    );
    let (mut c2, _) = client_with(d2, &s2, &config, "c2");
    assert!(c2.wait().unwrap().success());
    let err = std::fs::read_to_string(d2.join("c2.err")).unwrap();
    assert!(
        err.contains(&format!(
            "linux.ftrace setup error: ftrace instance {inst} is in use by another \
             traced_probes (pid {})",
            p1.pid()
        )),
        "{err}"
    );
    sigint(&c1);
    assert!(c1.wait().unwrap().success());
    wait_until(
        Duration::from_secs(10),
        "the instance and its lock go",
        || !instance_dir(&inst).exists() && !lock.exists(),
    );
}

/// A client running `config` (text) on `socks`.
fn client_with(dir: &Path, socks: &Sockets, config: &str, name: &str) -> (Child, PathBuf) {
    let cfg = dir.join(format!("{name}.pbtx"));
    std::fs::write(&cfg, config).unwrap();
    let out = dir.join(format!("{name}.pftrace"));
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(&out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
        .spawn()
        .unwrap();
    (child, out)
}

fn instances_named(prefix: &str) -> usize {
    std::fs::read_dir(Path::new(TRACEFS).join("instances"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .count()
}

/// 200 linux.ftrace data sources in one config (traced refuses more than
/// 256 data sources outright), each in its own instance: traced_probes
/// creates at most its bound of instances, the others fail setup, and the
/// client's end line says why.
#[test]
fn a_thousand_ftrace_sources_create_a_bounded_number_of_instances() {
    let prefix = format!("tbx_bound_{}_", std::process::id());
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let s = Sockets::in_dir(d);
    let _t = start_our_traced(&s, &d.join("traced.log"));
    let _p = probes(&s, &[], &d.join("probes.log"), true);
    let mut config = String::from("buffers { size_kb: 4096 }\nduration_ms: 1500\n");
    for i in 0..200 {
        config.push_str(&format!(
            "data_sources {{ config {{ name: \"linux.ftrace\" ftrace_config {{ \
             ftrace_events: \"ftrace/print\" instance_name: \"{prefix}{i}\" \
             buffer_size_kb: 64 }} }} }}\n"
        ));
    }
    let (mut c, out) = client_with(d, &s, &config, "c");
    let mut most = 0;
    let mut marked = false;
    while c.try_wait().unwrap().is_none() {
        let n = instances_named(&prefix);
        most = most.max(n);
        // The first instance set up records as usual.
        // (Recording: taken over, buffer_percent 5, and started, tracing on.)
        let first = format!("{prefix}0");
        let recording = || {
            read_trim(instance_dir(&first).join("buffer_percent")) == "5"
                && tracing_on(&first) == "1"
        };
        if !marked && n > 0 && recording() {
            let mark = instance_dir(&format!("{prefix}0")).join("trace_marker");
            marked = std::fs::write(mark, "tbxbound-0\n").is_ok();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let err = std::fs::read_to_string(d.join("c.err")).unwrap();
    assert!(c.wait().unwrap().success(), "{err}");
    assert!((1..=8).contains(&most), "{most} instances at once");
    assert!(marked, "the first instance never traced");
    assert_eq!(markers_in(&out, "tbxbound"), BTreeSet::from([0]), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap_or_default();
    assert!(
        line.contains("linux.ftrace setup error: too many "),
        "{err}"
    );
    assert!(!line.contains("nothing lost"), "{line}");
    // The refused sources say so once, not one chunk of the buffer each.
    assert!(
        line.starts_with("Trace stats: no data lost, but "),
        "{line}"
    );
    wait_until(Duration::from_secs(10), "instances removed", || {
        instances_named(&prefix) == 0
    });
    // Nothing is left taken: the next session records ftrace.
    let inst = format!("{prefix}after");
    let (c, out) = client(d, &s, &inst, "after");
    wait_recording(&inst);
    let stop = Arc::new(AtomicBool::new(false));
    let w = flood(&inst, "tbxafter", stop.clone());
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let written = w.join().unwrap();
    finish(c, &out, d, "after", "tbxafter", written);
}

/// A buffer size beyond the machine's bound is clamped (not allocated),
/// and the client's end line says so.
#[test]
fn a_huge_buffer_size_is_clamped_with_a_setup_error() {
    let inst = format!("tbx_bound_buf_{}", std::process::id());
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let s = Sockets::in_dir(d);
    let _t = start_our_traced(&s, &d.join("traced.log"));
    let _p = probes(&s, &[], &d.join("probes.log"), true);
    let config = format!(
        r#"buffers {{ size_kb: 4096 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print" instance_name: "{inst}" buffer_size_kb: 4000000000 }} }} }}
duration_ms: 120000
"#
    );
    let (c, _) = client_with(d, &s, &config, "c");
    wait_recording(&inst);
    let kb: u64 = read_trim(instance_dir(&inst).join("buffer_size_kb"))
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // 64 MiB, as the kernel rounds it (to whole pages plus a header).
    assert!(kb <= 64 * 1024 + 64, "{kb} KiB per cpu");
    let mut c = c;
    sigint(&c);
    wait_until(Duration::from_secs(60), "the client's exit", || {
        c.try_wait().unwrap().is_some()
    });
    let err = std::fs::read_to_string(d.join("c.err")).unwrap();
    assert!(
        err.contains("linux.ftrace setup error: buffer_size_kb 4000000000 clamped to "),
        "{err}"
    );
}

/// An instance name that would leave the instances directory (and the
/// lock directory) is refused before any path is built from it; the end
/// line names the bad name, and nothing was written to the trace's
/// instance.
#[test]
fn an_instance_name_with_dot_dot_is_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let s = Sockets::in_dir(d);
    let _t = start_our_traced(&s, &d.join("traced.log"));
    let _p = probes(&s, &[], &d.join("probes.log"), true);
    let config = r#"buffers { size_kb: 1024 }
data_sources { config { name: "linux.ftrace" ftrace_config {
    ftrace_events: "ftrace/print" instance_name: "../../tbx_x" } } }
duration_ms: 500
"#;
    let (mut c, out) = client_with(d, &s, config, "c");
    assert!(c.wait().unwrap().success());
    let err = std::fs::read_to_string(d.join("c.err")).unwrap();
    assert!(
        err.contains(r#"linux.ftrace setup error: bad instance name "../../tbx_x""#),
        "{err}"
    );
    let trace = std::fs::read(out).unwrap();
    assert!(!trace.is_empty());
}

/// SIGTERM stops traced_probes within a second whatever it is doing, and
/// ftrace is left clean: while it cannot reach traced, while idle, while
/// recording.
#[test]
fn sigterm_stops_probes_within_a_second_in_every_state() {
    let inst = format!("tbx_bound_term_{}", std::process::id());
    let d = tempfile::tempdir().unwrap();
    let d = d.path();
    let s = Sockets::in_dir(d);
    let term = |p: &mut Proc, what: &str| {
        let t0 = std::time::Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        while p.child.try_wait().unwrap().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(1),
                "{what}: still running 1 s after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // No traced: reconnecting.
    let mut p = probes(&s, &[], &d.join("probes.log"), false);
    std::thread::sleep(Duration::from_millis(300));
    term(&mut p, "reconnecting");
    // Connected, idle.
    let _t = start_our_traced(&s, &d.join("traced.log"));
    let mut p = probes(&s, &[], &d.join("probes.log"), true);
    term(&mut p, "idle");
    // Recording a marker flood.
    let mut p = probes(&s, &[], &d.join("probes.log"), true);
    let (mut c, _) = client(d, &s, &inst, "c");
    wait_recording(&inst);
    let stop = Arc::new(AtomicBool::new(false));
    let w = flood(&inst, "tbx3", stop.clone());
    std::thread::sleep(Duration::from_millis(300));
    // The flood's open trace_marker would keep the instance from going.
    stop.store(true, Ordering::Relaxed);
    assert!(w.join().unwrap() > 0);
    term(&mut p, "recording");
    assert!(!instance_dir(&inst).exists(), "ftrace left dirty");
    let _ = c.kill();
    let _ = c.wait();
    // A config of 200 ftrace instances (the state that once left
    // traced_probes deaf to SIGTERM): while it sets them up, and once it
    // holds its most (each removal of an instance costs the kernel RCU
    // grace periods).
    for (i, most) in [(0, false), (1, true)] {
        let prefix = format!("{inst}_many{i}_");
        let mut p = probes(&s, &[], &d.join("probes.log"), true);
        let mut config = String::from("buffers { size_kb: 4096 }\nduration_ms: 60000\n");
        for i in 0..200 {
            config.push_str(&format!(
                "data_sources {{ config {{ name: \"linux.ftrace\" ftrace_config {{ \
                 ftrace_events: \"ftrace/print\" instance_name: \"{prefix}{i}\" }} }} }}\n"
            ));
        }
        let (mut c, _) = client_with(d, &s, &config, "many");
        wait_until(Duration::from_secs(30), "the setup", || match most {
            false => instances_named(&prefix) > 0,
            true => {
                instances_named(&prefix)
                    == tracebox::traced_probes::ftrace::instances::MAX_INSTANCES
            }
        });
        let what = match most {
            false => "setting up 200 instances",
            true => "holding its most instances",
        };
        term(&mut p, what);
        assert_eq!(instances_named(&prefix), 0, "{what}: ftrace left dirty");
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Ends `c` with SIGINT and waits for it.
fn end_session(mut c: Child) {
    sigint(&c);
    wait_until(Duration::from_secs(60), "the client's exit", || {
        c.try_wait().unwrap().is_some()
    });
}

/// An instance another process holds a file of (EBUSY on rmdir) stays
/// ours when its session ends: removed at the next release once the file
/// is closed, or by the successor if traced_probes dies first.
#[test]
fn an_instance_held_open_elsewhere_is_removed_later() {
    let pid = std::process::id();
    let (inst, other) = (format!("tbx_own_held_{pid}"), format!("tbx_own_next_{pid}"));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let _traced = start_our_traced(&socks, &dir.join("traced.log"));
    let log = dir.join("probes.log");
    let mut p = probes(&socks, &[], &log, true);
    let left_behind = |n: usize| {
        let want = format!("cannot remove ftrace instance {inst} yet");
        wait_until(Duration::from_secs(30), "the instance left behind", || {
            read_trim(&log).matches(&want).count() == n
        });
        assert!(instance_dir(&inst).exists());
        assert_eq!(tracing_on(&inst), "0");
    };
    let hold = || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(instance_dir(&inst).join("trace_marker"))
            .unwrap()
    };

    // Released at the end of the next session, once the file is closed.
    let (c, _) = client(dir, &socks, &inst, "c1");
    wait_recording(&inst);
    let held = hold();
    end_session(c);
    left_behind(1);
    drop(held);
    let (c, _) = client(dir, &socks, &other, "c2");
    wait_recording(&other);
    end_session(c);
    wait_until(Duration::from_secs(30), "both instances removed", || {
        !instance_dir(&inst).exists() && !instance_dir(&other).exists()
    });

    // Left behind again, then traced_probes dies: its successor removes it.
    let (c, _) = client(dir, &socks, &inst, "c3");
    wait_recording(&inst);
    let held = hold();
    end_session(c);
    left_behind(2);
    drop(held);
    kill9(&mut p);
    let log2 = dir.join("probes2.log");
    let _p2 = probes(&socks, &[], &log2, false);
    wait_until(Duration::from_secs(10), "the successor's cleanup", || {
        !instance_dir(&inst).exists()
            && read_trim(&log2).contains(&format!(
                "cleaned ftrace state left by a previous run: instance {inst}"
            ))
    });
}
