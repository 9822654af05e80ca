#!/bin/sh
# targets: x86_64 aarch64
# FtraceConfig.enable_function_graph on a real kernel, three recordings
# while a shell whose pid we know opens a missing file N times:
#  filter: function_filters do_sys_openat2 (matches) and
#          no_such_function_tbx (matches nothing: named in
#          failed_ftrace_events, the session still records);
#  root:   function_graph_roots do_sys_openat2 with max depth 2 (the call
#          and its direct callees), over filters naming the root, two of
#          its callees and one of theirs (the depth cuts it). Without
#          filters every kernel function is patched, which under TCG slows
#          the guest to a crawl;
#  none:   only a filter that matches nothing: refused with a setup error
#          on the end line (an empty filter would trace every function).
# After each, the tracer is nop again and the filters are empty; after a
# crash, the successor restores them.
set -eu
. /vm/lib.sh
N=30
T=$(tracefs)
echo $((N + 2)) >opens
trap 'cp /var/log/tracebox.log "$OUT/daemons.log" 2>/dev/null || true' EXIT

config() { # NAME FTRACE_CONFIG_LINES [DURATION_MS]
    cat >"$1.pbtx" <<CFG
buffers { size_kb: 8192 fill_policy: DISCARD }
data_sources {
  config {
    name: "linux.ftrace"
    ftrace_config {
      enable_function_graph: true
      symbolize_ksyms: true
      buffer_size_kb: 4096
      $2
    }
  }
}
${3:+duration_ms: $3}
CFG
}

# clean: the tracer is nop and no function filter is left.
clean() {
    [ "$(cat "$T/current_tracer")" = nop ] || return 1
    for f in set_ftrace_filter set_graph_function; do
        if grep -v '^#' "$T/$f" | grep -q .; then return 1; fi
    done
}

restored() { # NAME: clean, at most 10 s after the client ended (the
    # release runs just after traced was told the source stopped)
    n=0
    until clean; do
        n=$((n + 1))
        [ $n -lt 100 ] || {
            echo "$1: not restored: current_tracer $(cat "$T/current_tracer")"
            cat "$T/set_ftrace_filter" "$T/set_graph_function"
            exit 1
        }
        sleep 0.1
    done
}

record() { # NAME FTRACE_CONFIG_LINES
    config "$1" "$2"
    record_start "$1" --txt -c "$1.pbtx"
    echo "$1: tracer $(cat "$T/current_tracer")"
    # The opener's opens: /dev/null, NAME.opener, then the N missing files.
    sh -c 'exec 2>/dev/null; echo $$ >'"$1"'.opener; i=0; while [ $i -lt '"$N"' ]; do read -r x <"/nonexistent-$i" || true; i=$((i + 1)); done'
    record_stop || true
    cat "$1.err"
    restored "$1"
}

record filter 'function_filters: "do_sys_openat2" function_filters: "no_such_function_tbx"'
record root 'function_graph_roots: "do_sys_openat2" function_graph_max_depth: 2 function_filters: "do_sys_openat2" function_filters: "getname" function_filters: "do_filp_open" function_filters: "path_openat"'
config none 'function_filters: "no_such_function_tbx"' 3000
"$TRACEBOX" --txt -c none.pbtx -o none.pftrace 2>none.err || true
cat none.err
restored none

# After a crash: traced_probes SIGKILLed while function_graph is on; its
# successor on the same socket (started by the init script) restores nop.
record_start crash --txt -c filter.pbtx
[ "$(cat "$T/current_tracer")" = function_graph ]
kill -KILL "$(pidof traced_probes)"
rm -f /var/run/traced_probes.pid
/etc/init.d/S60tracebox start
n=0
until [ "$(cat "$T/current_tracer")" = nop ]; do
    n=$((n + 1)); [ $n -lt 100 ] || { echo "the successor left current_tracer at $(cat "$T/current_tracer")"; exit 1; }
    sleep 0.1
done
restored crash
echo "the successor restored the nop tracer"
record_stop || true
