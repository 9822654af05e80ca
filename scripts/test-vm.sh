#!/usr/bin/env bash
# The VM stage: boots Debian's real kernels under qemu-system (TCG) with a
# BusyBox initramfs holding our static binary, the init script that
# `scripts/install.sh --init busybox` installs, and tests/vm/; runs the
# guest scenarios of tests/vm/scenarios there and checks what they wrote
# on this host with Perfetto's descriptors. See tests/vm/README.md.
#
#   scripts/test-vm.sh [x86_64|x86_64-rt|aarch64|armv7|all]...   (default all)
#
# Environment: TRACEBOX_VM_CACHE (default target/vm-cache: the kernel and
# busybox packages, fetched through apt once), TRACEBOX_VM_ONLY="a b" (run
# only these scenarios), TRACEBOX_VM_KEEP=1 (keep target/vm/ work dirs;
# they are kept anyway on failure or retry), TRACEBOX_VM_SCENARIOS (another
# scenario directory; default tests/vm/scenarios), TRACEBOX_VM_IMAGE_EXTRA
# (a command run as CMD TARGET IMAGE_ROOT CACHE that adds files to the
# image), TRACEBOX_VM_MEM_MB (guest memory, default 512), TRACEBOX_VM_RETRY_UNTIL
# (default 1200: seconds into the stage after which a failed scenario is
# no longer retried).
#
# A failed scenario gets exactly one retry on a fresh boot (TCG on a
# loaded host stalls daemons now and then); the summary and the README
# table name every retry, and a scenario that fails twice fails the stage.
# Writes target/vm-results.tsv and target/vm-results.md (README's "Tested
# kernels" table: scripts/test-vm.sh --readme copies it in).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
stage_start=$(date +%s)

if [ "${1:-}" = --readme ]; then
    exec "${TRACEBOX_PYTHON:-python3}" tests/vm/readme_table.py target/vm-results.tsv README.md
fi

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(all)
[ "${targets[*]}" != all ] || targets=(x86_64 x86_64-rt aarch64 armv7)

cache="${TRACEBOX_VM_CACHE:-$repo/target/vm-cache}"
# Another scenario directory (the benchmarks': scripts/bench/vm-*.sh), with
# its own extra image files; its results stay out of README's table.
scen="${TRACEBOX_VM_SCENARIOS:-tests/vm/scenarios}"
scen_extra="${TRACEBOX_VM_IMAGE_EXTRA:-}"
mem_mb="${TRACEBOX_VM_MEM_MB:-512}"
work="$repo/target/vm"
mkdir -p "$cache/debs" "$work"

say() { echo "test-vm: $*"; }
die() { echo "test-vm: $*" >&2; exit 1; }

# What each target boots: Debian architecture, kernel metapackage, static
# build target, qemu and its machine, the console device.
target_facts() {
    case "$1" in
    x86_64) debarch=amd64 meta=linux-image-amd64 rust=x86_64-unknown-linux-musl
        qemu=qemu-system-x86_64 machine=(-M q35) console=ttyS0 ;;
    x86_64-rt) debarch=amd64 meta=linux-image-rt-amd64 rust=x86_64-unknown-linux-musl
        qemu=qemu-system-x86_64 machine=(-M q35) console=ttyS0 ;;
    aarch64) debarch=arm64 meta=linux-image-arm64 rust=aarch64-unknown-linux-musl
        qemu=qemu-system-aarch64 machine=(-M virt -cpu cortex-a57) console=ttyAMA0 ;;
    # armmp has no LPAE: keep PCI's windows below 4 GB.
    armv7) debarch=armhf meta=linux-image-armmp rust=armv7-unknown-linux-musleabihf
        qemu=qemu-system-arm machine=(-M virt,highmem=off -cpu cortex-a15) console=ttyAMA0 ;;
    *) die "unknown target $1 (x86_64, x86_64-rt, aarch64, armv7, all)" ;;
    esac
}

