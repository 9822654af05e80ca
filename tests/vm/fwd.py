#!/usr/bin/env python3
"""qemu's guestfwd command: one run per guest connection to
10.0.2.100:20001, with that connection as stdin/stdout. Connects to the
host's loopback port (argv[1]) and copies both ways until either side
closes. Nothing but 127.0.0.1 is ever a target."""
import os
import selectors
import socket
import sys


def main():
    port = int(sys.argv[1])
    try:
        peer = socket.create_connection(("127.0.0.1", port))
    except OSError as e:
        print(f"fwd: 127.0.0.1:{port}: {e}", file=sys.stderr)
        return 1
    sel = selectors.DefaultSelector()
    sel.register(0, selectors.EVENT_READ)
    sel.register(peer, selectors.EVENT_READ)
    open_dirs = 2
    while open_dirs:
        for key, _ in sel.select():
            if key.fileobj == 0:
                data = os.read(0, 65536)
                if not data:
                    sel.unregister(0)
                    peer.shutdown(socket.SHUT_WR)
                    open_dirs -= 1
                else:
                    peer.sendall(data)
            else:
                data = peer.recv(65536)
                if not data:
                    sel.unregister(peer)
                    open_dirs -= 1
                    return 0
                while data:
                    data = data[os.write(1, data):]
    return 0


if __name__ == "__main__":
    sys.exit(main())
