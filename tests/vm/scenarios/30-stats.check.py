#!/usr/bin/env python3
"""process_stats (tree and periodic samples) and sys_stats (meminfo,
vmstat, cpu times, forks) from the guest's /proc."""
import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
v.run_checker("check_probes_trace.py", f"{out}/trace.pftrace", "--pid", "1", "--meminfo",
              "--process-stats", "--cpu-info")
ss = [p.sys_stats for p in trace.packet if p.HasField("sys_stats")]
v.expect(any(s.vmstat for s in ss), "no vmstat")
v.expect(any(s.cpu_stat for s in ss), "no cpu_stat")
v.expect(any(s.num_forks for s in ss), "no num_forks")
names = {t.name for p in trace.packet if p.HasField("process_tree") for t in p.process_tree.threads}
procs = {" ".join(q.cmdline) for p in trace.packet if p.HasField("process_tree")
         for q in p.process_tree.processes}
v.expect(any("traced" in c for c in procs), f"traced not among the processes: {sorted(procs)[:20]}")
v.expect_end_line(f"{out}/client.err", "Trace stats: nothing lost")
v.done()
