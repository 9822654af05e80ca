//! Pure parsers for the /proc files of `linux.sys_stats`. Lines that do not
//! parse are skipped and counted in `errors.malformed`; nothing panics.

use std::collections::HashMap;

use super::config::StatFields;
use super::model::{BuddyInfo, CpuTimes, DiskStat, PsiSample, SlabInfo, SysStatsPacket};
use crate::traced_probes::fs_root::ReadErrors;

fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split_ascii_whitespace()
}

/// `/proc/meminfo`: `Key:   value kB`. Only keys in `lookup` are kept.
pub fn parse_meminfo(
    text: &str,
    lookup: &HashMap<&'static str, u32>,
    out: &mut SysStatsPacket,
    errors: &mut ReadErrors,
) {
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            if !line.trim().is_empty() {
                errors.malformed += 1;
            }
            continue;
        };
        let Some(&id) = lookup.get(key) else { continue };
        match words(rest).next().and_then(|v| v.parse::<u64>().ok()) {
            Some(v) => out.meminfo.push((id, v)),
            None => errors.malformed += 1,
        }
    }
}

/// `/proc/vmstat`: `name value`. Only names in `lookup` are kept.
pub fn parse_vmstat(
    text: &str,
    lookup: &HashMap<&'static str, u32>,
    out: &mut SysStatsPacket,
    errors: &mut ReadErrors,
) {
    for line in text.lines() {
        let mut w = words(line);
        let Some(name) = w.next() else { continue };
        let Some(&id) = lookup.get(name) else {
            continue;
        };
        // Some counters (e.g. nr_dirty_threshold) are signed in older kernels.
        match w.next().and_then(|v| v.parse::<i64>().ok()) {
            Some(v) => out.vmstat.push((id, v as u64)),
            None => errors.malformed += 1,
        }
    }
}

/// `/proc/stat`: per-cpu times (ticks -> ns), `intr`, `softirq`,
/// `processes`. The aggregate `cpu` line is skipped as upstream does.
pub fn parse_stat(
    text: &str,
    fields: StatFields,
    ns_per_tick: u64,
    out: &mut SysStatsPacket,
    errors: &mut ReadErrors,
) {
    for line in text.lines() {
        let mut w = words(line);
        let Some(key) = w.next() else { continue };
        if let Some(cpu) = key.strip_prefix("cpu") {
            if !fields.cpu_times || cpu.is_empty() {
                continue;
            }
            let Ok(cpu_id) = cpu.parse::<u32>() else {
                errors.malformed += 1;
                continue;
            };
            let mut t = [0u64; 8];
            for (slot, v) in t.iter_mut().zip(w) {
                *slot = v.parse::<u64>().unwrap_or(0).saturating_mul(ns_per_tick);
            }
            out.cpu_stat.push(CpuTimes {
                cpu_id,
                user_ns: t[0],
                user_nice_ns: t[1],
                system_mode_ns: t[2],
                idle_ns: t[3],
                io_wait_ns: t[4],
                irq_ns: t[5],
                softirq_ns: t[6],
                steal_ns: t[7],
            });
        } else if key == "intr" && fields.irq_counts {
            let (total, per) = counts(w, true);
            out.num_irq_total = total;
            out.num_irq = per;
        } else if key == "softirq" && fields.softirq_counts {
            let (total, per) = counts(w, false);
            out.num_softirq_total = total;
            out.num_softirq = per;
        } else if key == "processes" && fields.fork_count {
            out.num_forks = w.next().and_then(|v| v.parse().ok());
            if out.num_forks.is_none() {
                errors.malformed += 1;
            }
        }
    }
}

/// `total n0 n1 ...` -> (total, [(index, n)]); zero counts dropped if asked.
fn counts<'a>(
    mut w: impl Iterator<Item = &'a str>,
    skip_zero: bool,
) -> (Option<u64>, Vec<(i32, u64)>) {
    let total = w.next().and_then(|v| v.parse().ok());
    let per = w
        .enumerate()
        .filter_map(|(i, v)| Some((i32::try_from(i).ok()?, v.parse::<u64>().ok()?)))
        .filter(|&(_, v)| !skip_zero || v > 0)
        .collect();
    (total, per)
}

