#!/bin/sh
# targets: x86_64 aarch64
# cmdline: trace_event=sched:sched_switch,sched:sched_process_fork,sched:sched_process_exec trace_buf_size=4M
# timeout: 150
# Boot traces: the kernel recorded from boot (the command line above); the
# installed init script saw trace_event=, started traced_probes without
# --reset-ftrace and recorded /etc/tracebox/boot.pbtx
# (preserve_ftrace_buffer). The trigger writes it; the host check finds
# the kernel's exec of /init as pid 1 and sched events before it.
set -eu
[ -r /etc/tracebox/boot.pbtx ] || { echo "install.sh installed no /etc/tracebox/boot.pbtx"; exit 1; }
[ -e /var/run/tracebox-boot-trace.pid ] || { echo "the init script started no boot trace"; exit 1; }
# pid 1's start (clock ticks of 1/100 s since boot) and now, for the clock.
cut -d' ' -f22 /proc/1/stat >init_start_ticks
# A slow guest may need longer than the init script's stop timeout to
# write the file: boot-done says so and fails; wait again (bounded).
i=0
until /etc/init.d/S60tracebox boot-done; do
    i=$((i + 1))
    [ $i -lt 6 ] || { echo "boot-done: the boot trace was never written"; exit 1; }
done
cut -d' ' -f1 /proc/uptime >uptime
cp /var/log/tracebox-boot.pftrace boot.pftrace
ls -l boot.pftrace
