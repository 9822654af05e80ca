#!/bin/sh
# Userspace markers (atrace's ftrace/print): a known number written while
# recording, every one in the trace.
set -eu
. /vm/lib.sh
t=$(tracefs)
record_start trace -t 60s -b 16mb sched/sched_switch ftrace/print
write_markers "$t" 300 vm_marker
record_stop
cat "$OUT/trace.err"
