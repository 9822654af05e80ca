#!/usr/bin/env bash
# The whole test suite: what README's second command runs and what CI runs.
# Installs what the tests need from the project's own files, then runs them.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== setup"
scripts/ensure-tracefs.sh
scripts/setup-python.sh
export TRACEBOX_PYTHON="$PWD/.venv/bin/python"

echo "== layering"
scripts/check-layering.sh

echo "== build"
cargo build --locked --all-targets

echo "== sdk-interop peers (real Perfetto traced + SDK consumer for tests/traced_probes_*.rs)"
scripts/sdk-interop.sh build

echo "== cargo test"
# Tests that own tracefs instances or system sockets run one at a time.
cargo test --locked -- --test-threads=2

echo "== schema cross-check against Perfetto's published descriptors"
"$TRACEBOX_PYTHON" tests/py/check_schema.py

echo "== fuzz targets compile"
if [ -f fuzz/Cargo.toml ]; then
    cargo check --locked --manifest-path fuzz/Cargo.toml --bins
fi
