#!/usr/bin/env bash
# Mounts tracefs at /sys/kernel/tracing when it is missing (needs root).
set -euo pipefail
if [ -e /sys/kernel/tracing/trace ] || [ -e /sys/kernel/debug/tracing/trace ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "ensure-tracefs: tracefs is not mounted and we are not root" >&2
    exit 1
fi
mount -t tracefs nodev /sys/kernel/tracing
