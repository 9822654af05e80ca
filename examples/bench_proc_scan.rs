//! CPU cost of the linux.process_stats /proc scans, for
//! scripts/bench/proc-scan.sh.
//!
//! Usage: bench_proc_scan [ITERATIONS] [-- PEER COMMAND...]
//! Prints one line per measurement: `name processes threads cpu_us_per_iter
//! us_per_process`, CPU = getrusage user+sys (own process, or children for
//! the peer command). With `PROC_SCAN_ONLY=1` only the default full scan
//! (`full_scan`, `full_scan_user`), for pairing with the floor run just
//! before and after it.

use std::process::{Command, Stdio};

use tracebox::protozero::VecStream;
use tracebox::traced_probes::fs_root::FsRoot;
use tracebox::traced_probes::ps::{
    write_process_stats_packet, write_process_tree_packet, ProcessStatsPoller,
    ProcessStatsSettings, ScanSource,
};

/// (user, system) CPU time in µs.
fn cpu_split_us(who: i32) -> (u64, u64) {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes it.
    let ru = unsafe {
        libc::getrusage(who, ru.as_mut_ptr());
        ru.assume_init()
    };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
}

fn cpu_us(who: i32) -> u64 {
    let (u, s) = cpu_split_us(who);
    u + s
}

fn boottime_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

fn report(name: &str, procs: usize, threads: usize, total_us: u64, iters: u64) {
    let per_iter = total_us as f64 / iters as f64;
    println!(
        "{name} {procs} {threads} {per_iter:.0} {:.2}",
        per_iter / procs.max(1) as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let split = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let iters: u64 = args
        .first()
        .filter(|_| split > 0)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let peer = args.get(split + 1..).unwrap_or_default();
    let root = FsRoot::host();
    let mut out = VecStream::with_capacity(1 << 20);

    // Full scan (scan_all_processes_on_start), encoded, with and without
    // thread names, through each identity source. Configurations take turns
    // every iteration so background load hits them alike.
    let configs = [
        ("full_scan", true, ScanSource::Auto),
        ("full_scan_status", true, ScanSource::Status),
        ("full_scan_pidfd", true, ScanSource::Pidfd),
        ("full_scan_nonames_status", false, ScanSource::Status),
        ("full_scan_nonames_pidfd", false, ScanSource::Pidfd),
    ];
    let only_default = std::env::var_os("PROC_SCAN_ONLY").is_some_and(|v| v == "1");
    let configs = if only_default {
        &configs[..1]
    } else {
        &configs[..]
    };
    let mut totals = [0u64; 5];
    let mut users = [0u64; 5];
    let mut used_pidfd = [false; 5];
    let (mut procs, mut threads) = (0, 0);
    for _ in 0..iters {
        for (i, &(_, names, source)) in configs.iter().enumerate() {
            let settings = ProcessStatsSettings {
                record_thread_names: names,
                on_demand_dumps: true,
                ..Default::default()
            };
            let start = cpu_us(libc::RUSAGE_SELF);
            let (u0, _) = cpu_split_us(libc::RUSAGE_SELF);
            let mut p = ProcessStatsPoller::new(settings, &root, Box::new(boottime_ns));
            used_pidfd[i] = p.set_scan_source(source);
            let (tree, _) = p.scan_all();
            let tree = tree.expect("a process tree");
            (procs, threads) = (tree.processes.len(), tree.threads.len());
            out.clear();
            write_process_tree_packet(&mut out, &tree);
            let (u1, _) = cpu_split_us(libc::RUSAGE_SELF);
            totals[i] += cpu_us(libc::RUSAGE_SELF) - start;
            users[i] += u1 - u0;
        }
    }
    for (i, &(name, _, _)) in configs.iter().enumerate() {
        let name = if configs[i].2 == ScanSource::Pidfd && !used_pidfd[i] {
            format!("{name}(unsupported:status)")
        } else {
            name.to_string()
        };
        report(&name, procs, threads, totals[i], iters);
        if i == 0 {
            report("full_scan_user", procs, threads, users[i], iters);
        }
    }
    if only_default {
        return;
    }

    // Periodic stats poll, cache TTL of one tick (every value re-emitted),
    // with runtimes: the worst case per tick. Files kept open between polls
    // (default) against reopened on every poll, taking turns.
    let settings = ProcessStatsSettings {
        proc_stats_poll_ms: 1000,
        record_process_runtime: true,
        on_demand_dumps: true,
        ..Default::default()
    };
    let mut pollers: Vec<ProcessStatsPoller> = (0..2)
        .map(|_| ProcessStatsPoller::new(settings.clone(), &root, Box::new(boottime_ns)))
        .collect();
    pollers[1].set_kept_fds_budget(0);
    let mut totals = [0u64; 2];
    for p in &mut pollers {
        let _ = p.poll_stats(); // First tick also describes every process.
    }
    for _ in 0..iters {
        for (i, p) in pollers.iter_mut().enumerate() {
            let start = cpu_us(libc::RUSAGE_SELF);
            let (stats, _) = p.poll_stats();
            out.clear();
            if let Some(stats) = stats {
                procs = stats.processes.len();
                write_process_stats_packet(&mut out, &stats);
            }
            totals[i] += cpu_us(libc::RUSAGE_SELF) - start;
        }
    }
    report("stats_poll", procs, threads, totals[0], iters);
    report("stats_poll_reopen", procs, threads, totals[1], iters);

    if let Some((cmd, rest)) = peer.split_first() {
        let start = cpu_us(libc::RUSAGE_CHILDREN);
        for _ in 0..iters {
            Command::new(cmd)
                .args(rest)
                .stdout(Stdio::null())
                .status()
                .expect("peer command");
        }
        report(
            &format!("peer:{}", peer.join("_")),
            procs,
            threads,
            cpu_us(libc::RUSAGE_CHILDREN) - start,
            iters,
        );
    }
}
