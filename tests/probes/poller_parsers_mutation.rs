//! Deterministic mutation run over the /proc parsers (a stand-in for the
//! fuzz targets on stable): real files with flipped, inserted and cut
//! bytes must never panic.

use tracebox::traced_probes::fs_root::ReadErrors;
use tracebox::traced_probes::ps::parse::{parse_smaps_rollup, parse_stat_times, parse_status};
use tracebox::traced_probes::ps::Argv;
use tracebox::traced_probes::sys_stats::counters::{build_lookup, meminfo_entries, vmstat_entries};
use tracebox::traced_probes::sys_stats::parse::*;
use tracebox::traced_probes::sys_stats::{StatFields, SysStatsPacket};
use tracebox::traced_probes::system_info::{parse_cpuinfo, parse_interrupts};

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut XorShift, seed: &[u8]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(v.len() + 1);
        match rng.below(4) {
            0 if at < v.len() => v[at] = rng.next() as u8,
            1 => v.insert(at, b"\n:\t )(0123456789-\xff"[rng.below(17)]),
            2 => v.truncate(at),
            _ if at < v.len() => {
                v.remove(at);
            }
            _ => {}
        }
    }
    v
}

#[test]
fn mutated_proc_files_never_panic() {
    let files = [
        "/proc/self/status",
        "/proc/self/stat",
        "/proc/self/cmdline",
        "/proc/self/smaps_rollup",
        "/proc/meminfo",
        "/proc/vmstat",
        "/proc/stat",
        "/proc/buddyinfo",
        "/proc/diskstats",
        "/proc/cpuinfo",
        "/proc/interrupts",
    ];
    let seeds: Vec<Vec<u8>> = files.iter().filter_map(|f| std::fs::read(f).ok()).collect();
    assert!(seeds.len() >= 8);
    let (mem, _) = build_lookup(meminfo_entries(), None);
    let (vm, _) = build_lookup(vmstat_entries(), None);
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut errors = ReadErrors::default();
    for i in 0..3000 {
        let data = mutate(&mut rng, &seeds[i % seeds.len()]);
        let _ = parse_status(&data);
        let _ = parse_stat_times(&data, u64::MAX);
        let _ = Argv::from_cmdline(&data);
        let _ = parse_smaps_rollup(&data);
        let text = String::from_utf8_lossy(&data);
        let mut p = SysStatsPacket::default();
        parse_meminfo(&text, &mem, &mut p, &mut errors);
        parse_vmstat(&text, &vm, &mut p, &mut errors);
        parse_stat(&text, StatFields::ALL, u64::MAX, &mut p, &mut errors);
        parse_buddyinfo(&text, &mut p, &mut errors);
        parse_diskstats(&text, &mut p, &mut errors);
        parse_psi(&text, 1, 2, &mut p, &mut errors);
        parse_slabinfo(&text, &mut p, &mut errors);
        let _ = parse_cpuinfo(&text);
        let _ = parse_interrupts(&text);
    }
    assert!(
        errors.malformed > 0,
        "mutations must have hit the error paths"
    );
}