/// `/proc/buddyinfo`: `Node 0, zone   Normal  n0 n1 ...`.
pub fn parse_buddyinfo(text: &str, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    for line in text.lines() {
        let w: Vec<&str> = words(line).collect();
        if w.is_empty() {
            continue;
        }
        if w.len() < 4 || w[0] != "Node" || w[2] != "zone" {
            errors.malformed += 1;
            continue;
        }
        out.buddy_info.push(BuddyInfo {
            node: w[1].trim_end_matches(',').to_string(),
            zone: w[3].to_string(),
            order_pages: w[4..].iter().map(|v| v.parse().unwrap_or(0)).collect(),
        });
    }
}

/// `/proc/diskstats`: field 2 is the device, then the counters
/// (see Documentation/admin-guide/iostats.rst).
pub fn parse_diskstats(text: &str, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    for line in text.lines() {
        let w: Vec<&str> = words(line).collect();
        if w.is_empty() {
            continue;
        }
        if w.len() < 11 {
            errors.malformed += 1;
            continue;
        }
        let n = |i: usize| w.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        out.disk_stat.push(DiskStat {
            device_name: w[2].to_string(),
            read_sectors: n(5),
            read_time_ms: n(6),
            write_sectors: n(9),
            write_time_ms: n(10),
            discard_sectors: n(16),
            discard_time_ms: n(17),
            flush_count: n(18),
            flush_time_ms: n(19),
        });
    }
}

/// One `/proc/pressure/<resource>` file: `some|full avg10=.. avg60=..
/// avg300=.. total=<µs>`.
pub fn parse_psi(
    text: &str,
    some_id: u32,
    full_id: u32,
    out: &mut SysStatsPacket,
    errors: &mut ReadErrors,
) {
    for line in text.lines() {
        let mut w = words(line);
        let resource = match w.next() {
            Some("some") => some_id,
            Some("full") => full_id,
            None => continue,
            Some(_) => {
                errors.malformed += 1;
                continue;
            }
        };
        let total_us = w
            .find_map(|t| t.strip_prefix("total="))
            .and_then(|v| v.parse::<u64>().ok());
        match total_us {
            Some(us) => out.psi.push(PsiSample {
                resource,
                total_ns: us.saturating_mul(1000),
            }),
            None => errors.malformed += 1,
        }
    }
}

