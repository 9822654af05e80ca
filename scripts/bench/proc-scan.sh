#!/usr/bin/env bash
# CPU cost of linux.process_stats /proc scans versus process count.
#
# Starts 0/100/500/1000 extra sleeping processes and, for each, measures
# (getrusage user+sys) one full /proc scan (process tree, encoded) with and
# without thread names, through the status path and the pidfd path
# (full_scan = what the poller picks by default), one stats poll (all values
# re-emitted), `ps -eLf` as a peer, and (if a C compiler exists) the bare
# syscall floor of each path's syscall set (scripts/bench/proc-floor.c).
# Prints µs per scan and µs per process. Goal: a full scan of ~1,000
# processes under 20 ms of CPU.
#
# ROUNDS (1) repeats scan and floor, in turns, and prints the ratios of each
# round (full scan / the status+cmdline floor, / the floor of every syscall
# the scan makes, floor_scan, and / floor_scan_at, the same syscalls made
# as the scan makes them: openat relative to an open /proc): take the
# medians. The scan and the floor run seconds apart there (the other
# configurations and the peer run between them), so on a loaded machine
# PAIRS (0) adds pairs measured back to back: the floor, the default full
# scan alone, the floor again; each pair's ratio is the scan over the mean
# of the two floors around it ("pair" lines; take their medians).
# ALTERNATE=N (0) runs N turns of the scan and an in-process copy of
# floor_scan_at (same syscalls, glibc memmem for the two lines it needs)
# back to back inside one process, milliseconds apart: the steadiest ratio
# on a shared machine ("alternate" line: quartiles of the per-turn ratios).
#
# BENCH=PATH runs that bench_proc_scan binary instead of building one (a
# build of another commit, to take turns with this one).
#
# Usage: [ROUNDS=N] [PAIRS=N] [ALTERNATE=N] [BENCH=PATH] scripts/bench/proc-scan.sh [ITERATIONS] [COUNTS...]
set -euo pipefail
cd "$(dirname "$0")/../.."
iters=${1:-20}
rounds=${ROUNDS:-1}
shift || true
counts=("${@:-0 100 500 1000}")
read -r -a counts <<<"${counts[*]}"

# Optimized, but without the slow fat LTO of the shipping profile.
if [ -n "${BENCH:-}" ]; then
    :
elif ! CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo build -q --release --example bench_proc_scan 2>/tmp/bench-proc-scan-build.log; then
    cat /tmp/bench-proc-scan-build.log >&2
    exit 1
fi
bench=${BENCH:-${CARGO_TARGET_DIR:-target}/release/examples/bench_proc_scan}
# Optional syscall floors (per syscall set, no parsing) in C.
floor=""
if command -v cc >/dev/null && cc -O2 -o target/bench-proc-floor scripts/bench/proc-floor.c 2>/dev/null; then
    floor=target/bench-proc-floor
fi

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

printf '%-7s %-34s %9s %8s %12s %10s\n' extra what processes threads cpu_us/scan us/process
for n in "${counts[@]}"; do
    spawn_to "$n"
    sleep 0.5 # let the children exec
    for round in $(seq "$rounds"); do
        while read -r name procs threads us per; do
            printf '%-7s %-34s %9s %8s %12s %10s\n' "$n" "$name" "$procs" "$threads" "$us" "$per"
            case $name in
            full_scan) scan=$per ;;
            floor_status+cmdline | floor_scan | floor_scan_at) echo "ratio extra=$n round=$round full_scan/$name=$(awk -v a="$scan" -v b="$per" 'BEGIN { printf "%.3f", a / b }')" ;;
            esac
        done < <("$bench" "$iters" -- ps -eLf; [ -z "$floor" ] || "$floor" "$iters")
    done
    if [ "${ALTERNATE:-0}" -gt 0 ]; then
        echo "extra=$n $(PROC_SCAN_ALTERNATE=$ALTERNATE "$bench")"
    fi
    [ -n "$floor" ] || continue
    for pair in $(seq "${PAIRS:-0}"); do
        before=$("$floor" "$iters")
        scan=$(PROC_SCAN_ONLY=1 "$bench" "$iters" | awk '$1 == "full_scan" { print $5 }')
        after=$("$floor" "$iters")
        for set in floor_status+cmdline floor_scan floor_scan_at; do
            awk -v set="$set" -v scan="$scan" -v n="$n" -v pair="$pair" '
                $1 == set { sum += $5; k++ }
                END { printf "pair extra=%s pair=%s full_scan/%s=%.3f\n", n, pair, set, scan / (sum / k) }
            ' <(echo "$before") <(echo "$after")
        done
    done
done
