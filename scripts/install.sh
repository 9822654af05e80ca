#!/usr/bin/env bash
# Installs one tracebox binary and its applet symlinks:
#   scripts/install.sh PREFIX [BINARY]
# BINARY defaults to target/release/tracebox. Result:
#   PREFIX/bin/tracebox, and PREFIX/bin/{traced,traced_probes,perfetto,
#   trigger_perfetto,websocket_bridge,traced_relay} -> tracebox
set -euo pipefail
prefix="${1:?usage: scripts/install.sh PREFIX [BINARY]}"
bin="${2:-$(dirname "$0")/../target/release/tracebox}"
[ -x "$bin" ] || { echo "install: $bin is not an executable (build it first)" >&2; exit 1; }
mkdir -p "$prefix/bin"
# Copy through a temporary name so a running tracebox is never overwritten in place.
cp "$bin" "$prefix/bin/.tracebox.new"
chmod 0755 "$prefix/bin/.tracebox.new"
mv -f "$prefix/bin/.tracebox.new" "$prefix/bin/tracebox"
for applet in traced traced_probes perfetto trigger_perfetto websocket_bridge traced_relay; do
    ln -sfn tracebox "$prefix/bin/$applet"
done
echo "installed $prefix/bin/tracebox and its applets"
