#!/bin/sh
# targets: x86_64 aarch64
# FtraceConfig.kprobe_events on a real kernel: a kprobe and a kretprobe
# (KPROBE_TYPE_BOTH) on do_sys_openat2, which every open() goes through,
# and one refused name. A shell whose pid we know opens a missing file N
# times while the trace runs; the host check counts that pid's begin and
# end events. The probes are in groups tagged with traced_probes' pid,
# gone after the trace, and removed by a successor after a crash.
set -eu
. /vm/lib.sh
N=40
T=$(tracefs)
trap 'cp /var/log/tracebox.log "$OUT/daemons.log" 2>/dev/null || true' EXIT
cat >cfg.pbtx <<CFG
buffers { size_kb: 4096 fill_policy: DISCARD }
data_sources {
  config {
    name: "linux.ftrace"
    ftrace_config {
      kprobe_events { probe: "do_sys_openat2" type: KPROBE_TYPE_BOTH }
      kprobe_events { probe: "not a function" type: KPROBE_TYPE_KPROBE }
      buffer_size_kb: 2048
    }
  }
}
CFG
record_start trace --txt -c cfg.pbtx
grep . "$T/kprobe_events" | tee during.txt
grep -q "^p:perfetto_kprobes_[0-9]*/do_sys_openat2 do_sys_openat2" during.txt
grep -q "^r[0-9]*:perfetto_kretprobes_[0-9]*/do_sys_openat2 do_sys_openat2" during.txt
# The opener's opens: /dev/null, opener.pid, then the N missing files.
sh -c 'exec 2>/dev/null; echo $$ >opener.pid; i=0; while [ $i -lt '"$N"' ]; do read -r x <"/nonexistent-$i" || true; i=$((i + 1)); done'
echo $((N + 2)) >opens
record_stop || true
cat trace.err
# Removed at stop (just after traced was told the source stopped):
# nothing of ours is left.
n=0
while grep -q perfetto_k "$T/kprobe_events"; do
    n=$((n + 1)); [ $n -lt 100 ] || { echo "kprobes left behind:"; cat "$T/kprobe_events"; exit 1; }
    sleep 0.1
done

# After a crash: traced_probes SIGKILLed while its probes exist; its
# successor on the same socket (started by the init script) removes them
# from its crash state file.
record_start crash --txt -c cfg.pbtx
grep -q perfetto_kprobes_ "$T/kprobe_events"
kill -KILL "$(pidof traced_probes)"
grep -q perfetto_kprobes_ "$T/kprobe_events" || { echo "probes gone before any cleanup?"; exit 1; }
rm -f /var/run/traced_probes.pid
/etc/init.d/S60tracebox start
n=0
while grep -q perfetto_k "$T/kprobe_events"; do
    n=$((n + 1)); [ $n -lt 100 ] || { echo "the successor left the probes:"; cat "$T/kprobe_events"; exit 1; }
    sleep 0.1
done
echo "the successor removed the dead one's probes"
record_stop || true
