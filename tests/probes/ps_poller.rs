//! linux.process_stats poller against fixture /proc trees and the real one.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tracebox::traced_probes::fs_root::FsRoot;
use tracebox::traced_probes::ps::{ProcessStatsPoller, ProcessStatsSettings, TreeThread};

fn write(root: &Path, rel: &str, content: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
}

fn status(name: &str, pid: i32, tgid: i32, ppid: i32, extra: &str) -> Vec<u8> {
    format!("Name:\t{name}\nTgid:\t{tgid}\nPid:\t{pid}\nPPid:\t{ppid}\nUid:\t1000\t1000\t1000\t1000\n{extra}")
        .into_bytes()
}

const MEM: &str = "VmSize:\t 1000 kB\nVmLck:\t 0 kB\nVmHWM:\t 300 kB\nVmRSS:\t 200 kB\nRssAnon:\t 50 kB\nRssFile:\t 150 kB\nRssShmem:\t 0 kB\nVmSwap:\t 0 kB\n";

/// pid 1: init with a thread 5; pid 2: kthreadd (empty cmdline);
/// pid 10: no status (vanished); pid 11: malformed status;
/// pid 12: process in a nested pid namespace.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    write(
        r,
        "proc/1/status",
        &status("init", 1, 1, 0, &format!("NSpid:\t1\nKthread:\t0\n{MEM}")),
    );
    write(r, "proc/1/cmdline", b"/sbin/init\0--verbose\0");
    write(r, "proc/1/oom_score_adj", b"-1000\n");
    write(
        r,
        "proc/1/stat",
        b"1 (init) S 0 1 1 0 -1 4194560 1 0 0 0 250 130 0 0 20 0 1 0 42 1000 200\n",
    );
    write(r, "proc/1/task/1/status", b"");
    write(r, "proc/1/task/5/status", b"");
    write(
        r,
        "proc/5/status",
        &status("worker", 5, 1, 0, "NSpid:\t5\n"),
    );
    write(
        r,
        "proc/2/status",
        &status("kthreadd", 2, 2, 0, "Kthread:\t1\n"),
    );
    write(r, "proc/2/cmdline", b"");
    write(
        r,
        "proc/2/stat",
        b"2 (kthreadd) S 0 0 0 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0\n",
    );
    write(r, "proc/2/task/2/status", b"");
    write(
        r,
        "proc/12/stat",
        b"12 (inner) S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7 0 0\n",
    );
    std::fs::create_dir_all(r.join("proc/10")).unwrap();
    write(r, "proc/11/status", b"garbage without fields\n\xff\n");
    write(
        r,
        "proc/12/status",
        &status("inner", 12, 12, 1, &format!("NSpid:\t12\t1\n{MEM}")),
    );
    write(r, "proc/12/cmdline", b"inner");
    write(r, "proc/12/task/12/status", b"");
    write(r, "proc/12/task/13/status", b"");
    write(
        r,
        "proc/13/status",
        &status("inner-t", 13, 12, 1, "NSpid:\t13\t2\n"),
    );
    write(r, "proc/self", b"not a pid dir");
    write(r, "proc/meminfo", b"");
    dir
}

fn fake_clock() -> (Arc<AtomicU64>, tracebox::traced_probes::ps::Clock) {
    let t = Arc::new(AtomicU64::new(1_000));
    let t2 = t.clone();
    (t, Box::new(move || t2.fetch_add(1, Ordering::SeqCst)))
}

fn poller(root: &Path, settings: ProcessStatsSettings) -> ProcessStatsPoller {
    let (_, clock) = fake_clock();
    let mut p = ProcessStatsPoller::new(settings, &FsRoot::new(root), clock);
    p.set_ns_per_tick(10_000_000);
    p
}

#[test]
fn full_scan_of_fixture() {
    let dir = fixture();
    let mut p = poller(
        dir.path(),
        ProcessStatsSettings {
            record_process_age: true,
            ..Default::default()
        },
    );
    let (tree, fds) = p.scan_all();
    assert!(fds.is_none());
    let tree = tree.unwrap();
    assert_eq!(tree.timestamp, 1_000);
    assert!(tree.collection_end_timestamp > tree.timestamp);
    let pids: Vec<i32> = tree.processes.iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![1, 2, 12]);

    let init = &tree.processes[0];
    assert_eq!(init.cmdline.to_vec(), ["/sbin/init", "--verbose"]);
    assert!(!init.cmdline_is_comm);
    assert_eq!(
        (init.ppid, init.uid, init.is_kthread),
        (0, 1000, Some(false))
    );
    assert_eq!(init.start_from_boot_ns, Some(420_000_000));
    assert!(init.nspid.is_empty());

    let kthreadd = &tree.processes[1];
    assert_eq!(kthreadd.cmdline.to_vec(), ["kthreadd"]);
    assert!(kthreadd.cmdline_is_comm);
    assert_eq!(kthreadd.is_kthread, Some(true));

    let inner = &tree.processes[2];
    assert_eq!(
        inner.cmdline.to_vec(),
        ["inner"],
        "missing final NUL tolerated"
    );
    assert_eq!(inner.nspid, vec![1]);

    // Main threads (upstream v58+) plus other threads; names only on request.
    let t = |tid, tgid, nstid: Vec<i32>| TreeThread {
        tid,
        tgid,
        name: None,
        nstid,
    };
    assert_eq!(
        tree.threads,
        vec![
            t(1, 1, vec![]),
            t(5, 1, vec![]),
            t(2, 2, vec![]),
            t(12, 12, vec![1]),
            t(13, 12, vec![2])
        ]
    );
    // pid 10 vanished (no status), pid 11 malformed; both skipped and counted.
    assert_eq!(p.vanished(), 1);
    assert_eq!(p.errors().malformed, 1);
}

