#!/usr/bin/env python3
"""Checks a trace recorded by a central traced with traced_probes (and
optionally an SDK producer) behind traced_relay, with PyPI perfetto's
descriptors:

* process_tree packets exist, every one stamped with the same non-zero
  machine_id M and with trusted_pid PROBES_PID (the relay's SO_PEERCRED
  pid, named in SetPeerIdentity); one of them lists TEST_PID;
* a cpu_info packet (linux.system_info) is on machine M too;
* with --sdk-packets N: at least N for_testing packets on machine M;
* with --relay-port (the relay's RelayPort link was up): a system_info
  (with utsname) and a remote_clock_sync (client and host BOOTTIME) on M;
  without it: neither (only that link gives them);
* the last trace_stats counts no loss in any buffer.

usage: check_relayed_probes.py TRACE PROBES_PID TEST_PID [--sdk-packets N]
                               [--relay-port]
"""
import argparse

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from no_unknown_fields import assert_known

LOSS_FIELDS = ("chunks_overwritten", "chunks_discarded", "abi_violations",
               "trace_writer_packet_loss", "patches_failed",
               "oversized_packets_dropped")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("probes_pid", type=int)
    ap.add_argument("test_pid", type=int)
    ap.add_argument("--sdk-packets", type=int, default=0)
    ap.add_argument("--relay-port", action="store_true")
    a = ap.parse_args()
    probes_pid, test_pid, sdk_packets = a.probes_pid, a.test_pid, a.sdk_packets
    trace = pb.Trace()
    with open(a.trace, "rb") as f:
        data = f.read()
    trace.ParseFromString(data)
    assert_known(data, a.trace)

    trees = [p for p in trace.packet if p.HasField("process_tree")]
    assert trees, "no process_tree packet"
    machines = {p.machine_id for p in trees}
    assert len(machines) == 1 and 0 not in machines, f"process_tree machines {machines}"
    machine = machines.pop()
    assert all(p.trusted_pid == probes_pid for p in trees), \
        f"process_tree trusted_pid {[p.trusted_pid for p in trees]} != {probes_pid}"
    pids = {proc.pid for p in trees for proc in p.process_tree.processes}
    assert test_pid in pids, f"pid {test_pid} not in the process tree ({len(pids)} pids)"

    mine = [p for p in trace.packet if p.machine_id == machine]
    cpu_infos = [p for p in mine if p.HasField("cpu_info")]
    assert cpu_infos, f"no cpu_info on machine {machine}"
    for_testing = sum(1 for p in mine if p.HasField("for_testing"))
    assert for_testing >= sdk_packets, \
        f"{for_testing} for_testing packets on machine {machine}, want {sdk_packets}"

    stats = [p.trace_stats for p in trace.packet if p.HasField("trace_stats")]
    assert stats, "no trace_stats"
    for i, b in enumerate(stats[-1].buffer_stats):
        for name in LOSS_FIELDS:
            assert getattr(b, name) == 0, f"buffer {i}: {name} = {getattr(b, name)}"

    infos = [p for p in mine if p.HasField("system_info")]
    syncs = [p for p in mine if p.HasField("remote_clock_sync")]
    rounds = []
    if a.relay_port:
        assert infos and infos[0].system_info.utsname.sysname, \
            f"no system_info with utsname on machine {machine}"
        assert syncs, f"no remote_clock_sync on machine {machine}"
        rounds = syncs[-1].remote_clock_sync.synced_clocks
        assert rounds, syncs[-1]
        for r in rounds:
            for snap in (r.client_clocks, r.host_clocks):
                assert 6 in [c.clock_id for c in snap.clocks], r
    else:
        assert not infos and not syncs, \
            f"machine {machine} has system_info/remote_clock_sync without RelayPort"
    print(f"machine {machine}: {len(trees)} process_tree ({len(pids)} pids), "
          f"{len(cpu_infos)} cpu_info, {for_testing} for_testing, "
          f"{len(infos)} system_info, {len(syncs)} remote_clock_sync "
          f"({len(rounds)} rounds), "
          f"{len(trace.packet)} packets in all; no loss in trace_stats")


if __name__ == "__main__":
    main()
