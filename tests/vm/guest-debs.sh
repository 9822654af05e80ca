#!/usr/bin/env bash
# Debian programs of the guest's architecture in an image root, never
# installed on this host:
#   tests/vm/guest-debs.sh DEBARCH CACHE ROOT PACKAGE... -- FILE...
# Fetches PACKAGEs (`apt-get download`, the candidate versions) with the
# shared-library packages they depend on, recursively (Depends and
# Pre-Depends named as policy names those, after the soname: lib*N,
# zlib1g; not libpython3.11-stdlib and such), into
# CACHE/guest-debs/DEBARCH, once; extracts each there once. Then copies
# each FILE (a path inside the packages, e.g. usr/bin/perf) to ROOT, with
# the shared libraries its DT_NEEDED entries name, recursively, at their
# packages' paths, and the program interpreter (ld.so) at the path it
# names. The libraries are at /lib/MULTIARCH and /usr/lib/MULTIARCH, which
# the loader searches only through ld.so.cache: run them with
# LD_LIBRARY_PATH=/lib/$(cat /vm/multiarch):/usr/lib/$(cat /vm/multiarch)
# (ROOT/vm/multiarch names it), and only them (the cross toolchain's
# programs in /vm/bin run on their own C library in /vm/lib).
# Users: scripts/bench/vm-ftrace.sh (trace-cmd), tests/vm/extra.sh (perf).
set -euo pipefail
debarch="$1" cache="$2" root="$3"
shift 3
pkgs=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do pkgs+=("$1") && shift; done
[ $# -gt 0 ] && shift
case "$debarch" in
arm64) multiarch=aarch64-linux-gnu ;;
amd64) multiarch=x86_64-linux-gnu ;;
armhf) multiarch=arm-linux-gnueabihf ;;
*) echo "guest-debs: unknown architecture $debarch" >&2; exit 2 ;;
esac
dir="$cache/guest-debs/$debarch"
mkdir -p "$dir/x"
die() { echo "guest-debs: $*" >&2; exit 1; }

# The dependency closure, resolved once per package set, a level of the
# tree per apt call (each call loads apt's whole cache: seconds).
list="$dir/closure-$(printf '%s+' "${pkgs[@]}").list"
if [ ! -s "$list" ]; then
    declare -A seen=()
    level=("${pkgs[@]}")
    while [ ${#level[@]} -gt 0 ]; do
        for p in "${level[@]}"; do seen[$p]=1; done
        deps=$(apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks \
            --no-replaces --no-enhances "${level[@]/%/:$debarch}" 2>/dev/null) ||
            die "apt knows not all of ${level[*]} for $debarch (dpkg --add-architecture $debarch; apt-get update)"
        level=()
        for d in $(printf '%s\n' "$deps" | sed -n 's/^ *\(Pre\)\{0,1\}Depends: \([^ <]*\).*/\2/p' | sort -u); do
            d="${d%%:*}"
            [ -z "${seen[$d]+x}" ] || continue
            case "$d" in lib*[0-9] | lib*[0-9]t64 | zlib1g) level+=("$d") ;; esac
        done
    done
    printf '%s\n' "${!seen[@]}" | LC_ALL=C sort >"$list.new"
    mv "$list.new" "$list"
fi

# The packages not cached yet, in one download.
missing=()
for p in $(cat "$list"); do
    ls "$dir/${p}_"*.deb >/dev/null 2>&1 || missing+=("$p:$debarch")
done
if [ ${#missing[@]} -gt 0 ]; then
    (cd "$dir" && apt-get download -qq "${missing[@]}" >/dev/null 2>"$dir/download.err") || {
        cat "$dir/download.err" >&2
        die "download failed: ${missing[*]} through apt"
    }
fi
xdirs=()
for p in $(cat "$list"); do
    deb=$(ls "$dir/${p}_"*.deb | tail -1)
    x="$dir/x/$(basename "$deb" .deb)"
    if [ ! -e "$x/.extracted" ]; then
        rm -rf "$x" && mkdir -p "$x"
        dpkg-deb -x "$deb" "$x"
        touch "$x/.extracted"
    fi
    xdirs+=("$x")
done

# find_in REL: the first extracted package holding REL.
find_in() {
    local x
    for x in "${xdirs[@]}"; do
        if [ -e "$x/$1" ]; then echo "$x/$1" && return 0; fi
    done
    return 1
}

declare -A copied=()
# put REL: REL into ROOT (the file, not a link), then what it needs.
put() {
    local rel="$1" src so lib
    [ -z "${copied[$rel]+x}" ] || return 0
    copied[$rel]=1
    src=$(find_in "$rel") || die "no $rel in ${pkgs[*]} or their libraries"
    mkdir -p "$root/$(dirname "$rel")"
    cp -L "$src" "$root/$rel"
    for so in $(readelf -dW "$src" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
        lib=
        for d in "lib/$multiarch" "usr/lib/$multiarch"; do
            if find_in "$d/$so" >/dev/null; then lib="$d/$so" && break; fi
        done
        [ -n "$lib" ] || die "$rel needs $so, in none of the packages ($list)"
        put "$lib"
    done
}

for f in "$@"; do
    put "$f"
    interp=$(readelf -lW "$(find_in "$f")" | sed -n 's/.*interpreter: \(.*\)]/\1/p')
    if [ -n "$interp" ]; then
        src=$(find_in "lib/$multiarch/$(basename "$interp")") || die "no loader $interp"
        mkdir -p "$root$(dirname "$interp")"
        cp -L "$src" "$root$interp"
    fi
done
mkdir -p "$root/vm"
echo "$multiarch" >"$root/vm/multiarch"
