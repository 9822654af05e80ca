//! A write_into_file trace whose whole process tree (client, traced,
//! traced_probes) is SIGKILLed in the middle of a marker flood stays
//! readable up to the last write: the file parses whole with the official
//! descriptors (at most traced's trailing padding follows the last packet,
//! which readers skip), and no marker is there twice. Every state a kill
//! inside a write can leave is checked by protozero::commit_append's tests.

use crate::support::cli::python;
use crate::support::probes::*;

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;

#[test]
fn a_trace_killed_mid_flood_reads_up_to_the_last_write() {
    let instance = "tbx_cli_crash";
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let r = std::panic::catch_unwind(|| kill_mid_flood(dir, instance));
    if r.is_err() {
        dump(dir);
    }
    // Nobody is left to take the killed traced_probes' instance down.
    let _ = std::fs::write(instance_dir(instance).join("tracing_on"), "0");
    let _ = std::fs::remove_dir(instance_dir(instance));
    r.unwrap_or_else(|e| std::panic::resume_unwind(e));
}

fn kill_mid_flood(dir: &Path, instance: &str) {
    let daemons = start_our_daemons(dir);
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!(
            r#"write_into_file: true
file_write_period_ms: 100
buffers {{ size_kb: 16384 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print"
    buffer_size_kb: 4096
    instance_name: "{instance}"
    drain_period_ms: 50 }} }} }}
"#
        ),
    )
    .unwrap();
    let out = dir.join("t.pftrace");
    let mut client = start_our_client(dir, &cfg, &out, &daemons.socks.consumer);
    let idir = instance_dir(instance);
    wait_ftrace_started(dir, instance);
    // The flood runs until after the kill.
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        let marker = std::fs::OpenOptions::new()
            .write(true)
            .open(idir.join("trace_marker"))
            .unwrap();
        std::thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = (&marker).write_all(format!("tbx-crash {i:08}").as_bytes());
                i += 1;
            }
            i
        })
    };
    // Several writes into the file have happened: kill everything at once.
    // Counted in committed packets, not file length: traced grows the file
    // by a batch's padding before it commits the batch, and one ftrace read
    // pass can make a batch of over a MB.
    wait_until(Duration::from_secs(60), "packets to fill the file", || {
        std::fs::read(&out).is_ok_and(|b| packet_bytes(&b) > 512 * 1024)
    });
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        Signal::SIGKILL,
    );
    daemons.traced.signal(Signal::SIGKILL);
    daemons.probes.signal(Signal::SIGKILL);
    let _ = client.wait();
    stop.store(true, Ordering::Relaxed);
    let written = flood.join().unwrap();

    let text = check_torn(&out);
    eprintln!("{written} markers written; {text}");
    let v = |k: &str| value(&text, k);
    assert!(v("packets") > 0 && v("markers") > 0, "{text}");
    assert_eq!(v("dups"), 0, "{text}");
    assert_eq!(v("torn"), 0, "{text}");
    assert_eq!(v("whole"), 1, "{text}");

    // Our reader reads the same file up to the same point.
    let r = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&r.stdout);
    assert!(!report.is_empty(), "{}", String::from_utf8_lossy(&r.stderr));

    // A file cut short by hand (not by traced) is counted as torn, and
    // everything before the cut still reads.
    let bytes = std::fs::read(&out).unwrap();
    let torn = dir.join("torn.pftrace");
    std::fs::write(&torn, &bytes[..bytes.len() - 100]).unwrap();
    let t = check_torn(&torn);
    assert!(value(&t, "torn") > 0 && value(&t, "whole") == 0, "{t}");
    assert!(value(&t, "packets") > 0 && value(&t, "markers") > 0, "{t}");
}

/// Bytes of whole `Trace.packet` fields in a trace file (padding skipped).
fn packet_bytes(data: &[u8]) -> usize {
    use tracebox::protozero::decode::read_varint;
    let (mut i, mut sum) = (0, 0);
    while let Some((tag, n)) = read_varint(&data[i..]) {
        let Some((v, m)) = read_varint(&data[i + n..]) else {
            break;
        };
        let body = i + n + m;
        i = match tag & 7 {
            0 => body,
            2 if body as u64 + v <= data.len() as u64 => body + v as usize,
            _ => break,
        };
        if tag == 0x0A {
            sum += v as usize;
        }
    }
    sum
}

/// The counts line of tests/py/check_torn.py.
fn check_torn(trace: &Path) -> String {
    let o = Command::new(python())
        .arg(Path::new(ROOT).join("tests/py/check_torn.py"))
        .arg("tbx-crash")
        .arg(trace)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text
}

fn value(line: &str, key: &str) -> u64 {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {line}"))
        .parse()
        .unwrap()
}
