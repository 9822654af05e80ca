//! `linux.process_stats` polls at start and then on its period, as
//! upstream does: a trace shorter than the period still has its samples.

use std::process::Stdio;

use crate::support::probes::*;
use tracebox::protozero::decode::FieldIter;

/// `Trace.packet` = 1, `TracePacket.process_stats` = 9.
fn process_stats_packets(trace: &[u8]) -> usize {
    FieldIter::new(trace)
        .filter(|p| p.number == 1)
        .filter(|p| FieldIter::new(p.value).any(|f| f.number == 9))
        .count()
}

#[test]
fn first_poll_happens_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_our_daemons(dir.path());
    let cfg = dir.path().join("cfg.pbtx");
    // A 10 s period, a 1.5 s trace: only the poll at start can land.
    std::fs::write(
        &cfg,
        r#"
buffers { size_kb: 4096 }
duration_ms: 1500
data_sources { config { name: "linux.process_stats"
    process_stats_config { proc_stats_poll_ms: 10000 } } }
"#,
    )
    .unwrap();
    let out = dir.path().join("t.pftrace");
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(&out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &d.socks.consumer)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let trace = std::fs::read(&out).unwrap();
    assert_eq!(process_stats_packets(&trace), 1, "one poll, at start");
}
