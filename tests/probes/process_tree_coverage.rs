//! End to end: a scheduling trace (ftrace plus process_stats, no start-up
//! scan) in which every task that shows up in sched_switch / sched_waking
//! and was still alive when the recording ended (so also every task alive
//! throughout) is described in the process tree, threads with their right
//! tgid. Uses `--private-sockets`: private daemons, not the system ones.

use crate::support::cli as cli_support;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use cli_support::{python, wait_exit, Killed};

/// tid -> (tgid, start time in ticks) of every task in /proc right now.
fn tasks() -> HashMap<i32, (i32, u64)> {
    let mut out = HashMap::new();
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(tgid) = p.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(dir) = std::fs::read_dir(p.path().join("task")) else {
            continue;
        };
        for t in dir.flatten() {
            let Ok(tid) = t.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
                continue;
            };
            // Field 22 (starttime), counted after the ")" closing comm.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
                continue;
            };
            if let Some(start) = after
                .split_whitespace()
                .nth(19)
                .and_then(|s| s.parse().ok())
            {
                out.insert(tid, (tgid, start));
            }
        }
    }
    out
}

/// Threads of this process that wake every few ms until `stop`; their tids.
fn waking_threads(n: usize, stop: &Arc<AtomicBool>) -> Vec<(i32, std::thread::JoinHandle<()>)> {
    (0..n)
        .map(|_| {
            let (tx, rx) = mpsc::channel();
            let stop = stop.clone();
            let h = std::thread::spawn(move || {
                tx.send(own_tid()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(3));
                }
            });
            (rx.recv().unwrap(), h)
        })
        .collect()
}

/// The calling thread's id, from the `/proc/thread-self` link ("PID/task/TID").
fn own_tid() -> i32 {
    let link = std::fs::read_link("/proc/thread-self").unwrap();
    link.file_name().unwrap().to_string_lossy().parse().unwrap()
}

fn write_pairs(path: &Path, pairs: impl Iterator<Item = (i32, i32)>) {
    let text: String = pairs.map(|(tid, tgid)| format!("{tid} {tgid}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn sched_tasks_alive_during_the_trace_are_in_the_process_tree() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::process::id() as i32;
    let mut required: Vec<(i32, i32)> = Vec::new();

    // Another process with several threads, all waking often.
    let mut py = Killed(
        Command::new(python())
            .args([
                "-c",
                "import threading, time\n\
                 def spin():\n    while True: time.sleep(0.004)\n\
                 for _ in range(3): threading.Thread(target=spin, daemon=True).start()\n\
                 print('ready', flush=True)\n\
                 spin()\n",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut line = String::new();
    let mut stdout = std::io::BufReader::new(py.0.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let py_pid = py.0.id() as i32;
    let py_tids: Vec<i32> = std::fs::read_dir(format!("/proc/{py_pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    assert_eq!(py_tids.len(), 4, "{py_tids:?}");
    required.extend(py_tids.iter().map(|&t| (t, py_pid)));

    // Single-threaded processes that wake each time their child exits.
    let shells: Vec<Killed> = (0..2)
        .map(|_| {
            Killed(
                Command::new("sh")
                    .args(["-c", "while :; do sleep 0.01; done"])
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    required.extend(shells.iter().map(|s| (s.0.id() as i32, s.0.id() as i32)));

    // Threads of this test process.
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = waking_threads(3, &stop);
    required.extend(threads.iter().map(|(t, _)| (*t, me)));

    // Compact sched (light mode's default), then full sched events: both
    // carry the pids that on-demand scans must describe.
    let full_cfg = dir.path().join("full.pbtx");
    std::fs::write(&full_cfg, FULL_SCHED_CONFIG).unwrap();
    let runs: [(&str, Vec<&str>); 2] = [
        (
            "compact",
            vec!["-t", "3s", "sched/sched_switch", "sched/sched_waking"],
        ),
        ("full", vec!["--txt", "-c", full_cfg.to_str().unwrap()]),
    ];
    for (tag, args) in runs {
        let out = dir.path().join(format!("{tag}.pftrace"));
        let before = tasks();
        let mut rec = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("--private-sockets")
            .args(&args)
            .args(["-o", out.to_str().unwrap()])
            .spawn()
            .unwrap();
        // Threads born while (most likely) recording: only on-demand scans
        // describe them; should they predate the start, they must be
        // described all the same.
        std::thread::sleep(Duration::from_millis(1500));
        let late = waking_threads(2, &stop);
        let mut required = required.clone();
        required.extend(late.iter().map(|(t, _)| (*t, me)));
        threads.extend(late);
        assert_eq!(wait_exit(&mut rec, Duration::from_secs(60)), 0, "{tag}");
        let after = tasks();
        // Alive for the whole recording: same (tid, tgid, start) before and
        // after. Tasks born during the recording and still alive are checked
        // too: whenever ftrace saw them, they were there to be scanned (tids
        // are handed out cyclically, so none is reused within 3 s).
        let whole = before
            .iter()
            .filter(|(tid, v)| after.get(tid) == Some(v))
            .count();
        assert!(whole > 0, "{tag}: no task outlived the recording?");
        let alive = after.iter().map(|(t, (g, _))| (*t, *g));
        check_coverage(tag, dir.path(), &out, alive, required);
    }
    stop.store(true, Ordering::Relaxed);
    for (_, h) in threads {
        h.join().unwrap();
    }
    drop(shells);
    drop(py);
}

/// ftrace with full sched events (no compact_sched) plus process_stats.
const FULL_SCHED_CONFIG: &str = r#"
buffers { size_kb: 8192 }
duration_ms: 3000
data_sources {
  config {
    name: "linux.ftrace"
    ftrace_config {
      ftrace_events: "sched/sched_switch"
      ftrace_events: "sched/sched_waking"
      compact_sched { enabled: false }
    }
  }
}
data_sources { config { name: "linux.process_stats" } }
"#;

fn check_coverage(
    tag: &str,
    dir: &Path,
    trace: &Path,
    alive: impl Iterator<Item = (i32, i32)>,
    required: Vec<(i32, i32)>,
) {
    let alive_path = dir.join(format!("{tag}-alive.txt"));
    let required_path = dir.join(format!("{tag}-required.txt"));
    write_pairs(&alive_path, alive);
    write_pairs(&required_path, required.into_iter());
    let check = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/pid_coverage.py"))
        .args([trace, &alive_path, &required_path])
        .output()
        .expect("run python (scripts/setup-python.sh)");
    let report = String::from_utf8_lossy(&check.stdout);
    eprintln!("{report}{}", String::from_utf8_lossy(&check.stderr));
    assert!(
        check.status.success(),
        "{tag}: process tree misses tasks:\n{report}"
    );
}
