#!/usr/bin/env python3
"""UNWIND_DWARF on hostile targets in the aarch64 guest (the x86_64 host
test's cases): a process rewriting its dead stack and unmapping a library
still unwinds to main; a stack deeper than any copy reaches main through
/proc/PID/mem or is cut and counted; a scrambled .eh_frame gives counted
unwind errors; the trace's unwind errors are as many as the daemon's log
and the end line say, and traced_perf is the same process after."""
import re

import vmcheck as v

out, arch = v.args()
v.load(f"{out}/hostile.pftrace")
text = v.run_checker("check_perf_trace.py", f"{out}/hostile.pftrace")
lines = text.splitlines()
v.expect(not [ln for ln in lines if ln.startswith("error ")], "decode errors")
samples = []  # (pid, names)
for ln in lines:
    f = ln.split(" ", 8)
    if f[0] == "sample" and len(f) == 9:
        samples.append((f[1], f[8].split(";")))
errors = [ln.split()[1] for ln in lines if ln.startswith("unwind_error ")]
stats = open(f"{out}/perf.stats").read()
print(stats)


def stat(name):
    m = re.search(r"(\d+) " + re.escape(name), stats)
    v.expect(m, f"no '{name}' in {stats!r}")
    return int(m.group(1)) if m else -1


v.expect(len(errors) == stat("unwind errors"),
         f"{len(errors)} unwind_error in the trace, the log says {stat('unwind errors')}")
end = v.end_line(f"{out}/hostile.err")
print(end)
if errors:
    v.expect(f"{len(errors)} perf stacks cut short (PerfSample.unwind_error)" in end,
             f"end line {end!r} does not name the {len(errors)} cut stacks")
before, after = open(f"{out}/traced_perf.pids").read().split()
v.expect(before == after, f"traced_perf was {before}, is {after}: it restarted")

CHAIN = ["main", "app_run", "app_step", "lib_entry", "lib_mid"]


def reaches_main(names):
    if "main" not in names:
        return False
    at = names.index("main")
    return names[at:at + len(CHAIN)] == CHAIN and len(names) > at + len(CHAIN) \
        and names[at + len(CHAIN)] in ("leaf_three", "leaf_one")


def of(pid):
    return [n for p, n in samples if p == pid]


hostile, big, bad = (open(f"{out}/{n}.pid").read().strip() for n in ("hostile", "big", "bad"))
for name, pid in (("hostile", hostile), ("bigstack", big), ("bad", bad)):
    print(f"{name} (pid {pid}): {len(of(pid))} samples, {errors.count(pid)} unwind errors")
    v.expect(len(of(pid)) >= 20, f"{name}: {len(of(pid))} samples, want >= 20")

# The hostile process's work still unwinds to main: its rewrites hit dead
# stack only, the library it unmaps is a copy it never runs.
work = [n for n in of(hostile) if any(f in n for f in ("spin", "leaf_three", "leaf_one"))]
whole = [n for n in work if reaches_main(n)]
print(f"hostile: {len(whole)} of {len(work)} work stacks reach main")
v.expect(len(work) >= 10 and len(whole) >= 0.8 * len(work),
         f"hostile: {len(whole)} of {len(work)} reach main; e.g. {[n for n in work if not reaches_main(n)][:2]}")

# The deep stack: the walk reads past the copy and some stacks reach main
# under the 24 deep frames; the rest are cut (counted) or skipped.
v.expect(stat("walks past the copy") > 0, "no walk read past the stack copy")
deep = [n for n in of(big) if "main" in n and n.count("deep_frames") >= 24]
cut = errors.count(big)
skipped = [n for n in of(big) if n == ["-"]]
print(f"bigstack: {len(deep)} whole, {cut} cut, {len(skipped)} skipped")
v.expect(deep, f"no deep stack reached main: {of(big)[:2]}")
v.expect(len(deep) + cut + len(skipped) >= 0.9 * len(of(big)),
         f"bigstack: {len(deep)} whole + {cut} cut + {len(skipped)} skipped of {len(of(big))}")

# The scrambled .eh_frame: counted errors, no crash.
v.expect(errors.count(bad) > 0, "the scrambled .eh_frame gave no unwind error")
v.done()
