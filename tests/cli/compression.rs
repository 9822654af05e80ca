//! `compression_type: COMPRESSION_TYPE_DEFLATE` and `compression { zstd {}
//! }`: traced writes the packets as `compressed_packets` (zlib streams of
//! `Trace.packet`) or `zstd_compressed_packets` (zstd frames of them), read
//! back over IPC and written into the file; checked with zlib, zstandard
//! and perfetto_trace_pb2.

use crate::support::cli as cli_support;

use crate::support::probes::says_nothing_lost;
use cli_support::{python, wait_exit, Env};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const SDK_DS: &str = "data_sources { config { name: \"tbx.sdk_test\" } }\n";
const PACKETS: u32 = 2000;

/// Prints: compressed packets, plain for_testing packets outside them,
/// for_testing inside them, trace_config inside them, zstd ones among the
/// compressed packets.
const CHECK: &str = r#"
import sys
sys.path.insert(0, sys.argv[2])
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from no_unknown_fields import decompressed
t = pb.Trace()
t.ParseFromString(open(sys.argv[1], "rb").read())
z = [p for p in t.packet if decompressed(p) is not None]
plain = sum(1 for p in t.packet if p.HasField("for_testing"))
inner = pb.Trace()
for p in z:
    part = pb.Trace()
    part.ParseFromString(decompressed(p))
    inner.packet.extend(part.packet)
print(len(z), plain, sum(1 for p in inner.packet if p.HasField("for_testing")),
      sum(1 for p in inner.packet if p.HasField("trace_config")),
      sum(1 for p in z if p.HasField("zstd_compressed_packets")))
"#;

fn check(trace: &Path) -> Vec<u64> {
    let out = Command::new(python())
        .arg("-c")
        .arg(CHECK)
        .arg(trace)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/py"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}

fn record(tag: &str, extra: &str) -> (Vec<u64>, u64, String) {
    let env = Env::new(tag);
    let _traced = env.start_traced();
    let _producer = env.start_sdk_producer(PACKETS);
    let cfg = env.write(
        "c.pbtx",
        &format!("buffers {{ size_kb: 8192 }}\n{SDK_DS}duration_ms: 120000\n{extra}"),
    );
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .stderr(std::fs::File::create(env.path("client.log")).unwrap())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    env.wait_producer_written();
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_exit(&mut client, Duration::from_secs(60)), 0);
    let log = std::fs::read_to_string(env.path("client.log")).unwrap();
    (check(&out), std::fs::metadata(&out).unwrap().len(), log)
}

#[test]
fn deflate_and_zstd_compress_read_back_and_file_traces() {
    let (plain, plain_size, _) = record("zplain", "");
    assert_eq!(plain, [0, PACKETS as u64, 0, 0, 0]);
    for (tag, extra, zstd) in [
        ("zread", "compression_type: COMPRESSION_TYPE_DEFLATE\n", false),
        (
            "zfile",
            "compression { deflate {} }\nwrite_into_file: true\nfile_write_period_ms: 100\n",
            false,
        ),
        ("zsread", "compression { zstd {} }\n", true),
        // Both asked for: the higher-numbered (zstd) wins, as upstream's.
        (
            "zsfile",
            "compression { deflate {} zstd { level: 1 } }\ncompression_type: COMPRESSION_TYPE_DEFLATE\nwrite_into_file: true\nfile_write_period_ms: 100\n",
            true,
        ),
    ] {
        let (c, size, log) = record(tag, extra);
        assert!(c[0] >= 1, "{tag}: compressed packets {c:?}");
        assert_eq!(&c[1..4], [0, PACKETS as u64, 1], "{tag}: all inside, once");
        let want_zstd = if zstd { c[0] } else { 0 };
        assert_eq!(c[4], want_zstd, "{tag}: zstd packets among {}", c[0]);
        // The SDK producer's payloads are pseudo-random bytes: the gain
        // comes from the packet framing and trailers.
        assert!(size < plain_size, "{tag}: {size} >= {plain_size}");
        assert!(says_nothing_lost(&log), "{tag}: {log}");
    }
}
