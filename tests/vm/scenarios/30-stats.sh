#!/bin/sh
# linux.process_stats and linux.sys_stats polled from this kernel's /proc.
set -eu
cat >"$OUT/config.pbtx" <<CFG
duration_ms: 4000
buffers { size_kb: 8192 }
data_sources { config { name: "linux.process_stats" process_stats_config {
    scan_all_processes_on_start: true proc_stats_poll_ms: 1000 } } }
data_sources { config { name: "linux.sys_stats" sys_stats_config {
    meminfo_period_ms: 1000 vmstat_period_ms: 1000 stat_period_ms: 1000
    stat_counters: STAT_CPU_TIMES stat_counters: STAT_FORK_COUNT } } }
data_sources { config { name: "linux.system_info" } }
CFG
"$TRACEBOX" --txt -c "$OUT/config.pbtx" -o "$OUT/trace.pftrace" 2>"$OUT/client.err"
cat "$OUT/client.err"
