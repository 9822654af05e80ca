#!/usr/bin/env python3
"""UNWIND_DWARF in the guest on programs without frame pointers (one
static, one with the frames in a shared library): the samples of their
work reach main through every named frame, symbolised on the device, with
the work's 75/25 split (on x86_64 also a static one built by clang); the kernel's frame-pointer walk on the same
programs does not reach main; nothing lost; `tracebox report --profile`
in the guest shows the split and the whole chain."""
import vmcheck as v

CHAIN = ["main", "app_run", "app_step", "lib_entry", "lib_mid"]
LEAVES = ("leaf_three", "leaf_one")


def work_stacks(path, pid):
    """Name lists (root first) of PID's samples in deep's own work."""
    text = v.run_checker("check_perf_trace.py", path)
    errors = [ln for ln in text.splitlines() if ln.startswith("error ")]
    v.expect(not errors, f"{path}: decode errors: {errors[:3]}")
    samples = [ln.split(" ", 8) for ln in text.splitlines() if ln.startswith("sample ")]
    stacks = [s[8].split(";") for s in samples if len(s) == 9 and s[1] == pid]
    return [n for n in stacks if any(f in n for f in ("spin",) + LEAVES)]


def reaches_main(names):
    if "main" not in names:
        return False
    at = names.index("main")
    return names[at:at + len(CHAIN)] == CHAIN and len(names) > at + len(CHAIN) \
        and names[at + len(CHAIN)] in LEAVES


out, arch = v.args()
for name in ("dwarf", "kernel_fp"):
    v.load(f"{out}/{name}.pftrace")

progs = ["deep", "deep_dyn"]
if arch.startswith("x86_64"):
    progs.append("deep_clang")
for prog in progs:
    pid = open(f"{out}/{prog}.pid").read().strip()
    dwarf = work_stacks(f"{out}/dwarf.pftrace", pid)
    whole = [n for n in dwarf if reaches_main(n)]
    print(f"{prog} dwarf: {len(dwarf)} samples in its work, {len(whole)} reach main")
    if dwarf:
        print("  e.g.", " > ".join(dwarf[0]))
    v.expect(len(dwarf) >= 30, f"{prog}: {len(dwarf)} samples in its work, want >= 30")
    v.expect(len(whole) >= 0.95 * max(len(dwarf), 1),
             f"{prog}: only {len(whole)} of {len(dwarf)} DWARF stacks reach main through {CHAIN}; "
             f"others e.g. {[n for n in dwarf if not reaches_main(n)][:2]}")
    three = sum(1 for n in whole if "leaf_three" in n)
    share = 100.0 * three / max(len(whole), 1)
    # Seen in 4 runs (2026-11-28): 74.1-76.3 % on aarch64 (two programs),
    # 71.8-77.3 % on x86_64 (three sharing the 2 vCPUs, ~720 each).
    print(f"  leaf_three {share:.1f} % of {len(whole)} (want 75 +- 5)")
    v.expect(abs(share - 75.0) <= 5.0, f"{prog}: leaf_three has {share:.1f} % of the stacks, want 75 +- 5")

    fp = work_stacks(f"{out}/kernel_fp.pftrace", pid)
    fp_whole = [n for n in fp if reaches_main(n)]
    print(f"{prog} kernel_fp: {len(fp)} samples in its work, {len(fp_whole)} reach main")
    v.expect(len(fp) >= 5, f"{prog}: {len(fp)} kernel-walk samples in its work, want >= 5")
    v.expect(len(fp_whole) <= 0.2 * max(len(fp), 1),
             f"{prog}: {len(fp_whole)} of {len(fp)} kernel frame-pointer stacks reach main: "
             "the program has frame pointers after all?")
v.expect_end_line(f"{out}/dwarf.err", "Trace stats: nothing lost")


def section(text, title):
    """(share %, name) rows of one table of `tracebox report --profile`."""
    if title not in text:
        return []
    rows = []
    for line in text.split(title, 1)[1].splitlines()[1:]:
        if not line.strip():
            break
        f = line.split()
        rows.append((float(f[0].rstrip("%")), " ".join(f[2:])))
    return rows


# The guest's own profile view of deep_dyn: spin leads by self, leaf_three
# has ~75 % by total, and the heaviest path is the whole chain from main.
text = open(f"{out}/profile.txt").read()
print(text)
by_self = section(text, "Top functions by self samples:")
v.expect(by_self and by_self[0][1] == "spin", f"report: top self {by_self[:1]}")
three = [r[0] for r in section(text, "Top functions by total samples:") if r[1] == "leaf_three"]
v.expect(three and abs(three[0] - 75.0) <= 5.0, f"report: leaf_three total {three}")
paths = section(text, "Heaviest call paths (root > leaf):")
v.expect(paths and "main > app_run > app_step > lib_entry > lib_mid > leaf_three > spin" in paths[0][1],
         f"report: heaviest path {paths[:1]}")
v.done()