# qemu itself (without recommends: on some hosts those pull held packages).
need_qemu() {
    local pkgs=()
    command -v qemu-system-x86_64 >/dev/null || pkgs+=(qemu-system-x86)
    { command -v qemu-system-aarch64 >/dev/null && command -v qemu-system-arm >/dev/null; } || pkgs+=(qemu-system-arm)
    command -v cpio >/dev/null || pkgs+=(cpio)
    [ ${#pkgs[@]} -eq 0 ] && return 0
    say "installing ${pkgs[*]}"
    apt-get update -qq || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null ||
        die "could not install ${pkgs[*]} through apt"
}

apt_updated=
apt_update_once() {
    [ -n "$apt_updated" ] && return 0
    apt_updated=1
    # A mirror mid-sync fails some index (non-zero) while the rest is fine:
    # whether what we need resolved is checked by the caller.
    apt-get update -qq >/dev/null 2>&1 || say "(apt-get update reported errors; continuing with the indexes it has)"
}

# The versioned package a metapackage depends on, e.g. linux-image-6.1.0-56-amd64.
resolve_meta() {
    apt-cache depends "$1" 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[^ <>:]*\).*$/\1/p' | head -1
}

# fetch_deb PKG[:ARCH] -> prints the cached .deb path (downloads it once).
fetch_deb() {
    local pkg="$1" ver dir
    ver=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
    if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then
        apt_update_once
        ver=$(apt-cache policy "$pkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
    fi
    [ -n "$ver" ] && [ "$ver" != "(none)" ] || return 1
    dir="$cache/debs/${pkg/:/_}/${ver//:/%3a}"
    if ! ls "$dir"/*.deb >/dev/null 2>&1; then
        mkdir -p "$dir"
        (cd "$dir" && apt-get download -qq "$pkg=$ver" >/dev/null 2>"$dir/download.err") || {
            cat "$dir/download.err" >&2
            return 1
        }
    fi
    ls "$dir"/*.deb | head -1
}

# Kernel and busybox of one target, extracted under $cache/root/: sets
# kdir (the extracted kernel package), kver, vmlinuz, busybox.
fetch_target() {
    local t="$1" arch_suffix="" kpkg deb bdeb
    [ "$debarch" = amd64 ] || arch_suffix=":$debarch"
    # Not `dpkg ... | grep -q`: under pipefail grep's early exit fails dpkg.
    if [ "$debarch" != amd64 ] && [[ " $(dpkg --print-foreign-architectures | tr '\n' ' ') " != *" $debarch "* ]]; then
        dpkg --add-architecture "$debarch"
        apt_updated=
        apt_update_once
    fi
    kpkg=$(resolve_meta "$meta$arch_suffix")
    if [ -z "$kpkg" ]; then
        apt_update_once
        kpkg=$(resolve_meta "$meta$arch_suffix")
    fi
    [ -n "$kpkg" ] || die "$t: download failed: apt resolves no kernel for $meta$arch_suffix"
    deb=$(fetch_deb "$kpkg$arch_suffix") || die "$t: download failed: $kpkg$arch_suffix through apt"
    bdeb=$(fetch_deb "busybox-static:$debarch") || die "$t: download failed: busybox-static:$debarch through apt"
    kdir="$cache/root/$(basename "$deb" .deb)"
    if [ ! -e "$kdir/.extracted" ]; then
        rm -rf "$kdir"
        mkdir -p "$kdir"
        dpkg-deb -x "$deb" "$kdir"
        touch "$kdir/.extracted"
    fi
    kver=$(ls "$kdir/lib/modules")
    vmlinuz="$kdir/boot/vmlinuz-$kver"
    local bdir
    bdir="$cache/root/$(basename "$bdeb" .deb)"
    if [ ! -e "$bdir/.extracted" ]; then
        rm -rf "$bdir"
        mkdir -p "$bdir"
        dpkg-deb -x "$bdeb" "$bdir"
        touch "$bdir/.extracted"
    fi
    busybox="$bdir/bin/busybox"
    [ -f "$vmlinuz" ] && [ -f "$busybox" ] || die "$t: the packages hold no $vmlinuz or $busybox"
}

# A scenario's header value: header FILE KEY.
header() { sed -n "s/^# $2: *//p" "$1" | head -1; }

scenario_targets_ok() {
    local want
    want=$(header "$1" targets)
    [ -z "$want" ] && return 0
    [[ " $want " == *" $2 "* ]]
}

# The target's scenarios in lexical order (TRACEBOX_VM_ONLY applied).
plan_scenarios() {
    local t="$1" f name
    planned=()
    for f in "$scen"/*.sh; do
        name=$(basename "$f" .sh)
        [[ "$name" == *.host ]] && continue
        if [ -n "${TRACEBOX_VM_ONLY:-}" ] && [[ " $TRACEBOX_VM_ONLY " != *" $name "* ]]; then continue; fi
        scenario_targets_ok "$f" "$t" || continue
        planned+=("$name")
    done
}

base_modules=(virtio_pci 9pnet_virtio 9p virtio_net)

# build_initramfs TARGET -> $work/TARGET/initramfs.cpio.gz
build_initramfs() {
    local t="$1" root="$work/$t/root" f name mods
    rm -rf "$root"
    mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc/init.d,proc,sys,dev,tmp,run,var/log,vm,lib/modules}
    cp "$busybox" "$root/bin/busybox"
    ln -s busybox "$root/bin/sh"
    DESTDIR="$root" sh scripts/install.sh --init busybox /usr "$bin" >/dev/null
    cp tests/vm/guest/init "$root/init"
    cp tests/vm/guest/inittab "$root/etc/inittab"
    cp tests/vm/guest/rcS tests/vm/guest/rcK "$root/etc/init.d/"
    cp tests/vm/guest/runner tests/vm/guest/lib.sh "$root/vm/"
    echo "root:x:0:0:root:/root:/bin/sh" >"$root/etc/passwd"
    echo "root:x:0:" >"$root/etc/group"
    mkdir -p "$root/vm/scenarios"
    cp -r "$scen"/. "$root/vm/scenarios/"
    rm -f "$root"/vm/scenarios/*.py "$root"/vm/scenarios/*.host.sh
    [ ! -d "$work/$t/extra" ] || cp -r "$work/$t/extra/." "$root/"
    # shellcheck disable=SC2086 # a command with its arguments
    [ -z "$scen_extra" ] || $scen_extra "$t" "$root" "$cache" || die "$t: $scen_extra failed"
    # Modules: the boot's own, and each scenario's, from the same package.
    local moddir="$kdir/lib/modules/$kver" all=()
    "$py" tests/vm/kmods.py "$moddir" "${base_modules[@]}" >"$root/vm/modules.boot"
    all+=($(cat "$root/vm/modules.boot"))
    for f in "$scen"/*.sh; do
        name=$(basename "$f" .sh)
        mods=$(header "$f" modules)
        [ -n "$mods" ] || continue
        scenario_targets_ok "$f" "$t" || continue
        # shellcheck disable=SC2086
        "$py" tests/vm/kmods.py "$moddir" $mods >"$root/vm/modules.$name" ||
            die "$t: modules of $name: $mods"
        all+=($(cat "$root/vm/modules.$name"))
    done
    for ko in $(printf '%s\n' "${all[@]}" | sort -u); do
        mkdir -p "$root/lib/modules/$kver/$(dirname "$ko")"
        cp "$moddir/$ko" "$root/lib/modules/$kver/$ko"
    done
    # Owner root in the archive without being root here (cpio -R).
    (cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
        gzip -1 >"$work/$t/initramfs.cpio.gz"
}

# A free TCP port on the host's loopback, for the guest's relay forward.
free_port() {
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

results_tsv="$repo/target/vm-results.tsv"
failures=0
summary=()
retries=()
retry_until="${TRACEBOX_VM_RETRY_UNTIL:-1200}"
# Seconds from qemu's start to the first scenario's start (a boot takes
# ~25 s under TCG, up to ~60 s on a loaded host).
start_bound="${TRACEBOX_VM_START_BOUND:-240}"

# Each scenario's verdict of its latest run (boot sets them).
declare -A res_of why_of secs_of

# verdict SCENARIO PASS|FAIL SECONDS [WHY]
verdict() {
    res_of[$1]="$2" secs_of[$1]="$3" why_of[$1]="${4:-}"
}

# record TARGET SCENARIO PASS|FAIL SECONDS RETRY_NOTE
record() {
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$kver" "$kpkg_ver" "$2" "$3" "$4" "$5" >>"$run_tsv"
    [ "$3" = pass ] || failures=$((failures + 1))
}

# run_boots TARGET PREFIX SCENARIO...: the shared boot (named PREFIXshared)
# for those that can share one, then an own boot for each of the others.
run_boots() {
    local t="$1" prefix="$2" f name
    shift 2
    local shared=() own=()
    for name in "$@"; do
        f="$scen/$name.sh"
        if [ -n "$(header "$f" cmdline)" ] || [ "$(header "$f" boot)" = own ] ||
            [ -e "$scen/$name.host.sh" ]; then
            own+=("$name")
        else
            shared+=("$name")
        fi
    done
    if [ ${#shared[@]} -gt 0 ]; then
        boot "$t" "${prefix}shared" "" "${shared[@]}"
    fi
    for name in "${own[@]}"; do
        boot "$t" "$prefix$name" "$(header "$scen/$name.sh" cmdline)" "$name"
    done
}

# boot TARGET BOOTNAME CMDLINE_EXTRA SCENARIO...
boot() {
    local t="$1" bname="$2" extra="$3"
    shift 3
    local dir="$work/$t/$bname" share name hook bound=90 s rc
    rm -rf "$dir"
    share="$dir/share"
    mkdir -p "$share/out"
    printf '%s\n' "$@" >"$share/plan"
    echo "$t" >"$share/arch"
    for name in "$@"; do
        s=$(header "$scen/$name.sh" timeout)
        bound=$((bound + ${s:-120}))
    done
    export VM_RELAY_PORT QEMU_PID_FILE="$dir/qemu.pid" TRACEBOX_HOST="$host_bin"
    VM_RELAY_PORT=$(free_port)
    for name in "$@"; do
        hook="$scen/$name.host.sh"
        [ -e "$hook" ] || continue
        mkdir -p "$dir/host-$name"
        bash "$hook" before "$dir/host-$name" || {
            say "$t: $name: host hook 'before' failed"
            verdict "$name" fail 0 "host hook 'before' failed"
            return 0
        }
    done
    # Only this host's loopback is reachable: restrict=on, and one forward
    # of 10.0.2.100:20001 to 127.0.0.1:$VM_RELAY_PORT, a new connection per
    # guest connection.
    local netdev="user,id=n0,restrict=on"
    netdev+=",guestfwd=tcp:10.0.2.100:20001-cmd:$py $repo/tests/vm/fwd.py $VM_RELAY_PORT"
    local started
    started=$(date +%s)
    say "$t: boot $bname ($*) bound ${bound}s"
    # A frozen guest is stopped soon, not at the boot's whole bound, so its
    # retry still fits CI's time: one that starts no scenario within the
    # start bound (seen: an rt guest stuck after its init script started
    # traced), or whose scenario outlives its own bound by a minute (the
    # guest's timeout never fired: seen, an x86_64 guest kernel in an RCU
    # stall, int3 loop at a text-poke site, while kprobes were removed).
    (declare -A since
        t0=$(date +%s)
        while sleep 5; do
            now=$(date +%s)
            if ! compgen -G "$share/out/*.log" >/dev/null; then
                [ $((now - t0)) -ge "$start_bound" ] || continue
                touch "$dir/stuck"
                kill -TERM "$(cat "$dir/qemu.pid" 2>/dev/null)" 2>/dev/null
                exit 0
            fi
            for name in "$@"; do
                [ -e "$share/out/$name.log" ] && [ ! -e "$share/out/$name.rc" ] || continue
                : "${since[$name]:=$now}"
                s=$(header "$scen/$name.sh" timeout)
                if [ $((now - since[$name])) -gt $((${s:-120} + 60)) ]; then
                    echo "$name" >"$dir/frozen"
                    kill -TERM "$(cat "$dir/qemu.pid" 2>/dev/null)" 2>/dev/null
                    exit 0
                fi
            done
        done) &
    local watchdog=$!
    set +e
    # In a subshell that exits with qemu's status: a guest killed on purpose
    # (a host hook's SIGKILL) is no job-control message on our stderr
    # (qemu's own stderr is in qemu.log).
    (timeout -k 5 "$bound" "$qemu" -accel tcg "${machine[@]}" -smp 2 -m "$mem_mb" \
        -kernel "$vmlinuz" -initrd "$work/$t/initramfs.cpio.gz" \
        -append "console=$console panic=-1 loglevel=5 $extra" \
        -display none -monitor none -serial "file:$dir/console.log" -no-reboot \
        -pidfile "$dir/qemu.pid" \
        -fsdev "local,id=fs0,path=$share,security_model=none" \
        -device "virtio-9p-pci,fsdev=fs0,mount_tag=vmshare" \
        -netdev "$netdev" -device virtio-net-pci,netdev=n0 \
        </dev/null >"$dir/qemu.log" 2>&1
    exit $?) 2>/dev/null
    rc=$?
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
    set -e
    local took=$(($(date +%s) - started))
    [ ! -e "$dir/stuck" ] || say "$t: boot $bname started no scenario within ${start_bound}s: stopped"
    [ ! -e "$dir/frozen" ] ||
        say "$t: boot $bname: $(cat "$dir/frozen") outlived its bound by a minute (the guest froze): stopped"
    for name in "$@"; do
        hook="$scen/$name.host.sh"
        [ -e "$hook" ] || continue
        bash "$hook" after "$dir/host-$name" >"$dir/host-$name.after.log" 2>&1 || {
            say "$t: $name: host hook 'after' failed:"
            tail -n 25 "$dir/host-$name.after.log" | sed 's/^/    /'
            touch "$dir/host-$name.after-failed"
        }
    done
    local unfinished=0
    for name in "$@"; do [ -e "$share/out/$name.rc" ] || unfinished=1; done
    if [ ! -e "$share/out/complete" ] && [ $unfinished = 0 ]; then
        say "$t: boot $bname: qemu ended (exit $rc after ${took}s) after every scenario reported (a host hook's kill)"
    elif [ ! -e "$share/out/complete" ]; then
        say "$t: boot $bname did not complete (qemu exit $rc after ${took}s); console tail:"
        tail -n 40 "$dir/console.log" | sed 's/^/    /'
        [ ! -s "$dir/qemu.log" ] || sed 's/^/    qemu: /' "$dir/qemu.log"
    fi
    boot_seconds+=("$t/$bname ${took}s")
    for name in "$@"; do
        local out="$share/out/$name" res=pass why="" secs=0
        if [ -e "$out.time" ]; then
            secs=$(awk '{ printf "%d", $2 - $1 }' "$out.time")
        fi
        if [ ! -e "$out.rc" ]; then
            res=fail why="did not finish"
        elif [ "$(cat "$out.rc")" != 0 ]; then
            res=fail why="exit $(cat "$out.rc")"
            [ "$(cat "$out.rc")" != 137 ] || why="killed at its time bound"
        elif [ -e "$scen/$name.check.py" ]; then
            if ! PYTHONPATH="$repo/tests/vm:$repo/tests/py" "$py" "$scen/$name.check.py" \
                "$out" "$t" >"$out.check.log" 2>&1; then
                res=fail why="host check failed"
            fi
        fi
        if [ -e "$dir/host-$name.after-failed" ]; then
            res=fail why="host hook 'after' failed"
        fi
        verdict "$name" "$res" "$secs" "$why"
        if [ $res = pass ]; then
            say "$t: $name: pass (${secs}s)"
        else
            say "$t: $name: FAIL ($why); last lines:"
            # A scenario that never started has no log (pipefail would end the stage).
            [ ! -e "$out.log" ] || tail -n 25 "$out.log" | sed 's/^/    /'
            [ ! -e "$out.check.log" ] || tail -n 25 "$out.check.log" | sed 's/^/    check: /'
        fi
    done
}

need_qemu
scripts/setup-python.sh >/dev/null
py="$repo/.venv/bin/python"
cargo build --locked --bin tracebox >/dev/null 2>&1 || cargo build --locked --bin tracebox
host_bin="${CARGO_TARGET_DIR:-$repo/target}/debug/tracebox"
run_tsv="$work/results.tsv"
: >"$run_tsv"
boot_seconds=()

for t in "${targets[@]}"; do
    target_facts "$t"
    t_start=$(date +%s)
    fetch_target "$t"
    kpkg_ver=$(basename "$kdir" | cut -d_ -f2)
    say "$t: kernel $kver ($(basename "$kdir")), busybox $(basename "$(dirname "$(dirname "$busybox")")")"
    built=$(scripts/build-static.sh "$rust" 2>&1) || { printf '%s\n' "$built" >&2; die "$t: static build failed"; }
    bin="$repo/$(printf '%s\n' "$built" | sed -n 's/^built: //p')"
    [ -x "$bin" ] || die "$t: build-static named no binary"
    # Per-target programs the scenarios use (tests/vm/extra.sh), into the image.
    rm -rf "$work/$t/extra"
    mkdir -p "$work/$t/extra"
    if [ -x tests/vm/extra.sh ]; then
        tests/vm/extra.sh "$t" "$rust" "$work/$t/extra" "$cache" || die "$t: tests/vm/extra.sh failed"
    fi
    build_initramfs "$t"
    plan_scenarios "$t"
    res_of=() why_of=() secs_of=()
    run_boots "$t" "" "${planned[@]}"
    # One retry on a fresh boot for each failed scenario, while the stage
    # is inside its retry budget.
    failed=()
    declare -A first_why=()
    for name in "${planned[@]}"; do
        [ "${res_of[$name]:-}" = pass ] && continue
        first_why[$name]="${why_of[$name]:-did not run}"
        failed+=("$name")
    done
    if [ ${#failed[@]} -gt 0 ]; then
        if [ $(($(date +%s) - stage_start)) -lt "$retry_until" ]; then
            say "$t: RETRY on a fresh boot: ${failed[*]}"
            run_boots "$t" retry- "${failed[@]}"
        else
            say "$t: NO RETRY of ${failed[*]}: the stage is past its retry budget (${retry_until}s)"
            retry_skipped=1
        fi
    fi
    for name in "${planned[@]}"; do
        note=""
        if [ -n "${first_why[$name]+x}" ]; then
            if [ -n "${retry_skipped:-}" ]; then
                note="not retried: past the stage's retry budget"
            else
                note="retried (first run: ${first_why[$name]})"
                retries+=("$t/$name: ${res_of[$name]:-fail} on retry (first run: ${first_why[$name]}; retry: ${why_of[$name]:-ok})")
            fi
        fi
        record "$t" "$name" "${res_of[$name]:-fail}" "${secs_of[$name]:-0}" "$note"
    done
    retry_skipped=
    unset first_why
    summary+=("$t: wall time $(($(date +%s) - t_start))s (kernel $kver)")
done

# Results of targets not run now are kept from the last run that had them.
[ "$scen" = tests/vm/scenarios ] || results_tsv="$work/other-results.tsv"
touch "$results_tsv"
for t in "${targets[@]}"; do
    awk -F'\t' -v t="$t" '$1 != t' "$results_tsv" >"$results_tsv.new"
    mv "$results_tsv.new" "$results_tsv"
done
cat "$run_tsv" >>"$results_tsv"
[ "$scen" != tests/vm/scenarios ] || "$py" tests/vm/readme_table.py "$results_tsv" >"$repo/target/vm-results.md"

echo "test-vm: boots: ${boot_seconds[*]}"
for s in "${summary[@]}"; do echo "test-vm: $s"; done
for r in "${retries[@]}"; do echo "test-vm: RETRIED $r"; done
echo "test-vm: stage wall time $(($(date +%s) - stage_start))s; $(wc -l <"$run_tsv") scenarios, ${#retries[@]} retried, $failures failed"
[ "${TRACEBOX_VM_KEEP:-}" = 1 ] || [ $failures -gt 0 ] || [ ${#retries[@]} -gt 0 ] || rm -rf "$work"
[ $failures -eq 0 ]
