//! The pidfd fast path of the full /proc scan against the status path, on
//! the live system: both must describe the same processes identically.

use std::process::{Child, Command, Stdio};

use tracebox::traced_probes::fs_root::FsRoot;
use tracebox::traced_probes::ps::{
    ProcessStatsPoller, ProcessStatsSettings, ProcessTreePacket, ScanSource, TreeProcess,
};

fn settings(names: bool) -> ProcessStatsSettings {
    ProcessStatsSettings {
        record_thread_names: names,
        record_process_age: true,
        on_demand_dumps: true,
        ..Default::default()
    }
}

fn scan(names: bool, source: ScanSource) -> (bool, ProcessTreePacket) {
    let mut p = ProcessStatsPoller::new(settings(names), &FsRoot::host(), Box::new(|| 1));
    let pidfd = p.set_scan_source(source);
    let tree = p.scan_all().0.expect("a process tree");
    assert_eq!(p.errors().total(), 0, "{:?}", p.errors());
    (pidfd, tree)
}

fn find(tree: &ProcessTreePacket, pid: i32) -> Option<&TreeProcess> {
    tree.processes.iter().find(|p| p.pid == pid)
}

/// Waits until `pid` has exec'd `want` (spawn returns before exec).
fn wait_for_exec(pid: u32, want: &str) {
    let path = format!("/proc/{pid}/cmdline");
    for _ in 0..500 {
        if std::fs::read(&path).is_ok_and(|b| b.starts_with(want.as_bytes())) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("{pid} never ran {want}: {:?}", std::fs::read(&path));
}

struct Reaped(Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// SIGKILLs a process we did not spawn directly (the init of a nested pid
/// namespace ignores other signals from outside).
struct KillOnDrop(i32);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        let _ = kill(nix::unistd::Pid::from_raw(self.0), Signal::SIGKILL);
    }
}

/// The only child (by ppid) of `parent`, from /proc.
fn child_of(parent: u32) -> Option<i32> {
    let path = format!("/proc/{parent}/task/{parent}/children");
    for _ in 0..500 {
        if let Ok(s) = std::fs::read_to_string(&path) {
            if let Some(pid) = s.split_whitespace().next().and_then(|p| p.parse().ok()) {
                return Some(pid);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

#[test]
fn pidfd_and_status_paths_agree() {
    let me = std::process::id() as i32;
    let child = Reaped(
        Command::new("sleep")
            .args(["3599", "1"]) // sleep sums its arguments
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for_exec(child.0.id(), "sleep");
    // A process in a nested pid namespace, if we may create one.
    let nested = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "sleep", "3599", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
        .map(Reaped);
    let nested_pid = nested.as_ref().and_then(|n| child_of(n.0.id()));
    eprintln!("nested pid namespace child: {nested_pid:?}");
    let _kill_nested = nested_pid.map(KillOnDrop);
    if let Some(pid) = nested_pid {
        wait_for_exec(pid as u32, "sleep");
    }
    let worker = std::thread::spawn(std::thread::park);

    for names in [false, true] {
        let (fast_on, fast) = scan(names, ScanSource::Pidfd);
        let (slow_on, slow) = scan(names, ScanSource::Status);
        assert!(!slow_on);
        if !fast_on {
            eprintln!("PIDFD_GET_INFO unsupported here: only the status path ran");
        }
        let mut pids = vec![me, child.0.id() as i32, 2];
        pids.extend(nested_pid);
        for pid in pids {
            let (f, s) = (find(&fast, pid), find(&slow, pid));
            if pid == 2 && s.is_none() {
                continue; // No kthreadd visible (we are in a pid namespace).
            }
            assert_eq!(f, s, "pid {pid}, names {names}");
        }
        let c = find(&fast, child.0.id() as i32).unwrap();
        assert_eq!(c.cmdline.to_vec(), ["sleep", "3599", "1"]);
        assert_eq!(c.ppid, me);
        assert_eq!(c.uid as u32, nix::unistd::getuid().as_raw());
        assert_eq!(c.is_kthread, find(&slow, me).unwrap().is_kthread);
        if let Some(k) = find(&fast, 2) {
            assert!(k.cmdline_is_comm && k.cmdline.to_vec() == ["kthreadd"]);
        }
        if let Some(pid) = nested_pid {
            assert_eq!(find(&fast, pid).unwrap().nspid, [1]);
        }
        // Our threads (main + the parked one + the test harness's), named
        // alike by both paths.
        let threads = |t: &ProcessTreePacket| {
            let mut v: Vec<_> = t.threads.iter().filter(|t| t.tgid == me).cloned().collect();
            v.sort_by_key(|t| t.tid);
            v
        };
        let (ft, st) = (threads(&fast), threads(&slow));
        assert!(ft.len() >= 3, "{ft:?}");
        assert_eq!(ft, st);
    }
    worker.thread().unpark();
    worker.join().unwrap();
}

#[test]
fn fixture_roots_never_use_pidfds() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = ProcessStatsPoller::new(settings(false), &FsRoot::new(dir.path()), Box::new(|| 1));
    assert!(!p.set_scan_source(ScanSource::Pidfd));
    assert!(!p.uses_pidfd_scan());
}
