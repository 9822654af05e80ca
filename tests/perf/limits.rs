//! The read budget (max_enqueued_footprint_kb): a pass decodes at most that
//! many ring bytes per CPU and leaves the rest for the next one; whatever
//! the ring could not hold meanwhile is counted as lost, in the trace and
//! on the end line, and the last pass at stop reads the rings whole.

use crate::traced_perf::{build_load, log_stat, lost_in_trace, record, run_load};

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
        stat(&log, "budget_hits") > 0,
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
                .contains(&format!("LOST {lost} perf samples in the kernel")),
            "end line: {:?} (trace says {lost})",
            run.end_line
        );
    }
    assert!(log.contains("ns CPU per sample"), "{log}");
}
