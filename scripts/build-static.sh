#!/usr/bin/env bash
# Builds a fully static release tracebox for one target:
#   scripts/build-static.sh TARGET      -> dist/tracebox-TARGET (printed as "built: PATH")
# TARGET: x86_64-unknown-linux-musl, i686-unknown-linux-musl,
#         aarch64-unknown-linux-musl, armv7-unknown-linux-gnueabihf,
#         armv7-unknown-linux-musleabihf (falls back to gnueabihf when rustup
#         serves no armv7 musl std; see cross/README.md).
# Installs what it needs (rustup target, Debian's gcc for the target: libzstd
# is C, see cross/config.toml), checks the result is static (no PT_INTERP, no
# DT_NEEDED), that the C code asks libc for nothing musl lacks, and prints
# its size.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${1:?usage: scripts/build-static.sh TARGET}"
built_as="$target"

have_target() { rustup target list --installed | grep -qx "$1"; }
add_target() { have_target "$1" || rustup target add "$1" >/dev/null 2>&1; have_target "$1"; }

apt_install() {
    local missing=()
    for pkg in "$@"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    # A mirror mid-sync fails some index (e.g. a foreign architecture's)
    # while the rest is fine; the install below says if ours is missing.
    apt-get update -qq || echo "build-static: apt-get update reported errors; trying the install anyway" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

case "$target" in
x86_64-unknown-linux-musl | i686-unknown-linux-musl | aarch64-unknown-linux-musl)
    add_target "$target" || { echo "build-static: rustup cannot add $target" >&2; exit 1; }
    ;;
armv7-unknown-linux-musleabihf)
    if ! add_target "$target"; then
        echo "build-static: no $target std from rustup here; building armv7-unknown-linux-gnueabihf with +crt-static" >&2
        built_as=armv7-unknown-linux-gnueabihf
    fi
    ;;
armv7-unknown-linux-gnueabihf) ;;
*)
    echo "build-static: unsupported target $target" >&2
    exit 2
    ;;
esac
if [ "$built_as" = armv7-unknown-linux-gnueabihf ]; then
    add_target "$built_as" || { echo "build-static: rustup cannot add $built_as" >&2; exit 1; }
fi
# The C compiler cross/config.toml names for the target (libzstd).
case "$built_as" in
x86_64-*) cross=x86_64-linux-gnu; apt_install gcc libc6-dev ;;
i686-*) cross=i686-linux-gnu; apt_install gcc-i686-linux-gnu libc6-dev-i386-cross ;;
aarch64-*) cross=aarch64-linux-gnu; apt_install gcc-aarch64-linux-gnu libc6-dev-arm64-cross ;;
armv7-*) cross=arm-linux-gnueabihf; apt_install gcc-arm-linux-gnueabihf libc6-dev-armhf-cross ;;
esac
command -v file >/dev/null || apt_install file

cargo build --locked --release --config cross/config.toml --target "$built_as" --bin tracebox
# libzstd was compiled against glibc's headers: what it leaves undefined
# must be plain C library calls musl has (no __*_chk fortify wrappers, no
# glibc internals), or the compiler's own helpers that Rust's
# compiler_builtins provides, or the GOT the linker makes for PIC code.
zstd_a=$(ls -t "${CARGO_TARGET_DIR:-target}/$built_as"/release/build/zstd-sys-*/out/libzstd.a | head -1)
# (Weak references, "w": libzstd's optional tracing hooks, stay null.)
extra=$("$cross-nm" -u "$zstd_a" 2>/dev/null | awk 'NF == 2 && $1 == "U" {print $2}' | sort -u |
    grep -vxE 'memcpy|memmove|memset|malloc|calloc|free|_GLOBAL_OFFSET_TABLE_|__aeabi_[a-z0-9]+|__(u?(div|mod)di3|popcount[sd]i2)' || true)
defined=$("$cross-nm" --defined-only "$zstd_a" | awk 'NF == 3 {print $3}' | sort -u)
extra=$(comm -23 <(printf '%s\n' "$extra" | sed '/^$/d') <(printf '%s\n' "$defined"))
if [ -n "$extra" ]; then
    echo "build-static: libzstd needs symbols musl may lack: $extra" >&2
    exit 1
fi

mkdir -p dist
out="dist/tracebox-$built_as"
cp "${CARGO_TARGET_DIR:-target}/$built_as/release/tracebox" "$out"

# Static means: no program interpreter and no shared library dependencies.
if readelf -lW "$out" | grep -q 'INTERP'; then
    echo "build-static: $out has a PT_INTERP (dynamic)" >&2
    exit 1
fi
if readelf -dW "$out" | grep -q '(NEEDED)'; then
    echo "build-static: $out needs shared libraries:" >&2
    readelf -dW "$out" | grep '(NEEDED)' >&2
    exit 1
fi
file "$out"
if file "$out" | grep -q 'dynamically linked'; then
    echo "build-static: file(1) says $out is dynamic" >&2
    exit 1
fi
echo "$out: $(stat -c %s "$out") bytes (stripped)"
echo "built: $out"