#[test]
fn thread_names_and_on_demand_dedup() {
    let dir = fixture();
    let mut p = poller(
        dir.path(),
        ProcessStatsSettings {
            record_thread_names: true,
            on_demand_dumps: true,
            ..Default::default()
        },
    );
    // A thread id pulls in its process first.
    let tree = p.on_pids(&[5, 0, -3]).unwrap();
    assert_eq!(tree.processes.len(), 1);
    assert_eq!(tree.processes[0].pid, 1);
    let names: Vec<_> = tree
        .threads
        .iter()
        .map(|t| (t.tid, t.name.clone().unwrap()))
        .collect();
    assert_eq!(
        names,
        vec![(1, "init".to_string()), (5, "worker".to_string())]
    );
    // Already seen: nothing to write.
    assert!(p.on_pids(&[1, 5]).is_none());
    // A rename makes the pid eligible again; the process stays known.
    p.on_renames(&[5]);
    let tree = p.on_pids(&[5, 1]).unwrap();
    assert!(tree.processes.is_empty());
    assert_eq!(tree.threads.len(), 1);
    assert_eq!(tree.threads[0].tid, 5);
    // Incremental state cleared: everything is new again and flagged.
    p.clear_incremental_state();
    let tree = p.on_pids(&[1]).unwrap();
    assert!(tree.incremental_state_cleared);
    assert_eq!(tree.processes.len(), 1);
    assert!(!p.on_pids(&[2]).unwrap().incremental_state_cleared);
}

#[test]
fn on_demand_can_be_disabled() {
    let dir = fixture();
    let mut p = poller(
        dir.path(),
        ProcessStatsSettings {
            on_demand_dumps: false,
            ..Default::default()
        },
    );
    assert!(p.on_pids(&[1]).is_none());
    assert!(!p.is_seen(1));
}

#[test]
fn stats_emit_only_changes_within_ttl() {
    let dir = fixture();
    let settings = ProcessStatsSettings {
        proc_stats_poll_ms: 100,
        proc_stats_cache_ttl_ms: 300,
        record_process_runtime: true,
        on_demand_dumps: true,
        ..Default::default()
    };
    let mut p = poller(dir.path(), settings);
    let (stats, tree) = p.poll_stats();
    let stats = stats.unwrap();
    let init = stats.processes.iter().find(|s| s.pid == 1).unwrap();
    assert_eq!(init.vm_size_kb, Some(1000));
    assert_eq!(init.vm_rss_kb, Some(200));
    assert_eq!(init.rss_file_kb, Some(150));
    assert_eq!(init.vm_swap_kb, Some(0));
    assert_eq!(init.oom_score_adj, Some(-1000));
    assert_eq!(init.runtime_user_mode_ns, Some(2_500_000_000));
    assert_eq!(init.runtime_kernel_mode_ns, Some(1_300_000_000));
    // Kernel thread: runtimes but no memory counters.
    let kthreadd = stats.processes.iter().find(|s| s.pid == 2).unwrap();
    assert_eq!(
        (kthreadd.runtime_user_mode_ns, kthreadd.vm_size_kb),
        (Some(0), None)
    );
    // The tree pass describes every sampled process once.
    let tree = tree.unwrap();
    assert_eq!(
        tree.processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
        vec![1, 2, 12]
    );

    // Tick 2: nothing changed -> no packets at all.
    assert_eq!(p.poll_stats(), (None, None));
    // A change is emitted alone.
    write(dir.path(), "proc/1/oom_score_adj", b"0\n");
    let (stats, _) = p.poll_stats();
    let s = &stats.unwrap().processes;
    assert_eq!(s.len(), 1);
    assert_eq!(
        (s[0].pid, s[0].oom_score_adj, s[0].vm_size_kb),
        (1, Some(0), None)
    );
    // Tick 4: the TTL (3 ticks) expired after tick 3, everything again.
    let (stats, _) = p.poll_stats();
    let init = stats
        .unwrap()
        .processes
        .into_iter()
        .find(|s| s.pid == 1)
        .unwrap();
    assert_eq!(init.vm_size_kb, Some(1000));
}

