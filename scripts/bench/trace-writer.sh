#!/usr/bin/env bash
# Throughput of our TraceWriter (packets/s, bytes/s for 16 B, 100 B and
# 4 KiB packets) into an in-process SMB drained by a consumer thread.
# Prints one JSON object per packet size (stdout), for comparison with the
# Perfetto C SDK run (tests/sdk-interop).
#
# Usage: scripts/bench/trace-writer.sh [seconds_per_size] [smb_kib] [page_kib]
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --quiet --profile bench-release --example bench_trace_writer
exec "${CARGO_TARGET_DIR:-target}"/bench-release/examples/bench_trace_writer "$@"
