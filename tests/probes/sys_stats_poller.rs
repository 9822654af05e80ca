//! linux.sys_stats against the real /proc and /sys and against fixtures.

use std::path::Path;

use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::{mod_TracePacket::OneOfdata, MeminfoCounters, TracePacket};
use tracebox::protozero::VecStream;
use tracebox::traced_probes::fs_root::{ns_per_clock_tick, FsRoot};
use tracebox::traced_probes::sys_stats::{
    write_sys_stats_packet, Source, SysStatsPoller, SysStatsSettings,
};

fn settings(sources: &[Source]) -> SysStatsSettings {
    let mut s = SysStatsSettings::default();
    for &src in sources {
        s.set_period(src, 1000);
    }
    s
}

fn meminfo_value(text: &str, key: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{key}:")))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn decode(bytes: &[u8]) -> TracePacket {
    TracePacket::from_reader(&mut BytesReader::from_bytes(bytes), bytes).unwrap()
}

#[test]
fn real_meminfo_and_stat_match_proc() {
    let mut clock = 0u64;
    let mut p = SysStatsPoller::new(
        &settings(&[Source::Meminfo, Source::Stat, Source::Vmstat]),
        &FsRoot::host(),
        Box::new(move || {
            clock += 10;
            clock
        }),
    );
    let before_stat = std::fs::read_to_string("/proc/stat").unwrap();
    let packet = p.poll(5_000).expect("all sources due on the first poll");
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let after_stat = std::fs::read_to_string("/proc/stat").unwrap();
    assert_eq!(
        (packet.timestamp, packet.collection_end_timestamp),
        (10, 20)
    );

    let get = |id: u32| packet.meminfo.iter().find(|m| m.0 == id).map(|m| m.1);
    assert_eq!(get(1), Some(meminfo_value(&meminfo, "MemTotal")));
    let free = meminfo_value(&meminfo, "MemFree");
    assert!(
        get(2).unwrap().abs_diff(free) < 256 * 1024,
        "MemFree moved too far"
    );
    assert_eq!(get(9).is_some(), meminfo.contains("Active(anon):"));
    // Keys the kernel lacks are simply absent (e.g. ION_heap on non-Android).
    assert_eq!(get(37).is_some(), meminfo.contains("ION_heap:"));

    let cpus = before_stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    assert_eq!(packet.cpu_stat.len(), cpus);
    let forks = |t: &str| meminfo_value(&t.replace("processes ", "processes: "), "processes");
    let n = packet.num_forks.unwrap();
    assert!(forks(&before_stat) <= n && n <= forks(&after_stat));
    // cpu0 user time in ns sits between the two reads.
    let user0 = |t: &str| {
        let l = t.lines().find(|l| l.starts_with("cpu0 ")).unwrap();
        l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * ns_per_clock_tick()
    };
    let u = packet.cpu_stat[0].user_ns;
    assert!(user0(&before_stat) <= u && u <= user0(&after_stat));
    assert!(packet.num_irq_total.unwrap() > 0);
    assert!(!packet.vmstat.is_empty());
    assert_eq!(p.errors().total(), 0);

    // Wire check with the pb-rs types.
    let mut s = VecStream::new();
    write_sys_stats_packet(&mut s, &packet);
    let decoded = decode(s.as_bytes());
    assert_eq!(decoded.timestamp, Some(10));
    let OneOfdata::sys_stats(st) = decoded.data else {
        panic!("not sys_stats")
    };
    assert_eq!(st.collection_end_timestamp, Some(20));
    let total = st
        .meminfo
        .iter()
        .find(|m| m.key == Some(MeminfoCounters::MEMINFO_MEM_TOTAL))
        .unwrap();
    assert_eq!(total.value, get(1));
    assert_eq!(st.cpu_stat.len(), cpus);
    assert_eq!(st.cpu_stat[0].user_ns, Some(u));
    assert_eq!(st.num_forks, Some(n));
    assert_eq!(st.vmstat.len(), packet.vmstat.len());
    assert_eq!(st.num_irq.len(), packet.num_irq.len());

    // Nothing is due again until the next multiple of the period.
    assert!(p.poll(5_999).is_none());
    assert_eq!(p.next_wake_ms(), Some(6_000));
}

#[test]
fn real_sysfs_sources_do_not_fail() {
    let all = Source::ALL;
    let mut p = SysStatsPoller::new(&settings(&all), &FsRoot::host(), Box::new(|| 1));
    let packet = p.poll(0).unwrap();
    let mut s = VecStream::new();
    write_sys_stats_packet(&mut s, &packet);
    let OneOfdata::sys_stats(st) = decode(s.as_bytes()).data else {
        panic!()
    };
    assert_eq!(st.cpufreq_khz, packet.cpufreq_khz);
    assert_eq!(st.disk_stat.len(), packet.disk_stat.len());
    assert_eq!(st.psi.len(), packet.psi.len());
    assert_eq!(st.thermal_zone.len(), packet.thermal_zone.len());
    assert_eq!(st.buddy_info.len(), packet.buddy_info.len());
    if Path::new("/proc/pressure/cpu").exists() {
        assert!(packet.psi.iter().any(|p| p.resource == 1));
    }
}

