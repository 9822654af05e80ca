//! callstack_sampling.scope against real processes: a target pid, target
//! cmdlines narrowed by an excluded cmdline and an excluded pid, and
//! additional_cmdline_count admitting at most that many other processes.

use std::collections::BTreeSet;
use std::process::Child;

use crate::traced_perf::{build_load, log_stat, record, run_load, samples};

/// Kills and reaps a load that runs until the test ends.
struct Load(Child);

impl Drop for Load {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn target_pids_cmdlines_exclusions_and_additional_processes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let bin = |name| build_load(dir, name);
    let (by_pid, excl_pid, excl_cmd, by_cmd, other1, other2) = (
        bin("perf_pid_hot"),
        bin("perf_sc_expid"),
        bin("perf_sc_excl"),
        bin("perf_sc_in"),
        bin("perf_other_1"),
        bin("perf_other_2"),
    );
    // Pids named in the config run before it is written.
    let a = Load(run_load(&by_pid, &["split", "1000000"]));
    let c = Load(run_load(&excl_pid, &["split", "1000000"]));
    let (pid_a, pid_c) = (a.0.id(), c.0.id());
    let mut pids = (0, 0, 0, 0);
    // The kernel's walk (the loads have frame pointers): 64 KiB stack
    // copies of every process on every CPU at 1 kHz would overrun the
    // default rings, and this test is about who is sampled.
    let run = record(
        dir,
        &format!(
            "timebase {{ frequency: 1000 counter: SW_CPU_CLOCK }} \
             callstack_sampling {{ scope {{ target_pid: {pid_a} target_cmdline: \"perf_sc_*\" \
             exclude_pid: {pid_c} exclude_cmdline: \"perf_sc_excl\" \
             additional_cmdline_count: 1 }} user_frames: UNWIND_KERNEL_FRAME_POINTER }} \
             ring_buffer_read_period_ms: 50"
        ),
        || {
            let mut loads = [
                run_load(&excl_cmd, &["split", "700"]),
                run_load(&by_cmd, &["split", "700"]),
                run_load(&other1, &["split", "700"]),
                run_load(&other2, &["split", "700"]),
            ];
            pids = (loads[0].id(), loads[1].id(), loads[2].id(), loads[3].id());
            for l in &mut loads {
                assert!(l.wait().unwrap().success());
            }
        },
    );
    drop((a, c));
    let (pid_b, pid_d, _, _) = pids;
    let all = samples(&run);
    let seen: BTreeSet<u32> = all.iter().map(|s| s.pid).collect();
    assert!(seen.contains(&pid_a), "the target pid has no sample");
    assert!(
        seen.contains(&pid_d),
        "the target cmdline has no sample: pids a {pid_a} b {pid_b} c {pid_c} d {pid_d}, seen {seen:?}; {}",
        std::fs::read_to_string(dir.join("perf.log")).unwrap()
    );
    assert!(!seen.contains(&pid_c), "a sample of the excluded pid");
    assert!(!seen.contains(&pid_b), "a sample of the excluded cmdline");
    // Whoever came first (one of the loads or any other process of this
    // machine) takes the one additional place; nobody else gets in.
    let others: Vec<&u32> = seen
        .iter()
        .filter(|p| ![pid_a, pid_d].contains(p))
        .collect();
    assert!(
        others.len() <= 1,
        "more than one additional process: {others:?}"
    );
}

/// A process first sampled before it execs its program (a shell busy in a
/// loop, then `exec`): the shell's samples are out of scope, and once the
/// exec is seen (a COMM record of exec) the process is decided again by its
/// new command line and its frames are named from the new program's maps.
#[test]
fn a_process_is_decided_again_when_it_execs() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_exec_hot");
    let mut pid = 0;
    let run = record(
        dir,
        "timebase { frequency: 1000 counter: SW_CPU_CLOCK } \
         callstack_sampling { scope { target_cmdline: \"perf_exec_hot\" } } \
         ring_buffer_read_period_ms: 50",
        || {
            let script = format!(
                "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; exec {} split 1000",
                hot.display()
            );
            let mut c = std::process::Command::new("sh")
                .args(["-c", &script])
                .spawn()
                .unwrap();
            pid = c.id();
            assert!(c.wait().unwrap().success());
        },
    );
    let log = std::fs::read_to_string(dir.join("perf.log")).unwrap();
    let all = samples(&run);
    let mine: Vec<_> = all.iter().filter(|s| s.pid == pid).collect();
    assert!(
        mine.iter()
            .any(|s| s.names.iter().any(|n| n == "hot_three")),
        "no sample of the exec'd program: {} samples of pid {pid}; {log}",
        mine.len()
    );
    assert!(
        log_stat(&log, "out of scope").is_some_and(|n| n > 0),
        "the shell before exec was sampled and left out: {log}"
    );
}
