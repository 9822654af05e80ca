//! What the client tells a person on a board, through the real binary and
//! our traced on private sockets: a closed stdout is success, the live
//! line names the size limit and trigger timeout, a wrapped ring buffer
//! suggests a larger `-b`, `cmd_trace_start_delay` is announced.

use crate::support::cli as cli_support;

use std::process::{Command, Stdio};

use cli_support::{python, Env};

const SDK_DS: &str = "data_sources { config { name: \"tbx.sdk_test\" } }\n";

/// `tracebox --list-events | grep -q sched_switch`: grep exits at its
/// first match and closes the pipe; the listing still exits 0, without a
/// panic message (`--list` is tests/cli/multicall.rs').
#[test]
fn a_closed_stdout_is_success() {
    for args in [
        &["--list-events"][..],
        &["--list-categories"],
        &["perfetto", "--list-events"],
    ] {
        let (rd, wr) = nix::unistd::pipe().unwrap();
        drop(rd);
        let o = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(args)
            .stdout(Stdio::from(wr))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("Broken pipe"),
            "{args:?}: {err}"
        );
    }
}

/// A person who types `tracebox --help` finds how to learn what to record.
#[test]
fn top_level_help_names_the_listings() {
    let o = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for want in [
        "--list-categories",
        "--list-events",
        "perfetto --help",
        "configs/",
        "traced_perf if none runs",
    ] {
        assert!(text.contains(want), "{want} not in {text}");
    }
}

#[test]
fn the_live_line_names_the_size_limit_and_trigger_timeout() {
    let env = Env::new("limits");
    let _traced = env.start_traced();
    let cfg = env.write(
        "c.pbtx",
        &format!(
            "buffers {{ size_kb: 1024 }}\n{SDK_DS}write_into_file: true\n\
             max_file_size_bytes: 104857600\n\
             trigger_config {{ trigger_mode: START_TRACING trigger_timeout_ms: 2000 \
             triggers {{ name: \"never_sent\" stop_delay_ms: 0 }} }}\n"
        ),
    );
    let out = env.path("t.pftrace");
    let link = env.dir.path().join("perfetto");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
    let cmd = format!("{} --txt -c {cfg} -o {}", link.display(), out.display());
    // util-linux `script` gives the client a pseudo-terminal as stderr.
    let o = Command::new("script")
        .args(["-q", "-e", "-c", &cmd, "/dev/null"])
        .env("PERFETTO_PRODUCER_SOCK_NAME", &env.producer)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &env.consumer)
        .output()
        .expect("run script(1)");
    let tty = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{tty}");
    assert!(
        tty.contains(", stops at 100.0 MB, trigger timeout 2s]"),
        "{tty}"
    );
}

#[test]
fn a_wrapped_ring_buffer_suggests_a_larger_buffer() {
    let env = Env::new("wrap");
    let _traced = env.start_traced();
    // ~1.3 MB of packets into a 64 KB ring buffer.
    let _producer = env.start_sdk_producer(20_000);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 64 fill_policy: RING_BUFFER }}\n{SDK_DS}duration_ms: 2000\n"),
    );
    let out = env.path("t.pftrace");
    let o = env.perfetto(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("Trace stats: LOST "))
        .unwrap_or_else(|| panic!("no loss line in {err:?}"));
    let overwritten: i64 = line
        .split(", ")
        .find_map(|p| p.strip_suffix(" chunks overwritten"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line:?}"));
    assert!(overwritten > 0, "{line:?}");
    assert!(
        err.contains("The ring buffer wrapped and its oldest data made room: a larger -b"),
        "{err}"
    );
    // The same figure is in the trace's own stats (its last trace_stats).
    let py = Command::new(python())
        .arg("-c")
        .arg(
            "import sys\n\
             from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb\n\
             t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())\n\
             s = [p.trace_stats for p in t.packet if p.HasField('trace_stats')][-1]\n\
             print(sum(b.chunks_overwritten for b in s.buffer_stats))",
        )
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&py.stdout).trim(),
        overwritten.to_string()
    );
}

#[test]
fn cmd_trace_start_delay_is_announced() {
    let env = Env::new("delay");
    let _traced = env.start_traced();
    let cfg = env.write(
        "c.pbtx",
        &format!(
            "buffers {{ size_kb: 1024 }}\n{SDK_DS}duration_ms: 300\n\
             cmd_trace_start_delay {{ min_delay_ms: 400 max_delay_ms: 400 }}\n"
        ),
    );
    let out = env.path("t.pftrace");
    let o = env.perfetto(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("Delaying the trace start by 400 ms (cmd_trace_start_delay)"),
        "{err}"
    );
}
