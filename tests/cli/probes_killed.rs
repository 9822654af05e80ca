//! A local traced_probes SIGKILLed in the middle of a trace: what it had
//! read from the kernel is in the trace, and what could still have been in
//! the kernel buffer is named on the end line, with the window.
//!
//! * With `drain_period_ms: P`, every marker written more than P + 200 ms
//!   before the kill is in the trace.
//! * With the default reader (fill level or a 2 s quiet wait), every
//!   marker written more than 2.2 s before the kill is.

use crate::support::probes::*;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

#[test]
fn a_killed_probes_with_a_drain_period_keeps_what_it_read() {
    let (line, seen) = kill_after_markers("tbx_cli_kill_p", "drain_period_ms: 100", &[(300, 1000)]);
    assert_eq!(seen.len(), 300, "{line}");
    assert!(
        line.contains(
            "linux.ftrace: traced_probes died; events from the last ≤ 0.3 s were in the \
             kernel buffer and are not in the trace"
        ),
        "{line}"
    );
}

#[test]
fn a_killed_probes_with_the_default_reader_keeps_what_is_older_than_its_quiet_wait() {
    // 50 markers 3 s before the kill (older than the quiet wait), 50 more
    // 1 s before it (they may still sit in the kernel).
    let (line, seen) = kill_after_markers("tbx_cli_kill_d", "", &[(50, 2000), (50, 1000)]);
    assert!((0..50).all(|i| seen.contains(&i)), "{seen:?} {line}");
    assert!(
        line.contains(
            "linux.ftrace: traced_probes died; events from the last ≤ 2.2 s were in the \
             kernel buffer and are not in the trace"
        ),
        "{line}"
    );
}

/// Starts a trace of `ftrace/print` on `instance` (with `extra` in its
/// ftrace_config), writes each batch of (count, pause after in ms) of
/// numbered markers, SIGKILLs traced_probes, waits for the client. Returns
/// the end line and the numbers of the markers in the trace.
fn kill_after_markers(
    instance: &str,
    extra: &str,
    batches: &[(u64, u64)],
) -> (String, std::collections::BTreeSet<u64>) {
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let r = std::panic::catch_unwind(|| run(dir, instance, extra, batches));
    if r.is_err() {
        dump(dir);
    }
    // Nobody is left to take the killed traced_probes' instance down.
    let _ = std::fs::write(instance_dir(instance).join("tracing_on"), "0");
    let _ = std::fs::remove_dir(instance_dir(instance));
    r.unwrap_or_else(|e| std::panic::resume_unwind(e))
}

fn run(
    dir: &Path,
    instance: &str,
    extra: &str,
    batches: &[(u64, u64)],
) -> (String, std::collections::BTreeSet<u64>) {
    let daemons = start_our_daemons(dir);
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!(
            r#"duration_ms: 6000
buffers {{ size_kb: 4096 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print"
    instance_name: "{instance}"
    {extra} }} }} }}
"#
        ),
    )
    .unwrap();
    let out = dir.join("t.pftrace");
    let mut client = start_our_client(dir, &cfg, &out, &daemons.socks.consumer);
    wait_ftrace_started(dir, instance);
    let marker = std::fs::OpenOptions::new()
        .write(true)
        .open(instance_dir(instance).join("trace_marker"))
        .unwrap();
    let mut n = 0;
    for &(count, pause_ms) in batches {
        for _ in 0..count {
            (&marker)
                .write_all(format!("tbx-kill {n:05}").as_bytes())
                .unwrap();
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(pause_ms));
    }
    drop(marker);
    daemons.probes.signal(Signal::SIGKILL);
    let status = crate::support::cli::wait_exit(&mut client, Duration::from_secs(60));
    let err = std::fs::read_to_string(dir.join("consumer.log")).unwrap();
    assert_eq!(status, 0, "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap_or_else(|| panic!("no end line: {err}"))
        .to_string();
    assert!(
        line.contains("producer perfetto.traced_probes disconnected"),
        "{line}"
    );
    (line, markers(&out))
}

/// The numbers of the `tbx-kill` markers in `trace`.
fn markers(trace: &Path) -> std::collections::BTreeSet<u64> {
    use quick_protobuf::{BytesReader, MessageRead};
    use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
    use tracebox::pb::protos::mod_TracePacket::OneOfdata;
    let bytes = std::fs::read(trace).unwrap();
    let trace =
        tracebox::pb::protos::Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes)
            .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for p in trace.packet {
        if let OneOfdata::ftrace_events(b) = p.data {
            for e in b.event {
                if let OneOfevent::print(p) = e.event {
                    let buf = p.buf.unwrap_or_default();
                    if let Some(i) = buf.strip_prefix("tbx-kill ") {
                        assert!(seen.insert(i.trim().parse().unwrap()), "{buf} twice");
                    }
                }
            }
        }
    }
    seen
}
