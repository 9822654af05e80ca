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

/// The renaming load: writes markers carrying its own /proc/self/comm to
/// `marker`, renaming itself (prctl PR_SET_NAME) twice in between.
fn rename_script(marker: &Path) -> String {
    format!(
        "import ctypes\n\
         f = open('{}', 'w')\n\
         comm = lambda: open('/proc/self/comm').read().strip()\n\
         for i, n in enumerate([b'', b'tbxrenamed', b'tbxagain']):\n\
         \x20   if n: ctypes.CDLL(None).prctl(15, n, 0, 0, 0)\n\
         \x20   f.write('tbxname %d %s' % (i, comm())); f.flush()\n",
        marker.display()
    )
}

/// (oldcomm, newcomm) of the task_rename lines of a dump that rename to
/// the load's names.
fn renames(dump: &str) -> Vec<String> {
    let lines = dump.lines().filter(|l| l.contains(" task_rename: "));
    let fields = lines.filter_map(|l| {
        let old = l.split(" oldcomm=").nth(1)?.split(' ').next()?;
        let new = l.split(" newcomm=").nth(1)?.split(' ').next()?;
        new.starts_with("tbx").then(|| format!("{old}->{new}"))
    });
    fields.collect()
}

/// A process renames itself twice (prctl PR_SET_NAME) between markers that
/// carry its own reading of /proc/self/comm: each marker's line names the
/// task as the kernel called it when it wrote the marker. trace-cmd records
/// the same renames (its task column shows the final name on every line,
/// so only the task_rename fields compare).
#[test]
fn events_name_tasks_as_they_were_called_then() {
    let tmp = tempfile::tempdir().unwrap();
    let instance = "tbx_report_rename";
    let ev = r#"ftrace_events: "task/task_rename" ftrace_events: "ftrace/print"
        ftrace_events: "sched/sched_switch""#;
    let rec = start_recording(tmp.path(), instance, ev, false);
    py(&[
        "-c",
        &rename_script(&instance_dir(instance).join("trace_marker")),
    ]);
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
    let ours = renames(&dump);
    assert_eq!(
        ours,
        [
            format!("{}->tbxrenamed", names[0]),
            "tbxrenamed->tbxagain".into()
        ]
    );

    let tc_instance = "tbx_report_rename_tc";
    let _ = std::fs::remove_dir(instance_dir(tc_instance));
    let dat = tmp.path().join("t.dat");
    let script = tmp.path().join("rename.py");
    std::fs::write(
        &script,
        rename_script(&instance_dir(tc_instance).join("trace_marker")),
    )
    .unwrap();
    // trace-cmd exits 1 after recording here (see the dump test); the data
    // is written.
    Command::new("trace-cmd")
        .args(["record", "-d", "--no-filter", "-B", tc_instance])
        .args(["-e", "task:task_rename", "-o"])
        .arg(&dat)
        .arg(python().unwrap())
        .arg(&script)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("trace-cmd is not installed (scripts/test.sh installs it)");
    let _ = std::fs::remove_dir(instance_dir(tc_instance));
    let tc = Command::new("trace-cmd")
        .arg("report")
        .arg("-i")
        .arg(&dat)
        .output();
    let tc = String::from_utf8_lossy(&tc.unwrap().stdout).into_owned();
    assert_eq!(renames(&tc), ours, "trace-cmd:\n{tc}");
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

fn boottime_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// ftrace on its `mono_raw` clock (here about 250 ms off BOOTTIME): the
/// markers come out at the BOOTTIME the writer read around each write,
/// converted through the service's ClockSnapshots (within 1 ms, for the
/// two clocks' rate difference over the recording).
#[test]
fn mono_raw_ftrace_events_come_out_on_boottime() {
    let tmp = tempfile::tempdir().unwrap();
    let instance = "tbx_report_monoraw";
    let ev = r#"ftrace_events: "ftrace/print" ftrace_events: "sched/sched_waking"
        use_monotonic_raw_clock: true"#;
    let rec = start_recording(tmp.path(), instance, ev, false);
    let mut marker = std::fs::OpenOptions::new()
        .write(true)
        .open(instance_dir(instance).join("trace_marker"))
        .unwrap();
    let mut around = Vec::new();
    for i in 0..5 {
        let before = boottime_ns();
        std::io::Write::write_all(&mut marker, format!("tbxraw {i}").as_bytes()).unwrap();
        around.push((before, boottime_ns()));
    }
    drop(marker);
    let trace = stop_recording(rec, tmp.path());
    let t = trace.to_str().unwrap();
    let dump = report_ok(&["--events", t]);
    for (i, (before, after)) in around.iter().enumerate() {
        let (_, at) = task_and_time(&dump, &format!("tbxraw {i}"));
        let (s, us) = at.split_once('.').unwrap();
        let ns = s.parse::<u64>().unwrap() * 1_000_000_000 + us.parse::<u64>().unwrap() * 1000;
        assert!(
            ns + 1_000_000 >= *before && ns <= after + 1_000_000,
            "marker {i} at {at}, written between {} and {}",
            micros(*before),
            micros(*after)
        );
    }
    assert!(report_ok(&[t]).contains("clock boot (ftrace clock mono_raw)"));
}

/// The header's duration is the session's (a quiet 2 s trace is 2 s, not
/// the span of its few events), and traced_probes' own `ksyms-load`
/// thread, gone before process_stats looks, is a thread of traced_probes,
/// not a process of its own.
#[test]
fn header_is_the_sessions_length_and_our_helper_threads_join_their_process() {
    use crate::report::start_recording_config;
    use crate::report_end_line::py_json;
    let dir = tempfile::tempdir().unwrap();
    let instance = "tbx_report_session";
    let config = format!(
        r#"buffers {{ size_kb: 8192 }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch" instance_name: "{instance}"
    symbolize_ksyms: true }} }} }}
data_sources {{ config {{ name: "linux.process_stats" }} }}
data_sources {{ config {{ name: "linux.system_info" }} }}
duration_ms: 2000
"#
    );
    let child = start_recording_config(dir.path(), instance, &config);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let trace = dir.path().join("trace.pftrace");
    let json = report_ok(&["--json", trace.to_str().unwrap()]);
    let duration: u64 = py_json(&json, "d['duration_ns']").parse().unwrap();
    assert!(duration >= 1_900_000_000, "{duration} ns for a 2 s session");
    let owners = py_json(
        &json,
        "sorted({p['name'] for t in d['threads'] if t['name']=='ksyms-load' \
         for p in d['processes'] if p['pid']==t['pid']})",
    );
    // The loader may finish before tracing starts; when it ran, it is ours.
    if owners != "[]" {
        assert!(owners.contains("traced_probes"), "{owners}");
    }
    let pids_named_like_it = py_json(
        &json,
        "[p['pid'] for p in d['processes'] if p['name']=='ksyms-load']",
    );
    assert_eq!(pids_named_like_it, "[]", "ksyms-load shown as a process");
}
