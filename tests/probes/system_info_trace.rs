//! What a trace says about the machine: the service's system_info packet
//! (num_cpus, timezone, hz) and linux.system_info's cpu_info and, with
//! `irq_names`, interrupt_info, recorded by our daemons on private sockets
//! and read with the official descriptors.

use crate::support::cli as cli_support;
use crate::support::probes as traced_probes_common;

use std::process::Command;
use std::time::Duration;

use cli_support::{python, wait_exit};
use traced_probes_common::start_our_daemons;

const CHECK: &str = r#"
import os, sys, time
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
t = pb.Trace(); t.ParseFromString(open(sys.argv[1], "rb").read())
si = [p.system_info for p in t.packet if p.HasField("system_info")]
assert si, "no system_info"
s = si[0]
assert s.num_cpus == os.sysconf("SC_NPROCESSORS_CONF"), s
assert s.HasField("timezone_off_mins"), s
assert s.timezone_off_mins == -time.timezone // 60 or s.timezone_off_mins == -time.altzone // 60, s
assert s.hz == os.sysconf("SC_CLK_TCK"), s
assert any(p.HasField("cpu_info") for p in t.packet), "no cpu_info"
irqs = [m for p in t.packet if p.HasField("interrupt_info") for m in p.interrupt_info.irq_mapping]
assert irqs, "no interrupt_info"
want = {}
for line in open("/proc/interrupts").read().splitlines()[1:]:
    head = line.split(":", 1)[0].strip()
    if head.isdigit():
        want[int(head)] = line
for m in irqs:
    assert m.irq_id in want, m
    assert want[m.irq_id].rstrip().endswith(m.name), (m, want[m.irq_id])
print(len(irqs), "irqs named")
"#;

#[test]
fn system_info_and_irq_names() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_our_daemons(dir.path());
    let cfg = dir.path().join("c.pbtx");
    std::fs::write(
        &cfg,
        "buffers { size_kb: 1024 }\n\
         data_sources { config { name: \"linux.system_info\" system_info_config { irq_names: true } } }\n\
         duration_ms: 500\n",
    )
    .unwrap();
    let out = dir.path().join("t.pftrace");
    let link = dir.path().join("perfetto");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
    let mut rec = Command::new(&link)
        .args([
            "--txt",
            "-c",
            cfg.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .env("PERFETTO_PRODUCER_SOCK_NAME", &d.socks.producer)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &d.socks.consumer)
        .spawn()
        .unwrap();
    assert_eq!(wait_exit(&mut rec, Duration::from_secs(60)), 0);
    let o = Command::new(python())
        .args(["-c", CHECK])
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}
