#!/bin/sh
# A real second machine: this guest is a board in relay mode. Its
# traced_relay forwards its traced_probes and traced_perf to the host's
# traced (through $HOST_RELAY); the host's hook records both machines from
# the host and kills this guest (qemu) mid-trace. So this scenario never
# ends by itself: once its producers run it writes its own exit status
# (the host's checks decide the rest) and waits to be killed.
# targets: x86_64 x86_64-rt aarch64
# timeout: 170
set -eu
d=/tmp/second-machine
mkdir -p "$d"
# The init script's daemons produce into the guest's own traced: a board
# in relay mode runs traced_relay in its place.
/etc/init.d/S60tracebox stop || true
PERFETTO_PRODUCER_SOCK_NAME="$d/relay.sock" PERFETTO_RELAY_SOCK_NAME="$HOST_RELAY" \
    PERFETTO_MACHINE_NAME=vm-guest "$TRACEBOX" traced_relay 2>"$OUT/relay.log" &
i=0
until [ -S "$d/relay.sock" ]; do
    i=$((i + 1)); [ $i -le 100 ] || { cat "$OUT/relay.log"; exit 1; }; sleep 0.1
done
PERFETTO_PRODUCER_SOCK_NAME="$d/relay.sock" TRACED_PROBES_STATE_FILE="$d/probes.state" \
    "$TRACEBOX" traced_probes 2>"$OUT/probes.log" &
PERFETTO_PRODUCER_SOCK_NAME="$d/relay.sock" "$TRACEBOX" traced_perf 2>"$OUT/perf.log" &
# Something to schedule and sample.
/vm/bin/hot split 1000000000 &
echo 0 >"/out/80-second-machine.rc"
sync
while :; do
    sleep 1
    sync
done
