#!/usr/bin/env bash
# Host side of 70-host-forward: an echo server on 127.0.0.1:$VM_RELAY_PORT
# for the boot, stopped after it.
set -euo pipefail
dir="$2"
case "$1" in
before)
    python3 - "$VM_RELAY_PORT" >"$dir/server.log" 2>&1 <<'PY' &
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    data = b""
    while not data.endswith(b"\n"):
        d = c.recv(4096)
        if not d:
            break
        data += d
    c.sendall(b"echo: " + data)
    c.close()
PY
    echo $! >"$dir/server.pid"
    for _ in $(seq 50); do grep -q listening "$dir/server.log" && exit 0; sleep 0.1; done
    echo "echo server did not start" >&2
    exit 1
    ;;
after)
    kill "$(cat "$dir/server.pid")"
    ;;
esac
