#!/usr/bin/env bash
# The whole test suite: what README's second command runs and what CI runs.
# Installs what the tests need from the project's own files, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== setup"
scripts/ensure-tracefs.sh
scripts/setup-python.sh
export TRACEBOX_PYTHON="$PWD/.venv/bin/python"

echo "== build the real Perfetto peers (tests/sdk-interop: SDK producer/consumer, real traced)"
scripts/sdk-interop.sh build
export TRACEBOX_SDK_INTEROP_BIN="$PWD/tests/sdk-interop/target/release"

echo "== layering"
scripts/check-layering.sh

echo "== build"
cargo build --locked --all-targets

echo "== cargo test"
# Tests that own tracefs instances or system sockets run one at a time.
cargo test --locked -- --test-threads=2

echo "== interop: real SDK producer and consumer, real and our traced, our perfetto"
ours="$PWD/target/debug/tracebox"
scripts/sdk-interop.sh all
TRACED_CMD="$ours traced" scripts/sdk-interop.sh all
CONSUMER_KIND=perfetto CONSUMER_CMD="$ours perfetto" scripts/sdk-interop.sh all
TRACED_CMD="$ours traced" CONSUMER_KIND=perfetto CONSUMER_CMD="$ours perfetto" scripts/sdk-interop.sh all

echo "== schema cross-check against Perfetto's published descriptors"
"$TRACEBOX_PYTHON" tests/py/check_schema.py

echo "== fuzz targets compile"
if [ -f fuzz/Cargo.toml ]; then
    cargo check --locked --manifest-path fuzz/Cargo.toml --bins
fi
