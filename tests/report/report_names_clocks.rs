//! `report --events` puts every event at its time on the trace clock and
//! names each task as it was called at that time.

use crate::report::{report_ok, start_recording, stop_recording};
use crate::support::probes::{instance_dir, python, ROOT};

use std::path::Path;
use std::process::Command;

/// (task name, trace time in "secs.micros") of the dump line containing
/// `text`.
fn task_and_time(dump: &str, text: &str) -> (String, String) {
    let l = dump
        .lines()
        .find(|l| l.contains(text))
        .unwrap_or_else(|| panic!("no {text:?} in\n{dump}"));
    let (task, rest) = l.split_once(" [").unwrap();
    let name = task.trim().rsplit_once('-').unwrap().0.to_owned();
    let time = rest.split_once("] ").unwrap().1.trim_start();
    (name, time.split_once(':').unwrap().0.to_owned())
}

fn micros(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000_000, ns % 1_000_000_000 / 1000)
}

/// Runs the Python venv on `args`, returning stdout.
fn py(args: &[&str]) -> String {
    let out = Command::new(python().expect("no Python venv: run scripts/setup-python.sh"))
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

/// A process renames itself twice (prctl PR_SET_NAME) between markers that
/// carry its own reading of /proc/self/comm: each marker's line names the
/// task as the kernel called it when it wrote the marker.
#[test]
fn events_name_tasks_as_they_were_called_then() {
    let tmp = tempfile::tempdir().unwrap();
    let instance = "tbx_report_rename";
    let ev = r#"ftrace_events: "task/task_rename" ftrace_events: "ftrace/print"
        ftrace_events: "sched/sched_switch""#;
    let rec = start_recording(tmp.path(), instance, ev, false);
    let marker = instance_dir(instance).join("trace_marker");
    let script = format!(
        "import ctypes\n\
         f = open('{}', 'w')\n\
         comm = lambda: open('/proc/self/comm').read().strip()\n\
         for i, n in enumerate([b'', b'tbxrenamed', b'tbxagain']):\n\
         \x20   if n: ctypes.CDLL(None).prctl(15, n, 0, 0, 0)\n\
         \x20   f.write('tbxname %d %s' % (i, comm())); f.flush()\n",
        marker.display()
    );
    py(&["-c", &script]);
    let trace = stop_recording(rec, tmp.path());
    let dump = report_ok(&["--events", trace.to_str().unwrap()]);
    let mut names = Vec::new();
    for i in 0..3 {
        let line = dump.lines().find(|l| l.contains(&format!("tbxname {i} ")));
        let said = line.unwrap().rsplit(' ').next().unwrap().to_owned();
        let (task, _) = task_and_time(&dump, &format!("tbxname {i} "));
        assert_eq!(task, said, "marker {i}");
        names.push(said);
    }
    assert_eq!(&names[1..], ["tbxrenamed", "tbxagain"]);
    assert_ne!(names[0], "tbxagain");
    assert!(dump.contains("task_rename:"), "{dump}");
}

/// SDK events stamped on a sequence's own clock (microseconds, declared by
/// that sequence's ClockSnapshot) and on CLOCK_MONOTONIC come out at the
/// BOOTTIME instants hand-computed from the snapshots, in time order among
/// the ftrace markers, on the task the track descriptor names.
#[test]
fn sdk_events_on_other_clocks_line_up_with_ftrace() {
    let tmp = tempfile::tempdir().unwrap();
    let instance = "tbx_report_clocks";
    let ev = r#"ftrace_events: "ftrace/print" ftrace_events: "sched/sched_waking""#;
    let rec = start_recording(tmp.path(), instance, ev, false);
    let load = format!(
        "for i in $(seq 1 20); do echo \"tbxclk $i\" > {}/trace_marker; done",
        instance_dir(instance).display()
    );
    assert!(Command::new("sh")
        .args(["-c", &load])
        .status()
        .unwrap()
        .success());
    let trace = stop_recording(rec, tmp.path());
    let script = Path::new(ROOT).join("tests/py/sdk_clock_events.py");
    let t = trace.to_str().unwrap();
    let want = py(&[script.to_str().unwrap(), t, "tbxclk 10", "tbxclk 15"]);
    let want: Vec<u64> = want
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.parse().unwrap())
        .collect();
    let dump = report_ok(&["--events", t]);

    let (marker_task, marker_15) = task_and_time(&dump, "tbxclk 15");
    let (task, custom) = task_and_time(&dump, "I tbx_custom");
    assert_eq!(custom, micros(want[0]));
    assert_eq!(task, marker_task);
    let (_, mono) = task_and_time(&dump, "I tbx_mono");
    assert_eq!(mono, micros(want[1]));
    assert_eq!(mono, marker_15);
    // Every line in time order, the SDK events among the markers.
    let times: Vec<String> = dump
        .lines()
        .map(|l| l.split_once("] ").unwrap().1.trim_start())
        .map(|r| r.split_once(':').unwrap().0.to_owned())
        .collect();
    let parse = |s: &String| -> f64 { s.parse().unwrap() };
    assert!(
        times.windows(2).all(|w| parse(&w[0]) <= parse(&w[1])),
        "{dump}"
    );
    let at = |text: &str| dump.lines().position(|l| l.contains(text)).unwrap();
    assert!(at("tbxclk 10") < at("tbx_custom") && at("tbx_custom") < at("tbxclk 20"));
    let summary = report_ok(&[t]);
    assert!(
        !summary.contains("timestamps_without_clock_path"),
        "{summary}"
    );
}
