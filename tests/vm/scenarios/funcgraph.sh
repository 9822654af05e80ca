#!/bin/sh
# targets: x86_64 aarch64
# FtraceConfig.enable_function_graph on a real kernel, three recordings
# while a shell whose pid we know opens a missing file N times:
#  filter: function_filters do_sys_openat2 (matches) and
#          no_such_function_tbx (matches nothing: named in
#          failed_ftrace_events, the session still records);
#  root:   function_graph_roots do_sys_openat2 with max depth 2 (the call
#          and its direct callees);
#  none:   only a filter that matches nothing: refused with a setup error
#          on the end line (an empty filter would trace every function).
# After each, the tracer is nop again and the filters are empty.
set -eu
N=30
T=/sys/kernel/tracing
[ -e "$T/current_tracer" ] || T=/sys/kernel/debug/tracing
echo $((N + 2)) >opens
trap 'cp /var/log/tracebox.log daemons.log 2>/dev/null || true' EXIT

record() { # NAME FTRACE_CONFIG_LINES
    cat >"$1.pbtx" <<CFG
buffers { size_kb: 8192 fill_policy: DISCARD }
data_sources {
  config {
    name: "linux.ftrace"
    ftrace_config {
      enable_function_graph: true
      symbolize_ksyms: true
      buffer_size_kb: 4096
      drain_period_ms: 200
      $2
    }
  }
}
duration_ms: 5000
CFG
    # In the foreground (its end line goes to NAME.log), started once
    # the tracer is on (or after 3 s: the refused one never switches).
    "$TRACEBOX" perfetto --txt -c "$1.pbtx" -o "$1.trace" 2>"$1.log" &
    pid=$!
    n=0
    until [ "$(cat $T/current_tracer)" = function_graph ] && [ "$(cat $T/tracing_on)" = 1 ]; do
        n=$((n + 1)); [ $n -lt 30 ] || break
        sleep 0.1
    done
    echo "$1: tracer $(cat $T/current_tracer)"
    # The opener's opens: /dev/null, NAME.opener, then the N missing files.
    sh -c 'exec 2>/dev/null; echo $$ >'"$1"'.opener; i=0; while [ $i -lt '"$N"' ]; do read -r x <"/nonexistent-$i" || true; i=$((i + 1)); done'
    wait "$pid" || true
    cat "$1.log"
    tracer="$(cat $T/current_tracer)"
    [ "$tracer" = nop ] || { echo "$1: current_tracer left at $tracer"; exit 1; }
    if grep -v '^#' "$T/set_ftrace_filter" | grep -q .; then
        echo "$1: set_ftrace_filter left:"; cat "$T/set_ftrace_filter"; exit 1
    fi
    if grep -v '^#' "$T/set_graph_function" | grep -q .; then
        echo "$1: set_graph_function left:"; cat "$T/set_graph_function"; exit 1
    fi
}

record filter 'function_filters: "do_sys_openat2" function_filters: "no_such_function_tbx"'
record root 'function_graph_roots: "do_sys_openat2" function_graph_max_depth: 2'
record none 'function_filters: "no_such_function_tbx"'
grep -q "linux.ftrace setup error: enable_function_graph: none of function_filters (no_such_function_tbx) matches a traceable function" none.log

# After a crash: traced_probes SIGKILLed while function_graph is on; its
# successor on the same socket (started by the init script) restores nop.
"$TRACEBOX" perfetto --txt -c filter.pbtx -o crash.trace 2>crash.log &
cpid=$!
n=0
until [ "$(cat $T/current_tracer)" = function_graph ]; do
    n=$((n + 1)); [ $n -lt 100 ] || { echo "function_graph never came on"; exit 1; }
    sleep 0.1
done
kill -KILL "$(pidof traced_probes)"
rm -f /var/run/traced_probes.pid
/etc/init.d/S60tracebox start
n=0
until [ "$(cat $T/current_tracer)" = nop ]; do
    n=$((n + 1)); [ $n -lt 100 ] || { echo "the successor left current_tracer at $(cat $T/current_tracer)"; exit 1; }
    sleep 0.1
done
echo "the successor restored the nop tracer"
wait "$cpid" || true
