#!/bin/sh
# Installs tracebox, its applet symlinks and, if asked, the files to start
# the daemons at boot. POSIX sh: runs on a board's BusyBox as on a host.
#
#   scripts/install.sh [OPTIONS] [PREFIX [BINARY]]
#
#   PREFIX           where bin/ goes (default /usr); naming it is "explicit"
#   BINARY           default: target/release/tracebox (or $CARGO_TARGET_DIR)
#   --init KIND      also install boot files: sysv (/etc/init.d/tracebox),
#                    busybox (/etc/init.d/S60tracebox, which BusyBox's rcS
#                    runs; both with the boot trace config
#                    /etc/tracebox/boot.pbtx), systemd (traced.service, traced-probes.service,
#                    traced-perf.service, and traced-relay.service for a
#                    remote board),
#                    android-replace or android-beside (tracebox.rc), none
#   --init-name NAME the init.d file name (default tracebox; busybox: S60tracebox)
#   --create-group G create group G (in $DESTDIR/etc/group when DESTDIR is
#                    set) and let its members consume (TRACEBOX_GROUP=G)
#   DESTDIR=DIR      stage into DIR (an image root) instead of this system
#
# Without DESTDIR and without an explicit PREFIX it refuses to replace a
# perfetto or traced that is not ours (a build host's own Perfetto).
# An existing defaults file (/etc/default/tracebox) is never overwritten.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
init=none
init_name=
group=
prefix=
bin=
while [ $# -gt 0 ]; do
    case "$1" in
    --init) init="${2:?--init needs a KIND}"; shift 2 ;;
    --init=*) init="${1#*=}"; shift ;;
    --init-name) init_name="${2:?--init-name needs a NAME}"; shift 2 ;;
    --create-group) group="${2:?--create-group needs a GROUP}"; shift 2 ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "install: unknown option $1" >&2; exit 2 ;;
    *)
        if [ -z "$prefix" ]; then prefix="$1"; elif [ -z "$bin" ]; then bin="$1"; else
            echo "install: too many arguments" >&2; exit 2
        fi
        shift
        ;;
    esac
done
explicit_prefix=${prefix:+yes}
prefix="${prefix:-/usr}"
bin="${bin:-${CARGO_TARGET_DIR:-$repo/target}/release/tracebox}"
DESTDIR="${DESTDIR:-}"
root="$DESTDIR"
bindir="$root$prefix/bin"

die() { echo "install: $*" >&2; exit 1; }
[ -x "$bin" ] || die "$bin is not an executable (build it first)"
case "$init" in
none | sysv | busybox | systemd | android-replace | android-beside) ;;
*) die "unknown --init $init (sysv, busybox, systemd, android-replace, android-beside, none)" ;;
esac

# Ours: a symlink to tracebox, or tracebox itself.
is_ours() {
    [ ! -e "$1" ] && [ ! -L "$1" ] && return 0
    [ -L "$1" ] && [ "$(readlink "$1")" = tracebox ] && return 0
    return 1
}
if [ -z "$DESTDIR" ] && [ -z "$explicit_prefix" ]; then
    for applet in perfetto traced traced_probes; do
        is_ours "$bindir/$applet" || die "$bindir/$applet exists and is not tracebox's; \
refusing to replace it. Name a PREFIX (e.g. scripts/install.sh /usr/local) or set DESTDIR."
    done
fi

mkdir -p "$bindir"
# Copy through a temporary name so a running tracebox is never overwritten in place.
cp "$bin" "$bindir/.tracebox.new"
chmod 0755 "$bindir/.tracebox.new"
mv -f "$bindir/.tracebox.new" "$bindir/tracebox"
for applet in traced traced_probes traced_perf perfetto report trigger_perfetto websocket_bridge traced_relay; do
    ln -sfn tracebox "$bindir/$applet"
done
echo "installed $bindir/tracebox and its applets"

# Creates $group on this system, or in the staged image's /etc/group.
create_group() {
    if [ -n "$DESTDIR" ]; then
        gfile="$root/etc/group"
        [ -f "$gfile" ] || die "--create-group: no $gfile in DESTDIR"
        if grep -q "^$group:" "$gfile"; then
            echo "group $group already exists; its members may record (consumer socket)"
            return 0
        fi
        # The first free system gid from 999 down.
        gid=999
        while cut -d: -f3 "$gfile" | grep -qx "$gid"; do gid=$((gid - 1)); done
        echo "$group:x:$gid:" >>"$gfile"
    elif ! grep -q "^$group:" /etc/group; then
        if command -v groupadd >/dev/null 2>&1; then
            groupadd -r "$group"
        else
            addgroup -S "$group"
        fi
    else
        echo "group $group already exists; its members may record (consumer socket)"
        return 0
    fi
    echo "created group $group; its members may record (consumer socket)"
}
[ -n "$group" ] && create_group

# The boot trace's config (/etc/tracebox/boot.pbtx): kept if present.
install_boot_config() {
    b="$root/etc/tracebox/boot.pbtx"
    if [ -e "$b" ]; then
        echo "kept existing $b"
    else
        mkdir -p "$root/etc/tracebox"
        cp "$here/init/boot.pbtx" "$b"
        echo "installed $b"
    fi
}

# The defaults file: kept if present, else ours with the paths of this install.
install_defaults() {
    d="$root/etc/default/tracebox"
    if [ -e "$d" ]; then
        echo "kept existing $d"
    else
        mkdir -p "$root/etc/default"
        sed -e "s|^#TRACEBOX_BIN_DIR=.*|TRACEBOX_BIN_DIR=$prefix/bin|" \
            "$here/init/tracebox.default" >"$d"
        echo "installed $d"
    fi
    if [ -n "$group" ] && ! grep -q "^TRACEBOX_GROUP=" "$d"; then
        echo "TRACEBOX_GROUP=$group" >>"$d"
    fi
}

case "$init" in
none) ;;
sysv | busybox)
    [ -n "$init_name" ] || { [ "$init" = busybox ] && init_name=S60tracebox || init_name=tracebox; }
    mkdir -p "$root/etc/init.d"
    cp "$here/init/tracebox.init" "$root/etc/init.d/$init_name"
    chmod 0755 "$root/etc/init.d/$init_name"
    echo "installed $root/etc/init.d/$init_name"
    install_defaults
    install_boot_config
    ;;
systemd)
    unit_dir="$root/lib/systemd/system"
    mkdir -p "$unit_dir"
    for u in traced.service traced-probes.service traced-perf.service traced-relay.service; do
        sed -e "s|/usr/bin/|$prefix/bin/|g" "$here/init/$u" >"$unit_dir/$u"
        echo "installed $unit_dir/$u"
    done
    install_defaults
    echo "enable with: systemctl enable --now traced traced-probes traced-perf"
    echo "  (a remote board: set PERFETTO_RELAY_SOCK_NAME in $root/etc/default/tracebox,"
    echo "  then systemctl enable --now traced-relay traced-probes traced-perf)"
    ;;
android-*)
    if [ "$init" = android-replace ]; then
        # Copies, not symlinks: SELinux labels the platform's two paths.
        for applet in traced traced_probes; do
            rm -f "$bindir/$applet"
            cp "$bindir/tracebox" "$bindir/$applet"
        done
    fi
    mkdir -p "$root/system/etc/init"
    cp "$here/init/tracebox-${init#android-}.rc" "$root/system/etc/init/tracebox.rc"
    echo "installed $root/system/etc/init/tracebox.rc (see its header for SELinux)"
    ;;
esac
