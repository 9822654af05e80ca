#!/bin/sh
# The guest booted as a board does: BusyBox init ran the installed init
# script, traced and traced_probes run, and the client reaches them.
set -eu
uname -a
/etc/init.d/S60tracebox status
for applet in traced traced_probes; do
    pidof "$applet" >/dev/null || { echo "no $applet running"; exit 1; }
done
ls /sys/kernel/tracing/trace >/dev/null || ls /sys/kernel/debug/tracing/trace
"$TRACEBOX" perfetto --query >"$OUT/query.txt"
grep -q tracebox "$OUT/query.txt"
