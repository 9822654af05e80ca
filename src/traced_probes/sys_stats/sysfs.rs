//! sysfs readers of `linux.sys_stats`: devfreq, cpufreq, thermal zones,
//! cpuidle and GPU frequency. Missing directories/files are counted and
//! skipped.

use super::model::{CpuIdleState, SysStatsPacket, ThermalZone};
use crate::traced_probes::fs_root::{FsRoot, ReadErrors};

const CPU_DIR: &str = "sys/devices/system/cpu";

/// `cpuN` entries of the cpu directory, as (N, name), ascending by N.
pub fn cpu_dirs(root: &FsRoot, errors: &mut ReadErrors) -> Vec<(u32, String)> {
    let mut cpus: Vec<(u32, String)> = root
        .list_dir(CPU_DIR, errors)
        .into_iter()
        .filter_map(|n| Some((n.strip_prefix("cpu")?.parse::<u32>().ok()?, n)))
        .collect();
    cpus.sort_unstable();
    cpus
}

/// `/sys/class/devfreq/<dev>/cur_freq`.
pub fn read_devfreq(root: &FsRoot, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    for dev in root.list_dir("sys/class/devfreq", errors) {
        if let Some(v) = root.read_i64(&format!("sys/class/devfreq/{dev}/cur_freq"), errors) {
            out.devfreq.push((dev, v.max(0) as u64));
        }
    }
}

/// `scaling_cur_freq` of every cpu (index = cpu number); 0 where a cpu has
/// no cpufreq (offline or no driver).
pub fn read_cpufreq(root: &FsRoot, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    let cpus = cpu_dirs(root, errors);
    let Some(max) = cpus.last().map(|c| c.0) else {
        return;
    };
    // Bound the table: a hostile or odd tree could name "cpu4000000000".
    if max > 4096 {
        errors.malformed += 1;
        return;
    }
    let mut freqs = vec![0u32; max as usize + 1];
    for (n, name) in cpus {
        let v = root.read_i64(
            &format!("{CPU_DIR}/{name}/cpufreq/scaling_cur_freq"),
            errors,
        );
        freqs[n as usize] = v.and_then(|v| u32::try_from(v).ok()).unwrap_or(0);
    }
    out.cpufreq_khz = freqs;
}

/// `/sys/class/thermal/thermal_zone*/{temp,type}`.
pub fn read_thermal(root: &FsRoot, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    for zone in root.list_dir("sys/class/thermal", errors) {
        if !zone.starts_with("thermal_zone") {
            continue;
        }
        let temp = root.read_i64(&format!("sys/class/thermal/{zone}/temp"), errors);
        let kind = root.read_trimmed(&format!("sys/class/thermal/{zone}/type"), errors);
        out.thermal_zone.push(ThermalZone {
            name: zone,
            temp: temp.map(|t| t.max(0) as u64 / 1000),
            kind,
        });
    }
}

/// `cpuN/cpuidle/stateM/{name,time}` for every cpu.
pub fn read_cpuidle(root: &FsRoot, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    for (cpu_id, cpu) in cpu_dirs(root, errors) {
        let dir = format!("{CPU_DIR}/{cpu}/cpuidle");
        let mut states = Vec::new();
        let failures = errors.total();
        let entries = root.list_dir(&dir, errors);
        if errors.total() != failures {
            continue; // No cpuidle for this cpu (counted).
        }
        for st in entries {
            if !st.starts_with("state") {
                continue;
            }
            let name = root.read_trimmed(&format!("{dir}/{st}/name"), errors);
            let time = root.read_i64(&format!("{dir}/{st}/time"), errors);
            if let (Some(name), Some(time)) = (name, time) {
                states.push((name, time.max(0) as u64));
            }
        }
        out.cpuidle_state.push(CpuIdleState { cpu_id, states });
    }
}

/// Current GPU frequency: Adreno (Hz), Intel (MHz) or AMD (`pp_dpm_sclk`,
/// the line marked `*`). Nothing if none of them exists.
pub fn read_gpufreq(root: &FsRoot, out: &mut SysStatsPacket, errors: &mut ReadErrors) {
    // Absent GPU files are the norm; do not count them.
    let mut quiet = ReadErrors::default();
    if let Some(hz) = root.read_i64("sys/class/kgsl/kgsl-3d0/devfreq/cur_freq", &mut quiet) {
        out.gpufreq_mhz.push(hz.max(0) as u64 / 1_000_000);
        return;
    }
    if let Some(mhz) = root.read_i64("sys/class/drm/card0/gt_act_freq_mhz", &mut quiet) {
        out.gpufreq_mhz.push(mhz.max(0) as u64);
        return;
    }
    if let Some(text) = root.read_trimmed("sys/class/drm/card0/device/pp_dpm_sclk", &mut quiet) {
        match parse_amd_sclk(&text) {
            Some(mhz) => out.gpufreq_mhz.push(mhz),
            None => errors.malformed += 1,
        }
    }
    errors.malformed += quiet.malformed;
}

/// `0: 500Mhz\n1: 800Mhz *` -> 800.
pub fn parse_amd_sclk(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.trim_end().ends_with('*'))?;
    line.split_ascii_whitespace()
        .find_map(|w| w.strip_suffix("Mhz")?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amd_sclk() {
        assert_eq!(
            parse_amd_sclk("0: 500Mhz\n1: 800Mhz *\n2: 1000Mhz"),
            Some(800)
        );
        assert_eq!(parse_amd_sclk("0: 500Mhz\n"), None);
        assert_eq!(parse_amd_sclk("0: xMhz *"), None);
    }
}
