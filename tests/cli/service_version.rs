//! Issue 33, defect 8: traced's `tracing_service_version` reads like
//! upstream's (`Perfetto vNN...`, NN >= 54), so Perfetto's trace_processor
//! knows a service that flushes on every `write_into_file` write and does
//! not flag the trace with `config_write_into_file_no_flush`; it still
//! says it is tracebox.

use crate::support::cli as cli_support;

use cli_support::{python, wait_exit, Env};
use std::process::Command;
use std::time::Duration;

/// trace_processor's reading of the version (ParseTracingServiceMajorVersion
/// in proto_trace_reader.cc): after `Perfetto v`, the digits up to the
/// first `.` or `-`.
fn trace_processor_major(version: &str) -> Option<u32> {
    let rest = version.strip_prefix("Perfetto v")?;
    let end = rest.find(['.', '-'])?;
    rest[..end].parse().ok()
}

#[test]
fn trace_processor_reads_the_service_version_as_v54_or_later() {
    let env = Env::new("svcver");
    let _traced = env.start_traced();
    let cfg = env.write(
        "c.pbtx",
        "buffers { size_kb: 1024 }\n\
         data_sources { config { name: \"linux.sys_stats\" } }\n\
         duration_ms: 200\nwrite_into_file: true\nfile_write_period_ms: 100\n",
    );
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .spawn()
        .unwrap();
    assert_eq!(wait_exit(&mut client, Duration::from_secs(60)), 0);
    let py = "import sys\n\
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb\n\
t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())\n\
print('\\n'.join(p.system_info.tracing_service_version for p in t.packet if p.HasField('system_info')))\n";
    let o = Command::new(python())
        .arg("-c")
        .arg(py)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8(o.stdout).unwrap();
    let version = stdout.lines().next().expect("a system_info packet");
    let major = trace_processor_major(version);
    assert!(
        major.is_some_and(|m| m >= 54),
        "{version:?} reads as {major:?}"
    );
    assert!(version.contains("(tracebox "), "{version:?}");
    // The service state says the same.
    let q = env.perfetto(&["--query"]);
    assert!(String::from_utf8_lossy(&q.stdout).contains(version));
}
