//! CPU cost of the linux.process_stats /proc scans, for
//! scripts/bench/proc-scan.sh.
//!
//! Usage: bench_proc_scan [ITERATIONS] [-- PEER COMMAND...]
//! Prints one line per measurement: `name processes threads cpu_us_per_iter
//! us_per_process`, CPU = getrusage user+sys (own process, or children for
//! the peer command). With `PROC_SCAN_ONLY=1` only the default full scan
//! (`full_scan`, `full_scan_user`), for pairing with the floor run just
//! before and after it. With `PROC_SCAN_ALTERNATE=N`: N turns of the
//! default full scan and an in-process floor (`floor_scan_at`'s syscalls,
//! read with no parsing) each, back to back, timed on the process CPU
//! clock; prints the median and quartiles of the per-turn ratios.

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

fn cpu_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// What scripts/bench/proc-floor.c's `floor_scan_at` does: list /proc,
/// read each process's status (one read) and, unless it is a kernel
/// thread, its cmdline; for a process with more than one thread, list
/// task/ and read each other thread's comm. No parsing beyond finding
/// those two lines.
fn floor_scan_at(proc_dir: &std::fs::File, dents: &mut Vec<u8>, buf: &mut [u8]) {
    use std::fmt::Write as _;
    use std::io::Read as _;
    use tracebox::traced_probes::fs_root::{list_numeric_dirs_at, open_at};
    let read_at = |rel: &str, buf: &mut [u8]| {
        open_at(proc_dir, rel).map_or(0, |mut f| f.read(buf).unwrap_or(0))
    };
    // glibc's memmem, as the C floor's strstr: a floor searches as cheaply
    // as it can.
    let has = |hay: &[u8], needle: &[u8]| {
        // SAFETY: both pointers are valid for the lengths given; memmem
        // only reads them.
        !unsafe {
            libc::memmem(
                hay.as_ptr().cast(),
                hay.len(),
                needle.as_ptr().cast(),
                needle.len(),
            )
        }
        .is_null()
    };
    let (mut pids, mut tids, mut rel) = (Vec::new(), Vec::new(), String::new());
    let _ = list_numeric_dirs_at(proc_dir, ".", dents, &mut pids);
    for pid in pids {
        rel.clear();
        let _ = write!(rel, "{pid}/status");
        let n = read_at(&rel, buf);
        let status = &buf[..n];
        let kthread = has(status, b"\nKthread:\t1");
        let single_threaded = has(status, b"\nThreads:\t1\n");
        if !kthread {
            rel.clear();
            let _ = write!(rel, "{pid}/cmdline");
            read_at(&rel, buf);
        }
        if n == 0 || single_threaded {
            continue;
        }
        rel.clear();
        let _ = write!(rel, "{pid}/task");
        tids.clear();
        let _ = list_numeric_dirs_at(proc_dir, &rel, dents, &mut tids);
        for &tid in tids.iter().filter(|&&t| t != pid) {
            rel.clear();
            let _ = write!(rel, "{pid}/task/{tid}/comm");
            read_at(&rel, buf);
        }
    }
}

/// `PROC_SCAN_ALTERNATE`: the default scan and the in-process floor in
/// turns; the per-turn ratios' quartiles.
fn alternate(turns: usize, root: &FsRoot) {
    let proc_dir = std::fs::File::open("/proc").expect("/proc");
    let (mut dents, mut buf) = (Vec::new(), vec![0u8; 16384]);
    let mut out = VecStream::with_capacity(1 << 20);
    let settings = ProcessStatsSettings {
        record_thread_names: true,
        on_demand_dumps: true,
        ..Default::default()
    };
    let mut ratios = Vec::new();
    let (mut scan_total, mut floor_total, mut procs) = (0, 0, 0);
    for _ in 0..turns {
        let t0 = cpu_ns();
        let mut p = ProcessStatsPoller::new(settings.clone(), root, Box::new(boottime_ns));
        let (tree, _) = p.scan_all();
        let tree = tree.expect("a process tree");
        procs = tree.processes.len();
        out.clear();
        write_process_tree_packet(&mut out, &tree);
        drop((tree, p));
        let t1 = cpu_ns();
        floor_scan_at(&proc_dir, &mut dents, &mut buf);
        let t2 = cpu_ns();
        ratios.push((t1 - t0) as f64 / (t2 - t1).max(1) as f64);
        (scan_total, floor_total) = (scan_total + t1 - t0, floor_total + t2 - t1);
    }
    ratios.sort_by(f64::total_cmp);
    let q = |f: f64| ratios[((ratios.len() - 1) as f64 * f).round() as usize];
    let per = |ns: u64| ns as f64 / 1e3 / turns as f64 / procs.max(1) as f64;
    println!(
        "alternate {procs} turns={turns} scan_us/process={:.2} floor_scan_at_us/process={:.2} ratio_q1={:.3} ratio_median={:.3} ratio_q3={:.3}",
        per(scan_total),
        per(floor_total),
        q(0.25),
        q(0.5),
        q(0.75)
    );
}

fn main() {
    if let Some(turns) = std::env::var("PROC_SCAN_ALTERNATE")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        alternate(turns, &FsRoot::host());
        return;
    }
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
