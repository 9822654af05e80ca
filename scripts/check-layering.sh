#!/usr/bin/env bash
# Holds src/ to the layer map in README.md (tests/layering.rs): allowed
# edges between folders, no loops, OS imports only where the map says.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked --quiet --test layering
