//! linux.process_stats against the real /proc: this test process must show
//! up with its exact argv and a thread it named.

use std::sync::mpsc;

use tracebox::traced_probes::fs_root::FsRoot;
use tracebox::traced_probes::ps::parse::parse_status;
use tracebox::traced_probes::ps::{ProcessStatsPoller, ProcessStatsSettings};

const THREAD_NAME: &str = "ps-probe-named";

/// Runs `f` while a named helper thread is alive; passes the helper's tid.
fn with_named_thread(f: impl FnOnce(i32)) {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let h = std::thread::Builder::new()
        .name(THREAD_NAME.into())
        .spawn(move || {
            tid_tx.send(nix::unistd::gettid().as_raw()).unwrap();
            let _ = done_rx.recv();
        })
        .unwrap();
    let tid = tid_rx.recv().unwrap();
    f(tid);
    done_tx.send(()).unwrap();
    h.join().unwrap();
}

fn boottime_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

fn settings() -> ProcessStatsSettings {
    ProcessStatsSettings {
        record_thread_names: true,
        on_demand_dumps: true,
        proc_stats_poll_ms: 1000,
        record_process_runtime: true,
        record_process_age: true,
        ..Default::default()
    }
}

#[test]
fn full_scan_finds_this_process_and_its_named_thread() {
    let me = std::process::id() as i32;
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    with_named_thread(|tid| {
        let mut p = ProcessStatsPoller::new(settings(), &FsRoot::host(), Box::new(boottime_ns));
        let before = boottime_ns();
        let (tree, _) = p.scan_all();
        let tree = tree.unwrap();
        assert!(tree.timestamp >= before && tree.collection_end_timestamp >= tree.timestamp);
        let proc_ = tree
            .processes
            .iter()
            .find(|p| p.pid == me)
            .expect("own pid in tree");
        assert_eq!(proc_.cmdline.to_vec(), argv);
        assert!(!proc_.cmdline_is_comm);
        assert_eq!(proc_.ppid, nix::unistd::getppid().as_raw());
        assert_eq!(proc_.uid as u32, nix::unistd::getuid().as_raw());
        let thread = tree
            .threads
            .iter()
            .find(|t| t.tid == tid)
            .expect("named thread in tree");
        assert_eq!(thread.tgid, me);
        assert_eq!(thread.name.as_deref(), Some(THREAD_NAME));
        // Kernel threads are flagged (Linux 6.4+ reports Kthread:).
        if let Some(kthreadd) = tree.processes.iter().find(|p| p.pid == 2) {
            assert!(kthreadd.cmdline_is_comm);
        }
        assert!(tree.processes.len() > 2);
        assert_eq!(p.errors().total(), 0, "{:?}", p.errors());
    });
}

#[test]
fn on_demand_scan_of_a_thread_id() {
    let me = std::process::id() as i32;
    with_named_thread(|tid| {
        let mut p = ProcessStatsPoller::new(settings(), &FsRoot::host(), Box::new(boottime_ns));
        let tree = p.on_pids(&[tid]).unwrap();
        assert_eq!(tree.processes.len(), 1);
        assert_eq!(tree.processes[0].pid, me);
        assert!(tree
            .threads
            .iter()
            .any(|t| t.tid == tid && t.name.as_deref() == Some(THREAD_NAME)));
        assert!(
            p.on_pids(&[tid, me]).is_none(),
            "seen pids are not rescanned"
        );
    });
}

#[test]
fn stats_of_this_process_match_proc() {
    let me = std::process::id() as i32;
    let mut p = ProcessStatsPoller::new(settings(), &FsRoot::host(), Box::new(boottime_ns));
    let (stats, tree) = p.poll_stats();
    let proc_status = parse_status(&std::fs::read("/proc/self/status").unwrap());
    let sample = stats
        .unwrap()
        .processes
        .into_iter()
        .find(|s| s.pid == me)
        .expect("own pid sampled");
    let close = |a: Option<u64>, b: Option<u64>, slack: u64| {
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(a.abs_diff(b) <= slack.max(b / 5), "{a} vs {b}");
    };
    // Memory moves a little between the two reads (test threads allocate).
    close(sample.vm_size_kb, proc_status.mem.vm_size_kb, 64 * 1024);
    close(sample.vm_rss_kb, proc_status.mem.vm_rss_kb, 16 * 1024);
    close(sample.vm_hwm_kb, proc_status.mem.vm_hwm_kb, 16 * 1024);
    let adj: i64 = std::fs::read_to_string("/proc/self/oom_score_adj")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(sample.oom_score_adj, Some(adj));
    // CPU time only grows.
    let now = tracebox::traced_probes::ps::parse::parse_stat_times(
        &std::fs::read("/proc/self/stat").unwrap(),
        tracebox::traced_probes::fs_root::ns_per_clock_tick(),
    )
    .unwrap();
    assert!(sample.runtime_user_mode_ns.unwrap() <= now.utime_ns);
    assert!(sample.runtime_kernel_mode_ns.unwrap() <= now.stime_ns);
    assert!(tree.unwrap().processes.iter().any(|t| t.pid == me));
}

#[test]
fn vanished_pids_are_skipped_silently() {
    let mut child = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    child.kill().unwrap();
    child.wait().unwrap();
    let mut p = ProcessStatsPoller::new(settings(), &FsRoot::host(), Box::new(boottime_ns));
    let me = std::process::id() as i32;
    let tree = p.on_pids(&[pid, me]).unwrap();
    assert_eq!(
        tree.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![me]
    );
    assert!(p.vanished() >= 1);
    assert_eq!(p.errors().total(), 0);
}