fn write(root: &Path, rel: &str, content: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

#[test]
fn fixture_with_missing_and_malformed_files() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(
        r,
        "proc/meminfo",
        "MemTotal: 1000 kB\nMemFree: lots kB\ngarbage line\nCached: 7 kB\n",
    );
    // No vmstat, no diskstats, no pressure directory.
    write(
        r,
        "proc/stat",
        "cpu 1 1 1 1\ncpu0 1 2 3 4 5 6 7 8\nprocesses nope\n",
    );
    write(r, "proc/buddyinfo", "Node 0, zone Normal 5 4 3\n");
    write(
        r,
        "sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq",
        "1800000\n",
    );
    write(
        r,
        "sys/devices/system/cpu/cpu2/cpufreq/scaling_cur_freq",
        "garbage\n",
    );
    write(
        r,
        "sys/devices/system/cpu/cpu0/cpuidle/state0/name",
        "POLL\n",
    );
    write(r, "sys/devices/system/cpu/cpu0/cpuidle/state0/time", "12\n");
    write(r, "sys/class/thermal/thermal_zone0/temp", "45500\n");
    write(r, "sys/class/thermal/thermal_zone0/type", "x86_pkg_temp\n");
    write(r, "sys/class/thermal/cooling_device0/type", "Fan\n");
    write(r, "sys/class/devfreq/gpu/cur_freq", "500000000\n");

    let mut p = SysStatsPoller::new(&settings(&Source::ALL), &FsRoot::new(r), Box::new(|| 7));
    p.set_ns_per_tick(10_000_000);
    let packet = p.poll(0).unwrap();
    assert_eq!(packet.meminfo, vec![(1, 1000), (5, 7)]);
    assert!(packet.vmstat.is_empty() && packet.disk_stat.is_empty() && packet.psi.is_empty());
    assert_eq!(packet.cpu_stat.len(), 1);
    assert_eq!(packet.cpu_stat[0].system_mode_ns, 30_000_000);
    assert_eq!(packet.num_forks, None);
    assert_eq!(packet.buddy_info[0].order_pages, vec![5, 4, 3]);
    assert_eq!(packet.cpufreq_khz, vec![1_800_000, 0, 0]);
    assert_eq!(packet.cpuidle_state.len(), 1, "cpu2 has no cpuidle dir");
    assert_eq!(
        packet.cpuidle_state[0].states,
        vec![("POLL".to_string(), 12)]
    );
    assert_eq!(packet.thermal_zone.len(), 1);
    assert_eq!(packet.thermal_zone[0].temp, Some(45));
    assert_eq!(packet.thermal_zone[0].kind.as_deref(), Some("x86_pkg_temp"));
    assert_eq!(packet.devfreq, vec![("gpu".to_string(), 500_000_000)]);
    assert!(packet.gpufreq_mhz.is_empty() && packet.slab_info.is_empty());

    let e = p.errors();
    // meminfo: "lots", "garbage line"; stat: "processes nope"; cpu2 freq.
    assert_eq!(e.malformed, 4, "{e:?}");
    // vmstat, diskstats, 3 pressure files, slabinfo, cpu2/cpuidle dir.
    assert_eq!(e.missing, 7, "{e:?}");
}

#[test]
fn disabled_and_clamped_periods() {
    let mut p = SysStatsPoller::new(
        &SysStatsSettings::default(),
        &FsRoot::host(),
        Box::new(|| 0),
    );
    assert!(!p.is_active());
    assert!(p.poll(100).is_none());
    let mut s = SysStatsSettings::default();
    s.set_period(Source::Meminfo, u32::MAX)
        .set_period(Source::Stat, 1);
    let mut p = SysStatsPoller::new(&s, &FsRoot::host(), Box::new(|| 0));
    assert!(p.poll(0).is_some());
    assert_eq!(p.next_wake_ms(), Some(10), "1 ms raised to 10 ms");
    let due = |p: &mut SysStatsPoller, t| {
        p.poll(t)
            .map(|x| (!x.meminfo.is_empty(), !x.cpu_stat.is_empty()))
    };
    assert_eq!(due(&mut p, 10), Some((false, true)));
    assert_eq!(
        due(&mut p, 86_400_000),
        Some((true, true)),
        "UINT32_MAX lowered to one day"
    );
}
