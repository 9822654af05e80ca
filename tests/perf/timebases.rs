//! Timebases other than cpu-clock, and options of where and how samples
//! are taken: a tracepoint with a filter, sampled at every hit (period 1);
//! one CPU of two (target_cpu), a CPU that cannot be opened left out
//! (ignore_open_failure), kernel frames only, stamped on CLOCK_REALTIME.

use crate::traced_perf::{build_load, lost_in_trace, record, run_load, samples};

fn realtime_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// sched:sched_switch filtered in the kernel to one command going to
/// sleep (prev_state 1: preemptions of a loaded machine are left out):
/// every nap is a sample (period 1), its stack goes from
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
         filter: \"prev_comm == \\\"perf_tp_nap\\\" && prev_state == 1\" } } \
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

/// Runs `load` under `perf stat -a`, which counts the `sched:sched_switch`
/// hits `filter` passes system-wide in an event of its own, independent of
/// traced_perf's: the kernel's hit count.
fn run_counting_switches(
    load: &std::path::Path,
    args: &[&str],
    filter: &str,
    out: &std::path::Path,
) -> u64 {
    let st = std::process::Command::new("perf")
        .args([
            "stat",
            "-a",
            "-x,",
            "-e",
            "sched:sched_switch",
            "--filter",
            filter,
            "-o",
        ])
        .arg(out)
        .arg("--")
        .arg(load)
        .args(args)
        .status()
        .expect("perf (linux-perf) is needed");
    assert!(st.success());
    let text = std::fs::read_to_string(out).unwrap();
    text.lines()
        .find(|l| l.contains("sched:sched_switch"))
        .and_then(|l| l.split(',').next()?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in perf stat's output: {text}"))
}

/// The same tracepoint at period 1 with DWARF unwinding, each sample
/// carrying a 64 KiB stack copy, into a 128 KiB ring that nothing reads
/// before the stop: one sample fits, every later one is lost. The kernel
/// writes a LOST record only when a later record fits (an exec's COMM
/// record, say), so the losses after the last such record were in no
/// record at all, only in the event's own lost count (PERF_FORMAT_LOST),
/// which the stop reads. Every hit the kernel counted is a sample in the
/// trace or a loss the trace counts, and the end line names the loss. Only
/// sleeps are hits (prev_state S): the exit's switch has no user stack and
/// would fit. The kernel counts lost records, not samples: an exec's COMM
/// record that did not fit counts too, so the sum may pass the hits by a
/// few on a busy machine.
#[test]
fn a_dwarf_tracepoint_accounts_for_every_hit_with_its_ring_full_at_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let comm = "perf_tp_dwarf";
    let nap = build_load(dir, comm);
    let naps = 300;
    let filter = format!("prev_comm == \"{comm}\" && prev_state == 1");
    let mut hits = 0;
    let run = record(
        dir,
        &format!(
            "timebase {{ period: 1 tracepoint {{ name: \"sched:sched_switch\" filter: {filter:?} }} }} \
             callstack_sampling {{ kernel_frames: true }} \
             ring_buffer_pages: 32 ring_buffer_read_period_ms: 60000"
        ),
        || {
            let args = ["nap", &naps.to_string()];
            hits = run_counting_switches(&nap, &args, &filter, &dir.join("stat"));
        },
    );
    let all = samples(&run);
    let lost = lost_in_trace(&run);
    let log = std::fs::read_to_string(dir.join("perf.log")).unwrap();
    assert!(
        hits >= naps - 5,
        "perf stat counted {hits} sleeps for {naps}"
    );
    assert!(
        !all.is_empty() && all.len() < 5,
        "{} samples: {log}",
        all.len()
    );
    let accounted = all.len() as u64 + lost;
    assert!(
        accounted >= hits && accounted <= hits + hits / 10,
        "{} samples + {lost} lost for {hits} hits the kernel counted: {log}",
        all.len()
    );
    assert!(
        run.end_line
            .contains(&format!("LOST {lost} perf records in the kernel")),
        "end line: {:?}",
        run.end_line
    );
}
