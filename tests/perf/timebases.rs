//! Timebases other than cpu-clock, and options of where and how samples
//! are taken: a tracepoint with a filter, sampled at every hit (period 1);
//! one CPU of two (target_cpu), a CPU that cannot be opened left out
//! (ignore_open_failure), kernel frames only, stamped on CLOCK_REALTIME.

use crate::traced_perf::{build_load, lost_in_trace, record, run_load, samples};

fn realtime_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// sched:sched_switch filtered in the kernel to one command: every switch
/// away from the napping load is a sample (period 1), its stack goes from
/// the load's main (libc's usleep keeps no frame, so it hides nap_loop)
/// through nanosleep down into the scheduler, and no other process
/// shows (no scope is set: the filter alone keeps them out).
#[test]
fn a_tracepoint_timebase_samples_every_filtered_hit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let nap = build_load(dir, "perf_tp_nap");
    let naps = 300;
    let mut pid = 0;
    let run = record(
        dir,
        "timebase { period: 1 tracepoint { name: \"sched:sched_switch\" \
         filter: \"prev_comm == \\\"perf_tp_nap\\\"\" } } \
         callstack_sampling { kernel_frames: true user_frames: UNWIND_KERNEL_FRAME_POINTER } \
         ring_buffer_read_period_ms: 50",
        || {
            let mut c = run_load(&nap, &["nap", &naps.to_string()]);
            pid = c.id();
            assert!(c.wait().unwrap().success());
        },
    );
    let all = samples(&run);
    assert!(
        all.iter().all(|s| s.pid == pid),
        "a sample of another process"
    );
    let lost = lost_in_trace(&run);
    assert!(
        all.len() as u64 + lost >= naps,
        "{} samples + {lost} lost for {naps} sleeps",
        all.len()
    );
    let in_scheduler = all
        .iter()
        .filter(|s| {
            let user = s.names.iter().position(|n| n == "main");
            let kernel = s.names.iter().position(|n| n == "do_nanosleep");
            let switch = s.names.iter().position(|n| n == "__schedule");
            let kernel = kernel.filter(|&k| switch.is_some_and(|s| k < s));
            matches!((user, kernel), (Some(u), Some(k)) if u < k)
        })
        .count();
    assert!(
        in_scheduler * 2 > all.len(),
        "{in_scheduler} of {} samples go from main through do_nanosleep into __schedule: {:?}",
        all.len(),
        &all[..all.len().min(3)]
    );
}

/// target_cpu 0 and a CPU that does not exist, with ignore_open_failure
/// (the loads run pinned to CPU 0):
/// the missing one is left out (and logged), every sample comes from CPU
/// 0; user_frames UNWIND_SKIP keeps kernel frames only; the samples and
/// their defaults are on CLOCK_REALTIME (timestamp_clock); and the clock
/// counts kernel time only (EventModifier COUNT_KERNEL): every sample was
/// taken in the kernel.
#[test]
fn one_cpu_kernel_frames_only_on_the_realtime_clock() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_cpu0_hot");
    let before = realtime_ns();
    let run = record(
        dir,
        "timebase { frequency: 1000 counter: SW_CPU_CLOCK timestamp_clock: PERF_CLOCK_REALTIME \
         modifiers: EVENT_MODIFIER_COUNT_KERNEL } \
         callstack_sampling { scope { target_cmdline: \"perf_cpu0_hot\" } kernel_frames: true \
         user_frames: UNWIND_SKIP } \
         target_cpu: 0 target_cpu: 4000 ignore_open_failure: true ring_buffer_read_period_ms: 50",
        || {
            // Both on CPU 0, or the scheduler may keep them on the other.
            let pinned = |args: &[&str]| {
                std::process::Command::new("taskset")
                    .args(["-c", "0"])
                    .arg(&hot)
                    .args(args)
                    .spawn()
                    .unwrap()
            };
            let mut a = pinned(&["split", "1500"]);
            let mut b = pinned(&["syscall", "300000"]);
            for c in [&mut a, &mut b] {
                assert!(c.wait().unwrap().success());
            }
        },
    );
    let after = realtime_ns();
    let log = std::fs::read_to_string(dir.join("perf.log")).unwrap();
    assert!(
        log.contains("cpu 4000 left out (ignore_open_failure)"),
        "{log}"
    );
    let all = samples(&run);
    assert!(all.len() > 50, "{} samples; {log}", all.len());
    assert!(all.iter().all(|s| s.cpu == 0), "a sample of another CPU");
    assert!(
        all.iter().all(|s| s.mode == 1),
        "a sample out of the kernel"
    );
    // Kernel frames only: each frame of each stack is in /kernel.
    assert!(
        all.iter()
            .all(|s| s.kframes > 0 && s.kframes == s.names.len()),
        "a user frame or no stack: {:?}",
        all.iter()
            .find(|s| s.kframes == 0 || s.kframes != s.names.len())
    );
    assert!(
        all.iter()
            .filter(|s| s.names.iter().any(|n| n == "ksys_read" || n == "vfs_read"))
            .count()
            > 10,
        "read(2)'s kernel functions"
    );
    // BUILTIN_CLOCK_REALTIME, and realtime stamps.
    assert!(
        run.lines.iter().any(|l| l == "clock 1"),
        "{:?}",
        &run.lines[..4]
    );
    assert!(
        all.iter().all(|s| s.ts >= before && s.ts <= after),
        "a timestamp off CLOCK_REALTIME: {:?} not in [{before}, {after}]",
        all.iter().find(|s| s.ts < before || s.ts > after)
    );
}
