//! `compression { zstd {} }` end to end: markers recorded through traced
//! with zstd, read back to the client and written into the file by
//! traced, come out as `zstd_compressed_packets` (TracePacket field 133)
//! holding every marker, known to upstream's descriptors; `tracebox
//! report` reads them all and says the client's words on losses.

use crate::report::{
    marker, report_ok, start_recording_config, stop_recording_stderr, write_marker,
};
use crate::report_end_line::py_json;
use crate::support::probes::{run_py_check, says_nothing_lost};

const MARKERS: usize = 20_000;

/// Prints: zstd packets, other packets at the top level, ftrace bundles
/// outside a compressed packet, the "tbxz N" markers inside (distinct).
const CHECK: &str = r#"
import sys
sys.path.insert(0, sys.argv[2])
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from no_unknown_fields import assert_known, decompressed
data = open(sys.argv[1], "rb").read()
assert_known(data, sys.argv[1])
t = pb.Trace()
t.ParseFromString(data)
z = [p for p in t.packet if p.HasField("zstd_compressed_packets")]
bundles_outside = sum(p.HasField("ftrace_events") for p in t.packet)
marks = set()
for p in z:
    inner = pb.Trace()
    inner.ParseFromString(decompressed(p))
    for q in inner.packet:
        for e in q.ftrace_events.event:
            if e.HasField("print") and e.print.buf.startswith("tbxz "):
                marks.add(e.print.buf.strip())
print(len(z), len(t.packet) - len(z), bundles_outside, len(marks))
"#;

fn record_and_check(tag: &str, extra: &str) {
    let instance = format!("tbx_report_{tag}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let config = format!(
        r#"buffers {{ size_kb: 32768 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch" ftrace_events: "ftrace/print" instance_name: "{instance}" buffer_size_kb: 8192 }} }} }}
compression {{ zstd {{}} }}
duration_ms: 60000
{extra}"#
    );
    let rec = start_recording_config(dir, &instance, &config);
    let mut m = marker(&instance);
    for i in 0..MARKERS {
        write_marker(&mut m, &format!("tbxz {i}"));
        if i % 2000 == 1999 {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    drop(m);
    let (trace, stderr) = stop_recording_stderr(rec, dir);
    assert!(says_nothing_lost(&stderr), "{tag}: {stderr}");
    let py_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py");
    let script = dir.join("check.py");
    std::fs::write(&script, CHECK).unwrap();
    let out = run_py_check(
        script.to_str().unwrap(),
        &[trace.as_os_str(), py_dir.as_ref()],
    );
    let c: Vec<usize> = out.split_whitespace().map(|v| v.parse().unwrap()).collect();
    assert!(c[0] >= 1, "{tag}: no zstd packet: {c:?}");
    assert_eq!(
        c[1..],
        [0, 0, MARKERS],
        "{tag}: every packet inside, every marker once"
    );

    let trace = trace.to_str().unwrap();
    let events = report_ok(&["--events", "-e", "print", trace]);
    let ours = events.lines().filter(|l| l.contains("tbxz ")).count();
    assert_eq!(ours, MARKERS, "{tag}");
    let json = report_ok(&["--json", trace]);
    let got = py_json(
        &json,
        "[l[1] for l in d['losses'] if l[0]=='trace_stats'][0]",
    );
    assert!(says_nothing_lost(&got), "{tag}: report says {got}");
}

#[test]
fn zstd_traces_hold_every_marker_read_back_and_in_the_file() {
    record_and_check("zstd_read", "");
    record_and_check(
        "zstd_file",
        "write_into_file: true\nfile_write_period_ms: 200\n",
    );
}