#[test]
fn poll_period_is_clamped() {
    assert_eq!(tracebox::traced_probes::ps::clamp_poll_ms(0), 0);
    assert_eq!(tracebox::traced_probes::ps::clamp_poll_ms(1), 100);
    assert_eq!(
        tracebox::traced_probes::ps::clamp_poll_ms(u32::MAX),
        u32::MAX
    );
    assert_eq!(tracebox::traced_probes::ps::cache_ttl_ticks(100, 0), 1);
    assert_eq!(tracebox::traced_probes::ps::cache_ttl_ticks(100, 1050), 10);
    assert_eq!(tracebox::traced_probes::ps::cache_ttl_ticks(0, 1050), 0);
}

#[test]
fn missing_proc_is_counted_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = poller(dir.path(), ProcessStatsSettings::default());
    assert_eq!(p.scan_all(), (None, None));
    assert_eq!(p.errors().missing, 1);
}

#[test]
fn fds_are_resolved_once() {
    let dir = fixture();
    std::fs::create_dir_all(dir.path().join("proc/1/fd")).unwrap();
    std::os::unix::fs::symlink("/dev/null", dir.path().join("proc/1/fd/0")).unwrap();
    std::os::unix::fs::symlink("/tmp/x", dir.path().join("proc/1/fd/3")).unwrap();
    let mut p = poller(
        dir.path(),
        ProcessStatsSettings {
            resolve_process_fds: true,
            ..Default::default()
        },
    );
    let (_, fds) = p.scan_all();
    let fds = fds.unwrap();
    assert_eq!(fds.processes.len(), 1);
    assert_eq!(
        fds.processes[0].fds,
        vec![(0, "/dev/null".to_string()), (3, "/tmp/x".to_string())]
    );
    std::os::unix::fs::symlink("/tmp/y", dir.path().join("proc/1/fd/4")).unwrap();
    let (stats, _) = p.poll_stats();
    let init = stats
        .unwrap()
        .processes
        .into_iter()
        .find(|s| s.pid == 1)
        .unwrap();
    assert_eq!(init.fds, vec![(4, "/tmp/y".to_string())]);
}

/// The bytes of a full scan's encoded packet, pinned: the scan and its
/// encoding are tuned for speed (argv, names and the packet written with
/// as little copying as they can), and none of that may change a byte.
/// The fixture adds argv with empty and invalid UTF-8 arguments, a
/// zombie (empty cmdline: comm stands in), and thread names read from
/// `comm` and from `status`.
#[test]
fn full_scan_encoding_is_pinned() {
    let dir = fixture();
    let r = dir.path();
    write(r, "proc/1/task/5/comm", b"worker\n");
    write(
        r,
        "proc/20/status",
        &status("odd\u{e9}", 20, 20, 1, "Kthread:\t0\nThreads:\t1\n"),
    );
    write(
        r,
        "proc/20/cmdline",
        b"a\0\0\xff\xfeb\0c\xe2\x82\0\xe2\x82\xac\0",
    );
    write(
        r,
        "proc/21/status",
        &status("zombie", 21, 21, 20, "Kthread:\t0\nThreads:\t1\n"),
    );
    write(r, "proc/21/cmdline", b"");
    for names in [true, false] {
        let mut p = poller(
            r,
            ProcessStatsSettings {
                record_thread_names: names,
                record_process_age: true,
                ..Default::default()
            },
        );
        let (tree, _) = p.scan_all();
        let mut s = tracebox::protozero::VecStream::new();
        tracebox::traced_probes::ps::write_process_tree_packet(&mut s, &tree.unwrap());
        let hex: String = s.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        let want = if names { PINNED_NAMES } else { PINNED_NO_NAMES };
        assert_eq!(hex, want, "names {names}");
    }
}

const PINNED_NAMES: &str = "40e80712a08280000aa6808000080110001a0a2f7362696e2f696e69741a092d2d766572626f736528e8073880e2a2c80140000a9a808000080210001a086b74687265616464480128e8073880ade20440010a95808000080c10011a05696e6e657228e80730013880bbb0210aa2808000081410011a01611a001a07efbfbdefbfbd621a0463efbfbd1a03e282ac28e80740000a93808000081510141a067a6f6d626965480128e8074000128a808000080118011204696e6974128c808000080518011206776f726b6572128e8080000802180212086b74687265616464128d808000080c180c20011205696e6e6572128f808000080d180c20021207696e6e65722d74128b8080000814181412056f6464c3a9128c8080000815181512067a6f6d62696518e907";
const PINNED_NO_NAMES: &str = "40e80712e98180000aa6808000080110001a0a2f7362696e2f696e69741a092d2d766572626f736528e8073880e2a2c80140000a9a808000080210001a086b74687265616464480128e8073880ade20440010a95808000080c10011a05696e6e657228e80730013880bbb0210aa2808000081410011a01611a001a07efbfbdefbfbd621a0463efbfbd1a03e282ac28e80740000a93808000081510141a067a6f6d626965480128e80740001284808000080118011284808000080518011284808000080218021286808000080c180c20011286808000080d180c200212848080000814181412848080000815181518e907";
