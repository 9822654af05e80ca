#!/bin/sh
# The relay over vsock (issue 26's item, on a kernel with vsock_loopback):
# a traced of its own serves a vsock producer socket with the relay
# endpoint, traced_relay connects to it through CID 1 (the loopback), and
# a traced_probes behind the relay is recorded as a relayed machine, with
# its system_info and clock sync.
# modules: vsock_loopback
# timeout: 150
set -eu
d=/tmp/vsock-relay
mkdir -p "$d"
port=20002
pids=""
cleanup() { [ -z "$pids" ] || kill $pids 2>/dev/null || true; }
trap cleanup EXIT
wait_for() { # FILE PATTERN SECONDS
    i=0
    while ! grep -q "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -le $(($3 * 10)) ] || { echo "no '$2' in $1:"; cat "$1"; exit 1; }
        sleep 0.1
    done
}

# Listen on any CID; the relay reaches it through the loopback CID 1.
PERFETTO_PRODUCER_SOCK_NAME="$d/p.sock,vsock://4294967295:$port" \
    PERFETTO_CONSUMER_SOCK_NAME="$d/c.sock" \
    "$TRACEBOX" traced --enable-relay-endpoint-on "vsock://4294967295:$port" \
    2>"$OUT/traced.log" &
pids="$pids $!"
i=0
until [ -S "$d/c.sock" ]; do
    i=$((i + 1)); [ $i -le 100 ] || { cat "$OUT/traced.log"; exit 1; }; sleep 0.1
done
PERFETTO_PRODUCER_SOCK_NAME="$d/relay.sock" PERFETTO_RELAY_SOCK_NAME="vsock://1:$port" \
    PERFETTO_MACHINE_NAME=vsock-board TRACEBOX_LOG=debug \
    "$TRACEBOX" traced_relay 2>"$OUT/relay.log" &
pids="$pids $!"
wait_for "$OUT/relay.log" "clocks synced" 30
PERFETTO_PRODUCER_SOCK_NAME="$d/relay.sock" TRACED_PROBES_STATE_FILE="$d/probes.state" \
    "$TRACEBOX" traced_probes 2>"$OUT/probes.log" &
pids="$pids $!"
i=0
until PERFETTO_CONSUMER_SOCK_NAME="$d/c.sock" "$TRACEBOX" perfetto --query 2>/dev/null |
    grep -q linux.sys_stats; do
    i=$((i + 1)); [ $i -le 300 ] || { echo "the relayed traced_probes never registered"; cat "$OUT/probes.log"; exit 1; }
    sleep 0.1
done
cat >"$OUT/config.pbtx" <<CFG
duration_ms: 3000
buffers { size_kb: 4096 }
data_sources { config { name: "linux.sys_stats" sys_stats_config { meminfo_period_ms: 100 } } }
data_sources { config { name: "linux.system_info" } }
trace_all_machines: true
CFG
PERFETTO_CONSUMER_SOCK_NAME="$d/c.sock" "$TRACEBOX" perfetto --txt -c "$OUT/config.pbtx" \
    -o "$OUT/trace.pftrace" 2>"$OUT/client.err"
cat "$OUT/client.err"
