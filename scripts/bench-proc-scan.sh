#!/usr/bin/env bash
# CPU cost of linux.process_stats /proc scans versus process count.
#
# Starts 0/100/500/1000 extra sleeping processes and, for each, measures
# (getrusage user+sys) one full /proc scan (process tree with thread names,
# encoded) and one stats poll (all values re-emitted), plus `ps -eLf` as a
# peer. Prints µs per scan and µs per process. Goal: a full scan of ~1,000
# processes under 20 ms of CPU.
#
# Usage: scripts/bench-proc-scan.sh [ITERATIONS] [COUNTS...]
set -euo pipefail
cd "$(dirname "$0")/.."
iters=${1:-20}
shift || true
counts=("${@:-0 100 500 1000}")
read -r -a counts <<<"${counts[*]}"

# Optimized, but without the slow fat LTO of the shipping profile.
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo build -q --release --example bench_proc_scan
bench=target/release/examples/bench_proc_scan

pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
trap cleanup EXIT

spawn_to() {
    local want=$1
    while [ "${#pids[@]}" -lt "$want" ]; do
        sleep 100000 &
        pids+=("$!")
    done
}

printf '%-7s %-12s %9s %8s %12s %10s\n' extra what processes threads cpu_us/scan us/process
for n in "${counts[@]}"; do
    spawn_to "$n"
    sleep 0.5 # let the children exec
    while read -r name procs threads us per; do
        printf '%-7s %-12s %9s %8s %12s %10s\n' "$n" "$name" "$procs" "$threads" "$us" "$per"
    done < <("$bench" "$iters" -- ps -eLf)
done
