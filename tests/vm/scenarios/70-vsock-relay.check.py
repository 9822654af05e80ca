#!/usr/bin/env python3
"""The vsock relay in the guest: the relayed machine (id 1) has its
sys_stats samples, its system_info (with RAM) and its remote_clock_sync,
all stamped with its machine id, and the end line names no loss."""
import vmcheck as v

out, arch = v.args()
trace = v.load(f"{out}/trace.pftrace")
v.run_checker("check_machines.py", f"{out}/trace.pftrace", "1")
mine = [p for p in trace.packet if p.machine_id == 1]
stats = [p for p in mine if p.HasField("sys_stats")]
v.expect(len(stats) >= 10, f"{len(stats)} sys_stats samples of the relayed machine, want >= 10")
v.expect_end_line(f"{out}/client.err", "Trace stats: nothing lost")
v.done()
