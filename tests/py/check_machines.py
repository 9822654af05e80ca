#!/usr/bin/env python3
"""Checks a multi-machine trace with PyPI perfetto's descriptors: machine
MACHINE_ID has a system_info packet (with utsname) and a remote_clock_sync
packet (client and host clocks, BOOTTIME among them), both stamped with
its machine_id, and at least one packet of its producers; every machine's
system_info (the host's too) names its RAM (system_ram_bytes).

usage: check_machines.py TRACE_FILE MACHINE_ID
"""
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def main():
    path, machine = sys.argv[1], int(sys.argv[2])
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    mine = [p for p in trace.packet if p.machine_id == machine]
    infos = [p for p in mine if p.HasField("system_info")]
    assert infos, f"no system_info for machine {machine}"
    assert infos[0].system_info.utsname.sysname, infos[0]
    syncs = [p for p in mine if p.HasField("remote_clock_sync")]
    assert syncs, f"no remote_clock_sync for machine {machine}"
    rounds = syncs[-1].remote_clock_sync.synced_clocks
    assert len(rounds) >= 2, rounds
    for r in rounds:
        for snap in (r.client_clocks, r.host_clocks):
            assert 6 in [c.clock_id for c in snap.clocks], r
    host_infos = [p for p in trace.packet if p.HasField("system_info") and not p.machine_id]
    assert host_infos, "no host system_info"
    for p in infos[:1] + host_infos[:1]:
        assert p.system_info.system_ram_bytes > 1 << 20, p.system_info
    data = [p for p in mine if p.trusted_pid and not p.HasField("system_info")]
    assert data, f"no producer packets on machine {machine}"
    print(f"machine {machine}: {len(infos)} system_info, {len(syncs)} remote_clock_sync, "
          f"{len(data)} producer packets")


if __name__ == "__main__":
    main()
