#!/usr/bin/env python3
"""Resolves kernel modules to load, dependencies first, from a kernel
package's module tree (no depmod needed: Debian's package ships no
modules.dep, depmod writes it at install). Reads each module's `depends=`
from its ELF .modinfo section, for any architecture's modules.

usage: kmods.py MODDIR NAME...
  MODDIR: lib/modules/VERSION of the extracted package
  prints the load order, one path relative to MODDIR a line; a name that is
  built into the kernel (modules.builtin) is skipped; an unknown name fails.
"""
import os
import struct
import sys


def modinfo_depends(path):
    """The names in the module's depends= entry (ELF32/64, little endian)."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise SystemExit(f"kmods: {path} is not an ELF module (compressed?)")
    is64 = data[4] == 2
    if is64:
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    else:
        shoff, = struct.unpack_from("<I", data, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)

    def section(i):
        base = shoff + i * shentsize
        if is64:
            name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", data, base)
        else:
            name, _, _, _, off, size = struct.unpack_from("<IIIIII", data, base)
        return name, off, size

    _, stroff, _ = section(shstrndx)
    for i in range(shnum):
        name, off, size = section(i)
        end = data.index(b"\0", stroff + name)
        if data[stroff + name:end] == b".modinfo":
            for entry in data[off:off + size].split(b"\0"):
                if entry.startswith(b"depends="):
                    deps = entry[len(b"depends="):].decode()
                    return [d for d in deps.split(",") if d]
            return []
    return []


def norm(name):
    return name.replace("-", "_")


def main():
    moddir, names = sys.argv[1], sys.argv[2:]
    paths = {}
    for root, _, files in os.walk(os.path.join(moddir, "kernel")):
        for f in files:
            if f.endswith(".ko"):
                paths[norm(f[:-3])] = os.path.relpath(os.path.join(root, f), moddir)
    builtin = set()
    bfile = os.path.join(moddir, "modules.builtin")
    if os.path.exists(bfile):
        for line in open(bfile):
            builtin.add(norm(os.path.basename(line.strip())[:-3]))
    order, done = [], set()

    def visit(name, chain):
        n = norm(name)
        if n in done:
            return
        if n not in paths:
            if n in builtin:
                done.add(n)
                return
            raise SystemExit(f"kmods: no module {name} in {moddir} (needed by {' <- '.join(chain) or 'the scenario'})")
        if n in chain:
            raise SystemExit(f"kmods: dependency cycle at {name}")
        for d in modinfo_depends(os.path.join(moddir, paths[n])):
            visit(d, chain + [n])
        done.add(n)
        order.append(paths[n])

    for name in names:
        visit(name, [])
    print("\n".join(order))


if __name__ == "__main__":
    main()
