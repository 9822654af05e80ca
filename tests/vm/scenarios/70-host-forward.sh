#!/bin/sh
# The harness's network: the guest reaches the host's loopback port behind
# $HOST_RELAY (10.0.2.100:20001, qemu's guestfwd), once per connection,
# and nothing else (restrict=on). The host hook runs an echo server.
# targets: x86_64
set -eu
for i in 1 2; do
    echo "hello from the guest $i" | nc -w 5 "${HOST_RELAY%:*}" "${HOST_RELAY#*:}" >"$OUT/echo.$i"
    grep -qx "echo: hello from the guest $i" "$OUT/echo.$i" || { cat "$OUT/echo.$i"; exit 1; }
done
if echo x | nc -w 3 10.0.2.2 22 >/dev/null 2>&1; then
    echo "10.0.2.2:22 answered: the guest reaches more than the forward"
    exit 1
fi
