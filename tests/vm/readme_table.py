#!/usr/bin/env python3
"""The "Tested kernels" table from the VM stage's results
(target/vm-results.tsv: target, kernel release, package version, scenario,
pass|fail, seconds, retry note: empty, or why its first run failed).
Every retried scenario is named in the Result column, passed or not.

usage: readme_table.py RESULTS.tsv            prints the table (markdown)
       readme_table.py RESULTS.tsv README.md  replaces README's table
                                              between its two markers
"""
import collections
import sys

BEGIN = "<!-- tested-kernels:begin (scripts/test-vm.sh --readme) -->"
END = "<!-- tested-kernels:end -->"
ARCH = {"x86_64": "x86_64", "x86_64-rt": "x86_64 (PREEMPT_RT)",
        "aarch64": "aarch64 (cortex-a57)", "armv7": "armv7 (cortex-a15)"}


def table(path):
    rows = collections.OrderedDict()
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) < 6:
            continue
        target, kver, pver, scenario, res, _ = f[:6]
        note = f[6] if len(f) > 6 else ""
        r = rows.setdefault(target, {"kver": kver, "pver": pver, "pass": [], "fail": [], "notes": []})
        r[res if res in ("pass", "fail") else "fail"].append(scenario)
        if note:
            r["notes"].append(f"{scenario} {note}")
    out = ["| Kernel (Debian package) | Arch under qemu TCG | What ran | Result |",
           "|---|---|---|---|"]
    for target, r in rows.items():
        ran = ", ".join(sorted(r["pass"] + r["fail"]))
        res = "pass" if not r["fail"] else "FAIL: " + ", ".join(sorted(r["fail"]))
        if r["notes"]:
            res += "; " + "; ".join(sorted(r["notes"]))
        out.append(f"| {r['kver']} ({r['pver']}) | {ARCH.get(target, target)} | {ran} | {res} |")
    return "\n".join(out) + "\n"


def main():
    t = table(sys.argv[1])
    if len(sys.argv) < 3:
        sys.stdout.write(t)
        return
    readme = open(sys.argv[2]).read()
    if BEGIN not in readme or END not in readme:
        sys.exit(f"readme_table: {sys.argv[2]} has no {BEGIN} ... {END} markers")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    open(sys.argv[2], "w").write(head + BEGIN + "\n" + t + END + tail)
    print(f"readme_table: updated {sys.argv[2]}")


if __name__ == "__main__":
    main()
