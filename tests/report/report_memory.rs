//! Memory stays bounded whatever the trace's size: a trace larger than
//! the address space the report is allowed (`ulimit -v`) is read to its
//! end, summary and dump. Its events are 4 KB prints, the case where a
//! window bounded only by its number of events would hold the trace.

use std::io::Write;
use std::process::Command;

use crate::report_synthetic::{bundle, bytes, int};

/// `PrintFtraceEvent { buf }` as an `FtraceEvent` of pid 1234.
fn print(ts: u64, text: &[u8]) -> Vec<u8> {
    let mut p = Vec::new();
    bytes(2, text, &mut p);
    let mut e = Vec::new();
    int(1, ts, &mut e);
    int(2, 1234, &mut e);
    bytes(3, &p, &mut e);
    e
}

/// The trace's size, and the address space the report may use (about
/// twice what it needs, three quarters of the file).
const FILE_MB: u64 = 128;
const LIMIT_KB: u64 = 96 << 10;
const PER_BUNDLE: u64 = 100;

#[test]
fn a_trace_larger_than_the_allowed_memory_is_read_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pftrace");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let pad = "x".repeat(4000);
    // Read passes: one bundle per cpu, the cpus' times interleaved as
    // the kernel's buffers are.
    let (mut ts, mut n, mut written) = (1_000_000_000u64, 0u64, 0u64);
    while written < FILE_MB << 20 {
        for cpu in 0..2 {
            let mut events = Vec::new();
            for i in 0..PER_BUNDLE {
                let text = format!("tbxbig {n} {pad}");
                events.push(print(ts + i * 2000 + cpu * 1000, text.as_bytes()));
                n += 1;
            }
            let b = bundle(cpu, &events);
            written += b.len() as u64;
            f.write_all(&b).unwrap();
        }
        ts += PER_BUNDLE * 2000;
    }
    drop(f);
    let path = path.to_str().unwrap();

    let limited = |args: &str| {
        let out = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {LIMIT_KB} && exec \"$0\" report {args} \"$1\""
            ))
            .arg(env!("CARGO_BIN_EXE_tracebox"))
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "report {args} under {LIMIT_KB} KB: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let text = limited("");
    let row = text.lines().find(|l| l.starts_with("print ")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cols,
        [
            "print",
            &n.to_string(),
            &(n / 2).to_string(),
            &(n / 2).to_string()
        ]
    );
    assert!(!text.contains("events_out_of_order"), "{text}");

    // The dump: every print, in time order.
    let dump = limited("--events");
    let mut want = 0;
    for l in dump.lines() {
        let at = l.find("tbxbig ").unwrap_or_else(|| panic!("{l}"));
        let k: u64 = l[at + 7..].split(' ').next().unwrap().parse().unwrap();
        // Bundle pairs alternate cpus event by event: cpu 0's i-th, then
        // cpu 1's i-th.
        let pair = want / (2 * PER_BUNDLE) * (2 * PER_BUNDLE);
        let i = (want - pair) / 2;
        let expect = pair + (want - pair) % 2 * PER_BUNDLE + i;
        assert_eq!(k, expect, "line {want}: {l}");
        want += 1;
    }
    assert_eq!(want, n);
}
