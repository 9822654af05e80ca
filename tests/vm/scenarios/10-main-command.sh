#!/bin/sh
# README's main command, on this kernel: sched and freq for a few seconds.
set -eu
"$TRACEBOX" -t 5s sched freq -o "$OUT/trace.pftrace" 2>"$OUT/client.err"
cat "$OUT/client.err"
