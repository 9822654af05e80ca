#!/usr/bin/env bash
# Per-target programs the VM scenarios use, into the image root:
#   tests/vm/extra.sh TARGET RUST_TARGET DESTROOT CACHE
# /vm/bin/hot: tests/data/perf/hot.c (the traced_perf tests' load), static,
# with symbols and frame pointers in every function, so the guest's
# traced_perf unwinds and names it on the device. 32-bit ARM: ARM (not
# Thumb) code with APCS frames, the layout the kernel's arm user unwinder
# walks. aarch64: gcc omits leaf functions' frame records by default.
# /vm/bin/deep (x86_64, aarch64): tests/data/perf/deep.c and deep_lib.c in
# one static program built -O2 -fomit-frame-pointer, so only .eh_frame
# knows its frames (the DWARF scenario); /vm/bin/deep_dyn: the same with
# deep_lib.c as /vm/lib/libdeep.so, and the C library it runs on (the
# cross toolchain's, or this host's) with its loader, also in /vm/lib.
# /vm/bin/deep_clang (x86_64, aarch64): /vm/bin/deep built by Debian's
# clang; aarch64 also /vm/bin/deep_clang_dyn, deep_dyn built by clang on
# /vm/lib/clang/libdeep.so, and Debian's perf (tests/vm/guest-debs.sh).
# The hostile targets (aarch64): /vm/lib/libdeep_copy.so (the library
# `deep_dyn hostile` maps and unmaps between rounds) and /vm/bin/deep_bad,
# deep_dyn on /vm/bad/libdeep.so, whose .eh_frame is scrambled.
set -euo pipefail
t="$1" dest="$3" cache="$4"
case "$t" in
x86_64 | x86_64-rt) cc=gcc pkgs=(gcc libc6-dev) flags=() ;;
aarch64) cc=aarch64-linux-gnu-gcc pkgs=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross) flags=(-mno-omit-leaf-frame-pointer) ;;
armv7) cc=arm-linux-gnueabihf-gcc pkgs=(gcc-arm-linux-gnueabihf libc6-dev-armhf-cross) flags=(-marm -mapcs-frame) ;;
*) echo "extra: unknown target $t" >&2; exit 2 ;;
esac
if ! command -v "$cc" >/dev/null; then
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
mkdir -p "$dest/vm/bin"
"$cc" -O0 -fno-omit-frame-pointer "${flags[@]}" -static -pthread -o "$dest/vm/bin/hot" tests/data/perf/hot.c
case "$t" in
x86_64 | x86_64-rt | aarch64)
    "$cc" -O2 -fomit-frame-pointer -g0 -static -o "$dest/vm/bin/deep" \
        tests/data/perf/deep.c tests/data/perf/deep_lib.c -ldl 2>"$dest/deep.warn" || {
        cat "$dest/deep.warn" >&2
        exit 1
    }
    rm -f "$dest/deep.warn"
    mkdir -p "$dest/vm/lib"
    "$cc" -O2 -fomit-frame-pointer -g0 -fPIC -shared -o "$dest/vm/lib/libdeep.so" tests/data/perf/deep_lib.c
    # Its loader under /vm/lib too, not at the usual path: a package put
    # into the image (the benchmarks' trace-cmd) brings its own libc.
    libc_dir=$(dirname "$("$cc" -print-file-name=libc.so.6)")
    ld_so=$(cd "$libc_dir" && ls ld-linux*.so.*)
    cp -L "$libc_dir/$ld_so" "$libc_dir/libc.so.6" "$dest/vm/lib/"
    "$cc" -O2 -fomit-frame-pointer -g0 -o "$dest/vm/bin/deep_dyn" tests/data/perf/deep.c \
        -L"$dest/vm/lib" -Wl,-rpath,/vm/lib -Wl,--dynamic-linker=/vm/lib/"$ld_so" -ldeep -ldl
    ;;
esac
if [ "$t" = aarch64 ]; then
    cp "$dest/vm/lib/libdeep.so" "$dest/vm/lib/libdeep_copy.so"
    mkdir -p "$dest/vm/bad"
    cp "$dest/vm/lib/libdeep.so" "$dest/vm/bad/libdeep.so"
    # Every byte of .eh_frame overwritten (the same pattern each build).
    "${TRACEBOX_PYTHON:-python3}" - "$dest/vm/bad/libdeep.so" <<'PY'
import struct, sys
path = sys.argv[1]
b = bytearray(open(path, "rb").read())
shoff, = struct.unpack_from("<Q", b, 40)
shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 58)
def sh(i):
    return struct.unpack_from("<IIQQQQ", b, shoff + i * shentsize)
names_off = sh(shstrndx)[4]
for i in range(shnum):
    name, _, _, _, off, size = sh(i)
    end = b.index(0, names_off + name)
    if b[names_off + name:end] == b".eh_frame":
        for j in range(size):
            b[off + j] = (j * 37 & 0xff) ^ 0xa5
        break
else:
    sys.exit("no .eh_frame in " + path)
open(path, "wb").write(b)
PY
    "$cc" -O2 -fomit-frame-pointer -g0 -o "$dest/vm/bin/deep_bad" tests/data/perf/deep.c \
        -L"$dest/vm/bad" -Wl,-rpath,/vm/bad:/vm/lib -Wl,--dynamic-linker=/vm/lib/"$ld_so" -ldeep -ldl
fi
case "$t" in
x86_64 | x86_64-rt | aarch64)
    if ! command -v clang >/dev/null; then
        apt-get update -qq || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends clang >/dev/null
    fi
    # aarch64: Debian's clang with the cross gcc's sysroot and linker.
    clang=(clang)
    [ "$t" != aarch64 ] || clang=(clang --target=aarch64-linux-gnu)
    "${clang[@]}" -O2 -fomit-frame-pointer -g0 -static -o "$dest/vm/bin/deep_clang" \
        tests/data/perf/deep.c tests/data/perf/deep_lib.c -ldl 2>"$dest/deep.warn" || {
        cat "$dest/deep.warn" >&2
        exit 1
    }
    rm -f "$dest/deep.warn"
    ;;
esac
if [ "$t" = aarch64 ]; then
    mkdir -p "$dest/vm/lib/clang"
    "${clang[@]}" -O2 -fomit-frame-pointer -g0 -fPIC -shared -o "$dest/vm/lib/clang/libdeep.so" \
        tests/data/perf/deep_lib.c
    "${clang[@]}" -O2 -fomit-frame-pointer -g0 -o "$dest/vm/bin/deep_clang_dyn" tests/data/perf/deep.c \
        -L"$dest/vm/lib/clang" -Wl,-rpath,/vm/lib/clang:/vm/lib -Wl,--dynamic-linker=/vm/lib/"$ld_so" -ldeep -ldl
    # Debian's perf of the guest's kernel version, for 45-perf-dwarf's
    # comparison with `perf record --call-graph dwarf`.
    tests/vm/guest-debs.sh arm64 "$cache" "$dest" linux-perf -- usr/bin/perf
fi
