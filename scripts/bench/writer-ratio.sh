#!/usr/bin/env bash
# Issue 3: our TraceWriter vs the real Perfetto C SDK, same run, same packets.
#
# Both sides write TracePacket{for_testing{str=<payload>, seq_value, counter}}
# with a fixed payload of 16 B, 100 B and 4 KiB (500k, 500k and 20k packets
# x BENCH_SCALE), one writer thread, 256 KiB SMB with 4 KiB pages (the SDK
# default), a consumer freeing chunks:
#   ours: examples/bench_trace_writer_sdk.rs (in-process SMB, a consumer
#         thread copies and frees each committed chunk);
#   sdk:  scripts/bench/sdk-writer.sh with APIS=c (sdk-producer through
#         real-traced, which copies and frees the chunks).
# Each size is run REPEAT times alternating ours/sdk; the best (lowest CPU,
# highest rate) of each is kept. Lines on stdout:
#   bench=trace_writer impl=tracebox ...        (each repeat)
#   bench=sdk_writer api=c ...                  (each repeat)
#   bench=writer_ratio payload_size=.. ours_cpu_ns_per_packet=.. sdk_cpu_ns_per_packet=..
#     cpu_ratio=ours/sdk ours_packets_per_s=.. sdk_packets_per_s=.. rate_ratio=ours/sdk
#     ours_bytes_per_s=.. sdk_bytes_per_s=..
# cpu_ratio < 1 means we spend less CPU per packet; rate_ratio > 1 means
# more packets/s (wall clock: noisy on a shared box).
# Env: BENCH_SCALE (1), REPEAT (3), SIZES ("16 100 4096").
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO"
: "${BENCH_SCALE:=1}"
: "${REPEAT:=3}"
: "${SIZES:=16 100 4096}"

cargo build --quiet --profile bench-release --example bench_trace_writer_sdk
OURS="${CARGO_TARGET_DIR:-$REPO/target}/bench-release/examples/bench_trace_writer_sdk"
# Builds the interop crate once (the SDK script rebuilds nothing after this).
(cd tests/sdk-interop && cargo build --release --locked --quiet --target-dir "$PWD/target")

get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
status=0
for size in $SIZES; do
    best_ours_cpu="" best_ours_rate=0 best_ours_bps=0
    best_sdk_cpu="" best_sdk_rate=0 best_sdk_bps=0
    for _ in $(seq "$REPEAT"); do
        o=$(timeout 120 "$OURS" "$BENCH_SCALE" 256 4 "$size") || { status=1; continue; }
        echo "$o"
        s=$(APIS=c SIZES=$size BENCH_SCALE=$BENCH_SCALE timeout 200 scripts/bench/sdk-writer.sh 2>/dev/null |
            grep '^bench=sdk_writer') || { status=1; continue; }
        echo "$s"
        oc=$(get writer_cpu_ns_per_packet "$o")
        sc=$(get producer_cpu_ns_per_packet "$s")
        [ -z "$best_ours_cpu" ] || [ "$oc" -lt "$best_ours_cpu" ] && best_ours_cpu=$oc
        [ -z "$best_sdk_cpu" ] || [ "$sc" -lt "$best_sdk_cpu" ] && best_sdk_cpu=$sc
        orate=$(get packets_per_s "$o") srate=$(get packets_per_s "$s")
        [ "$orate" -gt "$best_ours_rate" ] && best_ours_rate=$orate best_ours_bps=$(get bytes_per_s "$o")
        [ "$srate" -gt "$best_sdk_rate" ] && best_sdk_rate=$srate best_sdk_bps=$(get bytes_per_s "$s")
    done
    [ -n "$best_ours_cpu" ] && [ -n "$best_sdk_cpu" ] || { status=1; continue; }
    awk -v sz="$size" -v oc="$best_ours_cpu" -v sc="$best_sdk_cpu" -v orate="$best_ours_rate" \
        -v srate="$best_sdk_rate" -v obps="$best_ours_bps" -v sbps="$best_sdk_bps" 'BEGIN {
        printf "bench=writer_ratio payload_size=%s ours_cpu_ns_per_packet=%s sdk_cpu_ns_per_packet=%s cpu_ratio=%.2f", sz, oc, sc, oc / sc
        printf " ours_packets_per_s=%s sdk_packets_per_s=%s rate_ratio=%.2f ours_bytes_per_s=%s sdk_bytes_per_s=%s\n", orate, srate, orate / srate, obps, sbps
    }'
done
exit $status
