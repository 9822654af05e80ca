#!/usr/bin/env python3
"""traced_perf in the guest: samples of /vm/bin/hot only, user frames
named from its symbols (with their callers where the frame-pointer chain
is walkable), kernel frames named from kallsyms, nothing lost."""
import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
text = v.run_checker("check_perf_trace.py", f"{out}/trace.pftrace")
samples = [ln.split(" ", 8) for ln in text.splitlines() if ln.startswith("sample ")]
errors = [ln for ln in text.splitlines() if ln.startswith("error ")]
v.expect(not errors, f"decode errors: {errors[:3]}")
v.expect(len(samples) >= 20, f"{len(samples)} samples of hot, want >= 20")
names = [s[8] for s in samples if len(s) == 9]
user = [n for n in names if any(f in n for f in ("work_unit", "hot_three", "hot_one", "read_zero_loop"))]
v.expect(len(user) >= 10, f"{len(user)} samples name hot's functions; names: {names[:5]}")
# A caller named too: main's chain (x86_64, aarch64; armv7 APCS frames).
chained = [n for n in names if "work_unit" in n.split(";")[-1] and
           any(c in n for c in ("hot_three", "hot_one"))]
v.expect(chained, f"no work_unit sample with its caller; names: {names[:5]}")
kernel = [s for s in samples if len(s) == 9 and s[7] not in ("0", "-")]
v.expect(kernel, "no sample with kernel frames")
v.expect(any("read" in s[8].lower() for s in kernel), "no kernel frame named *read* (hot syscall)")
v.expect_end_line(f"{out}/client.err", "Trace stats: nothing lost")
v.done()
