#!/bin/sh
# README's main command, on this kernel: sched and freq for a few seconds.
set -eu
"$TRACEBOX" -t 5s sched freq -o "$OUT/trace.pftrace" 2>"$OUT/client.err"
cat "$OUT/client.err"
# The formats this kernel records sched and markers with (PREEMPT_RT adds
# common fields), kept for the record next to the trace.
. /vm/lib.sh
t=$(tracefs)
for e in sched/sched_switch sched/sched_waking ftrace/print; do
    mkdir -p "$OUT/formats/$e"
    cat "$t/events/$e/format" >"$OUT/formats/$e/format"
done
cat "$t/events/header_page" >"$OUT/formats/header_page"