/// `/proc/slabinfo` (version 2.1): two header lines, then
/// `name active objs objsize objperslab pagesperslab : tunables .. : slabdata active num shared`.
pub fn parse_slabinfo(text: &str, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    for line in text.lines().skip(2) {
        let w: Vec<&str> = words(line).collect();
        if w.is_empty() {
            continue;
        }
        let field = |i: usize| w.get(i).and_then(|v| v.parse::<u32>().ok());
        match (field(5), field(14)) {
            (Some(pages_per_slab), Some(num_slabs)) => out.slab_info.push(SlabInfo {
                name: w[0].to_string(),
                pages_per_slab,
                num_slabs,
            }),
            _ => errors.malformed += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traced_probes::sys_stats::counters::{
        build_lookup, meminfo_entries, vmstat_entries,
    };
    use crate::traced_probes::sys_stats::model::psi_resource;

    #[test]
    fn meminfo_allow_list_and_garbage() {
        let (lookup, _) = build_lookup(meminfo_entries(), Some(&[1, 9]));
        let mut out = SysStatsPacket::default();
        let mut e = ReadErrors::default();
        parse_meminfo(
            "MemTotal:  100 kB\nMemFree: 5 kB\nActive(anon):  7 kB\nno colon\n\nCached: x\n",
            &lookup,
            &mut out,
            &mut e,
        );
        assert_eq!(out.meminfo, vec![(1, 100), (9, 7)]);
        assert_eq!(e.malformed, 1);
        let (all, _) = build_lookup(meminfo_entries(), None);
        let mut out = SysStatsPacket::default();
        parse_meminfo(
            "MemTotal: 1 kB\nHugepagesize: 2048 kB\nCached: zz\n",
            &all,
            &mut out,
            &mut e,
        );
        assert_eq!(
            out.meminfo,
            vec![(1, 1)],
            "unknown keys skipped, bad values counted"
        );
        assert_eq!(e.malformed, 2);
    }

    #[test]
    fn vmstat_values() {
        let (lookup, _) = build_lookup(vmstat_entries(), None);
        let mut out = SysStatsPacket::default();
        let mut e = ReadErrors::default();
        parse_vmstat(
            "nr_free_pages 123\nnot_a_counter 5\npgfault 99\noom_kill\n",
            &lookup,
            &mut out,
            &mut e,
        );
        assert_eq!(out.vmstat, vec![(1, 123), (49, 99)]);
        assert_eq!(e.malformed, 1);
    }

    #[test]
    fn stat_lines() {
        let text = "cpu  10 0 0 0 0 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\ncpu1 1\ncpuX 1\n\
intr 100 0 5 0 7\nctxt 5\nprocesses 42\nsoftirq 9 0 1 2\n";
        let mut out = SysStatsPacket::default();
        let mut e = ReadErrors::default();
        parse_stat(text, StatFields::ALL, 10, &mut out, &mut e);
        assert_eq!(out.cpu_stat.len(), 2);
        assert_eq!(out.cpu_stat[0].steal_ns, 80);
        assert_eq!(out.cpu_stat[0].user_ns, 10);
        assert_eq!(
            (
                out.cpu_stat[1].cpu_id,
                out.cpu_stat[1].user_ns,
                out.cpu_stat[1].idle_ns
            ),
            (1, 10, 0)
        );
        assert_eq!(out.num_irq_total, Some(100));
        assert_eq!(out.num_irq, vec![(1, 5), (3, 7)]);
        assert_eq!(out.num_softirq_total, Some(9));
        assert_eq!(out.num_softirq, vec![(0, 0), (1, 1), (2, 2)]);
        assert_eq!(out.num_forks, Some(42));
        assert_eq!(e.malformed, 1, "cpuX");

        let mut out = SysStatsPacket::default();
        let only_forks = StatFields {
            cpu_times: false,
            irq_counts: false,
            softirq_counts: false,
            fork_count: true,
        };
        parse_stat(text, only_forks, 10, &mut out, &mut e);
        assert!(
            out.cpu_stat.is_empty() && out.num_irq_total.is_none() && out.num_softirq.is_empty()
        );
        assert_eq!(out.num_forks, Some(42));
    }

    #[test]
    fn buddy_disk_psi_slab() {
        let mut out = SysStatsPacket::default();
        let mut e = ReadErrors::default();
        parse_buddyinfo(
            "Node 0, zone      DMA      1      2      3\nbogus\n",
            &mut out,
            &mut e,
        );
        assert_eq!(
            out.buddy_info,
            vec![BuddyInfo {
                node: "0".into(),
                zone: "DMA".into(),
                order_pages: vec![1, 2, 3]
            }]
        );
        parse_diskstats(
            " 259       0 nvme0n1 100 5 2000 30 200 6 4000 50 0 70 80 1 0 16 2 9 3\n   7 0 loop0 1 2 3\n",
            &mut out,
            &mut e,
        );
        let d = &out.disk_stat[0];
        assert_eq!(
            (
                d.device_name.as_str(),
                d.read_sectors,
                d.read_time_ms,
                d.write_sectors,
                d.write_time_ms
            ),
            ("nvme0n1", 2000, 30, 4000, 50)
        );
        assert_eq!(
            (
                d.discard_sectors,
                d.discard_time_ms,
                d.flush_count,
                d.flush_time_ms
            ),
            (16, 2, 9, 3)
        );
        parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=12\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\nweird\n",
            psi_resource::IO_SOME, psi_resource::IO_FULL, &mut out, &mut e);
        assert_eq!(
            out.psi,
            vec![
                PsiSample {
                    resource: 3,
                    total_ns: 12_000
                },
                PsiSample {
                    resource: 4,
                    total_ns: 3_000
                }
            ]
        );
        parse_slabinfo("slabinfo - version: 2.1\n# name ...\next4_inode_cache 100 120 1080 30 8 : tunables 0 0 0 : slabdata 4 4 0\nshort 1 2\n", &mut out, &mut e);
        assert_eq!(
            out.slab_info,
            vec![SlabInfo {
                name: "ext4_inode_cache".into(),
                pages_per_slab: 8,
                num_slabs: 4
            }]
        );
        assert_eq!(e.malformed, 4);
    }
}
