#!/usr/bin/env bash
# Creates .venv with PyPI's `perfetto` package, whose perfetto_trace_pb2 is
# the independent reference for every trace and schema check, and
# `zstandard` (the checkers open zstd_compressed_packets). A venv made
# before a package was added gets it installed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2, zstandard' 2>/dev/null; then
    python3 -m venv .venv
    .venv/bin/pip install --quiet --disable-pip-version-check -r tests/py/requirements.txt
fi
.venv/bin/python -c 'import perfetto.protos.perfetto.trace.perfetto_trace_pb2, zstandard'
