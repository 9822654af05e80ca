//! sys_stats and cpuinfo text parsers on arbitrary (lossily decoded) input.

use tracebox::traced_probes::fs_root::ReadErrors;
use tracebox::traced_probes::sys_stats::counters::{build_lookup, meminfo_entries, vmstat_entries};
use tracebox::traced_probes::sys_stats::{parse::*, StatFields, SysStatsPacket};

/// One fuzz input (cargo-fuzz and the stable replay runner call this).
pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (mem, _) = build_lookup(meminfo_entries(), None);
    let (vm, _) = build_lookup(vmstat_entries(), None);
    let (mut p, mut e) = (SysStatsPacket::default(), ReadErrors::default());
    parse_meminfo(&text, &mem, &mut p, &mut e);
    parse_vmstat(&text, &vm, &mut p, &mut e);
    parse_stat(&text, StatFields::ALL, u64::MAX, &mut p, &mut e);
    parse_buddyinfo(&text, &mut p, &mut e);
    parse_diskstats(&text, &mut p, &mut e);
    parse_psi(&text, 1, 2, &mut p, &mut e);
    parse_slabinfo(&text, &mut p, &mut e);
    let _ = tracebox::traced_probes::system_info::parse_cpuinfo(&text);
}
