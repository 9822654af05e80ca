//! The read budget (max_enqueued_footprint_kb): a pass decodes at most that
//! many ring bytes per CPU and leaves the rest for the next one; whatever
//! the ring could not hold meanwhile is counted as lost, in the trace and
//! on the end line, and the last pass at stop reads the rings whole while
//! the service waits for it; what is left when that time runs out is lost,
//! and named.

use crate::traced_perf::{build_load, log_stat, lost_in_trace, record, record_with, run_load};

fn stat(log: &str, name: &str) -> u64 {
    log_stat(log, name).unwrap_or_else(|| panic!("no {name} in the stats line: {log}"))
}

#[test]
fn a_read_budget_defers_records_and_every_loss_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_budget_hot");
    let run = record(
        dir,
        "timebase { frequency: 4000 counter: SW_CPU_CLOCK } \
         callstack_sampling { kernel_frames: true } \
         ring_buffer_pages: 64 ring_buffer_read_period_ms: 500 max_enqueued_footprint_kb: 64",
        || {
            let mut c = run_load(&hot, &["split", "2000"]);
            assert!(c.wait().unwrap().success());
        },
    );
    let log = std::fs::read_to_string(dir.join("perf.log")).unwrap();
    assert!(
        stat(&log, "budget hits") > 0,
        "the budget never cut a pass: {log}"
    );
    // Every sample read is in the trace (record checks), and what the
    // kernel dropped is named.
    assert!(stat(&log, "samples") > 0);
    let lost = lost_in_trace(&run);
    assert_eq!(lost, stat(&log, "lost"));
    if lost > 0 {
        assert!(
            run.end_line
                .contains(&format!("LOST {lost} perf records in the kernel")),
            "end line: {:?} (trace says {lost})",
            run.end_line
        );
    }
    assert!(log.contains("ns CPU per sample"), "{log}");
}

/// Full 8 MiB rings that nothing reads before the stop (a 60 s read
/// period), and a service that waits 400 ms for the stop: traced_perf
/// reads for half of that, writes what is left as lost and acks in time,
/// so the trace and the end line count every sample the kernel took.
#[test]
fn the_stop_reads_while_the_service_waits_and_names_what_is_left() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_stop_hot");
    let run = record_with(
        dir,
        // A 200 ms stop read (half the timeout): two full 8 MiB rings take
        // about 0.5 s to read on an idle machine, longer on a busy one. The
        // other half covers counting what is left (a few ms) and a machine
        // loaded enough to hold traced_perf off the CPU (at load 7: 304 ms
        // of a 300 ms wait).
        "data_source_stop_timeout_ms: 400",
        // The kernel's walk: the rings fill with samples, not with 64 KiB
        // stack copies (the load has frame pointers). Scoped to the load, so
        // no other process's symbol tables (a compiler's, in CI) are loaded
        // while the stop reads.
        "timebase { frequency: 20000 counter: SW_CPU_CLOCK } \
         callstack_sampling { scope { target_cmdline: \"perf_stop_hot\" } kernel_frames: true \
         user_frames: UNWIND_KERNEL_FRAME_POINTER } \
         ring_buffer_pages: 2048 ring_buffer_read_period_ms: 60000",
        false,
        || {
            let mut c = run_load(&hot, &["split", "6000"]);
            assert!(c.wait().unwrap().success());
        },
    );
    let log = std::fs::read_to_string(dir.join("perf.log")).unwrap();
    let unread = stat(&log, "unread at stop");
    assert!(unread > 0, "the stop read everything within 200 ms: {log}");
    assert!(log.contains("the stop's 200 ms ran out"), "{log}");
    let lost = lost_in_trace(&run);
    assert_eq!(lost, stat(&log, "lost"), "{log}");
    assert!(lost >= unread);
    assert!(
        run.end_line
            .contains(&format!("LOST {lost} perf records in the kernel")),
        "end line: {:?} (trace says {lost})",
        run.end_line
    );
}
