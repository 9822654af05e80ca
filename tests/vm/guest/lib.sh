# Helpers for the VM stage's scenarios (. /vm/lib.sh). POSIX sh, BusyBox.

# The tracefs directory this guest has (debugfs's on old-style boots).
tracefs() {
    for d in /sys/kernel/tracing /sys/kernel/debug/tracing; do
        [ -e "$d/trace_marker" ] && { echo "$d"; return 0; }
    done
    echo "no tracefs mounted" >&2
    return 1
}

# record_start NAME ARGS...: starts `tracebox ARGS -o $OUT/NAME.pftrace` as
# a child of this shell (stderr, with its end line, in $OUT/NAME.err) and
# returns once every data source started (--notify-fd); sets rec_pid.
record_start() {
    name="$1"
    shift
    # In /tmp: a FIFO on the 9p share would be the host's.
    fifo=/tmp/ready.$$
    rm -f "$fifo"
    mkfifo "$fifo"
    "$TRACEBOX" --notify-fd 3 "$@" -o "$OUT/$name.pftrace" 2>"$OUT/$name.err" 3>"$fifo" &
    rec_pid=$!
    status=$(od -An -tu1 -N1 "$fifo" | tr -d ' ')
    rm -f "$fifo"
    [ "$status" = 0 ] || {
        echo "record_start $name: the client reported '$status' instead of started (0)" >&2
        cat "$OUT/$name.err" >&2
        return 1
    }
}

# record_stop: Ctrl-C to the client record_start started, and its exit
# status (it writes the file and prints the end line first).
record_stop() {
    kill -INT "$rec_pid"
    wait "$rec_pid"
}

# write_markers DIR COUNT TAG: COUNT begin/end pairs into DIR/trace_marker.
write_markers() {
    i=0
    while [ "$i" -lt "$2" ]; do
        echo "B|$$|$3_$i" >"$1/trace_marker"
        echo "E|$$" >"$1/trace_marker"
        i=$((i + 1))
    done
}
