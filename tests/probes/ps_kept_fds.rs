//! Periodic stats polls through kept-open /proc fds, on the live system.
//! Alone in its test binary: it counts this process's fds on a child's
//! /proc files, which pollers of other tests would also open.

use tracebox::traced_probes::fs_root::FsRoot;
use tracebox::traced_probes::ps::{ProcessStatsPacket, ProcessStatsPoller, ProcessStatsSettings};

fn settings() -> ProcessStatsSettings {
    ProcessStatsSettings {
        on_demand_dumps: true,
        proc_stats_poll_ms: 1000,
        record_process_runtime: true,
        ..Default::default()
    }
}

/// Periodic polls re-read status/stat/oom_score_adj through fds kept open:
/// values must follow the process (a changed oom_score_adj shows up), and
/// the fds of an exited process are closed, with nothing counted as error.
#[test]
fn stats_polls_through_kept_fds_follow_changes_and_exits() {
    let mut child = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let mut p = ProcessStatsPoller::new(settings(), &FsRoot::host(), Box::new(|| 1));
    let sample = |stats: Option<ProcessStatsPacket>| {
        stats.and_then(|s| s.processes.into_iter().find(|s| s.pid == pid))
    };
    let first = sample(p.poll_stats().0).expect("child sampled");
    assert!(first.oom_score_adj.is_some());
    // Our fds open on /proc files starting with `prefix`.
    let open_on = |prefix: &str| {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|l| l.to_string_lossy().starts_with(prefix))
            .count()
    };
    let open_on_child = || open_on(&format!("/proc/{pid}/"));
    if std::path::Path::new("/proc/2/stat").exists() {
        // kthreadd: its status has no memory counters and is never read
        // again, so it is not kept; its stat (runtimes) is.
        assert_eq!(open_on("/proc/2/status"), 0);
        assert_eq!(open_on("/proc/2/stat"), 1);
    }
    assert!(p.kept_fds() >= 3);
    assert_eq!(open_on_child(), 3); // status, stat, oom_score_adj
    std::fs::write(format!("/proc/{pid}/oom_score_adj"), "123").unwrap();
    // The cache TTL is one tick: every value is emitted again.
    let second = sample(p.poll_stats().0).expect("child sampled again");
    assert_eq!(second.oom_score_adj, Some(123));
    assert_eq!(second.vm_size_kb, first.vm_size_kb);
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(sample(p.poll_stats().0).is_none());
    assert_eq!(open_on_child(), 0);
    assert_eq!(p.errors().total(), 0, "{:?}", p.errors());
}
