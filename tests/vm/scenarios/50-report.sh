#!/bin/sh
# `tracebox report` on the board, on the trace just recorded there: the
# summary names the machine and the marker slices, --json parses, and
# --events lists the markers as trace-cmd would.
set -eu
. /vm/lib.sh
t=$(tracefs)
record_start trace -t 60s sched/sched_switch sched/sched_waking ftrace/print
write_markers "$t" 20 vm_report
record_stop
"$TRACEBOX" report "$OUT/trace.pftrace" >"$OUT/report.txt"
"$TRACEBOX" report --json "$OUT/trace.pftrace" >"$OUT/report.json"
"$TRACEBOX" report --events -e print "$OUT/trace.pftrace" >"$OUT/events.txt"
cat "$OUT/report.txt"
grep -q vm_report_7 "$OUT/report.txt" || { echo "report lacks the marker slices"; exit 1; }
grep -q "$(uname -r)" "$OUT/report.txt" || { echo "report lacks the kernel release"; exit 1; }
n=$(grep -c 'B|[0-9]*|vm_report_' "$OUT/events.txt")
[ "$n" -eq 20 ] || { echo "report --events shows $n begin markers, want 20"; exit 1; }
