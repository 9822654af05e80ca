#!/bin/sh
# tracefs mounted only under debugfs (/sys/kernel/debug/tracing), the only
# path kernels before 4.1 have: the daemons started at boot find it, and a
# recording with markers works there.
# cmdline: tbx_tracefs=debugfs
set -eu
. /vm/lib.sh
if [ -e /sys/kernel/tracing/trace ]; then
    echo "/sys/kernel/tracing is mounted: this boot must not have it"
    exit 1
fi
t=$(tracefs)
[ "$t" = /sys/kernel/debug/tracing ] || { echo "tracefs at $t"; exit 1; }
record_start trace -t 60s sched/sched_switch ftrace/print
write_markers "$t" 50 vm_debugfs
record_stop
cat "$OUT/trace.err"
"$TRACEBOX" --list-events >"$OUT/events.txt"
grep -qx 'sched/sched_switch' "$OUT/events.txt" || { echo "--list-events lacks sched/sched_switch"; exit 1; }
