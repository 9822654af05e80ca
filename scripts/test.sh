#!/usr/bin/env bash
# The whole test suite: what README's second command runs and what CI runs.
# Installs what the tests need from the project's own files, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== setup"
# A clean clone builds debug, release, fuzz, four static targets and the
# Perfetto peers: incremental caches would only add gigabytes of disk.
export CARGO_INCREMENTAL=0
df -h "${CARGO_TARGET_DIR:-$PWD}" | awk 'NR == 2 { print "disk: " $4 " free on " $6 }'
scripts/ensure-tracefs.sh
scripts/setup-python.sh
export TRACEBOX_PYTHON="$PWD/.venv/bin/python"
# tests/report/report.rs compares `tracebox report --events` with `trace-cmd report`;
# tests/perf/unwinding.rs profiles programs built by gcc and clang, and
# compares with `perf record --call-graph dwarf` (linux-perf). zstd-sys
# compiles libzstd with the host's gcc (the static targets' gcc comes with
# scripts/build-static.sh).
missing=()
command -v gcc >/dev/null || missing+=(gcc)
command -v trace-cmd >/dev/null || missing+=(trace-cmd)
command -v clang >/dev/null || missing+=(clang)
command -v perf >/dev/null || missing+=(linux-perf)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

echo "== build the real Perfetto peers (tests/sdk-interop: SDK producer/consumer, real traced)"
scripts/sdk-interop.sh build
export TRACEBOX_SDK_INTEROP_BIN="$PWD/tests/sdk-interop/target/release"

echo "== layering, format, lints (toolchain pinned in rust-toolchain.toml)"
scripts/check-layering.sh
cargo fmt --check
cargo clippy --locked --all-targets -- -D warnings

echo "== build"
cargo build --locked --all-targets

echo "== cargo test"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked --no-fail-fast -- --test-threads=2 2>&1 | tee "$log"

echo "== interop: real SDK producer and consumer, real and our traced, our perfetto"
ours="${CARGO_TARGET_DIR:-$PWD/target}/debug/tracebox"
scripts/sdk-interop.sh all
TRACED_CMD="$ours traced" scripts/sdk-interop.sh all
CONSUMER_KIND=perfetto CONSUMER_CMD="$ours perfetto" scripts/sdk-interop.sh all
TRACED_CMD="$ours traced" CONSUMER_KIND=perfetto CONSUMER_CMD="$ours perfetto" scripts/sdk-interop.sh all

echo "== schema cross-check against Perfetto's published descriptors"
"$TRACEBOX_PYTHON" tests/py/check_schema.py

echo "== fuzz targets: compile for cargo-fuzz, then run each on the stable toolchain"
if [ -f fuzz/Cargo.toml ]; then
    cargo check --locked --manifest-path fuzz/Cargo.toml --bins
fi
# Every corpus file plus deterministic mutations, up to 10 s per target.
# The seed is the caller's (default 0), so a red run is a change of ours,
# not a new day's dice; TRACEBOX_FUZZ_SEED=N explores other mutations.
TRACEBOX_FUZZ_RUNS=50000 TRACEBOX_FUZZ_SECS=10 TRACEBOX_FUZZ_SEED="${TRACEBOX_FUZZ_SEED:-0}" \
    cargo test --locked --test fuzz_replay -- --test-threads=2

echo "== init.d script: install, start, record, stop (scripts/init/tracebox.init)"
scripts/test-initd.sh "$ours"

echo "== static cross builds under qemu-user: aarch64 and armv7, end-to-end on this kernel"
scripts/test-cross.sh

echo "== VM stage: Debian's kernels under qemu-system (x86_64, x86_64-rt, aarch64, armv7; tests/vm/README.md)"
vm_start=$(date +%s)
scripts/test-vm.sh all
echo "== VM stage took $(($(date +%s) - vm_start)) s"

# One closing line for the whole suite (cargo prints one per test binary).
awk '/^test result:/ { p += $4; f += $6 } END { printf "tracebox: %d passed, %d failed\n", p, f }' "$log"
