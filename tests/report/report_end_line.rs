//! The report's losses against what the recording said: the client's
//! end-of-trace line is the independent truth (it comes from traced's
//! GetTraceStats and the packets as they streamed by); the report, given
//! only the file, says the same words. And packets the report does not
//! know are counted and skipped without changing anything else.

use std::path::Path;
use std::process::Command;

use crate::report::{
    marker, report, report_ok, start_recording_config, stop_recording_stderr, write_marker,
};
use crate::support::probes::python;

/// `expr` evaluated by Python over the JSON document `json` (as `d`),
/// printed with `print`: Python's parser is the judge of the JSON.
pub(crate) fn py_json(json: &str, expr: &str) -> String {
    // Only the standard library's json: any Python 3 will do.
    let py = python().unwrap_or_else(|| "python3".into());
    let mut child = Command::new(py)
        .args([
            "-c",
            &format!("import json,sys\nd=json.load(sys.stdin)\nprint({expr})"),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), json.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "python {expr}: {}\n{json}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}

/// The client's end line: from "Trace stats:" up to the "Wrote" line
/// (the wrap hint is a second line).
fn client_end_line(stderr: &str) -> String {
    let from = stderr
        .find("Trace stats: ")
        .unwrap_or_else(|| panic!("no end line in {stderr}"));
    let rest = &stderr[from..];
    let to = rest.find("\nWrote ").unwrap_or(rest.len());
    rest[..to].trim_end().to_owned()
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A top-level `Trace.packet` holding one varint field `field`.
fn packet_with(field: u64) -> Vec<u8> {
    let mut inner = Vec::new();
    varint(field << 3, &mut inner);
    varint(42, &mut inner);
    let mut p = vec![0x0a];
    varint(inner.len() as u64, &mut p);
    p.extend(inner);
    p
}

#[test]
fn losses_say_what_the_recording_client_said() {
    let instance = "tbx_report_endline";
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A ring buffer far smaller than the load (it wraps), an event the
    // kernel does not have and a data source nobody offers: the line
    // names losses and things asked for and not obtained.
    let config = format!(
        r#"buffers {{ size_kb: 256 fill_policy: RING_BUFFER }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "sched/sched_switch" ftrace_events: "ftrace/print"
    ftrace_events: "tbx_nosuch/nosuch_event"
    instance_name: "{instance}" buffer_size_kb: 2048 }} }} }}
data_sources {{ config {{ name: "tbx.no_such_source" }} }}
data_sources {{ config {{ name: "linux.system_info" }} }}
duration_ms: 60000
"#
    );
    let rec = start_recording_config(dir, instance, &config);
    let mut m = marker(instance);
    let pad = "x".repeat(200);
    for i in 0..20_000 {
        write_marker(&mut m, &format!("tbxfill {i} {pad}"));
        if i % 1000 == 999 {
            // Let traced_probes read the kernel buffer into the ring.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
    drop(m);
    let (trace, stderr) = stop_recording_stderr(rec, dir);
    let want = client_end_line(&stderr);
    eprintln!("client: {want}");
    assert!(want.contains("LOST "), "the ring did not wrap: {stderr}");
    assert!(
        want.contains("unknown ftrace events or atrace categories: tbx_nosuch/nosuch_event"),
        "{want}"
    );
    assert!(
        want.contains("no producer offers data source tbx.no_such_source"),
        "{want}"
    );

    let trace = trace.to_str().unwrap();
    let json = report_ok(&["--json", trace]);
    let got = py_json(
        &json,
        "[l[1] for l in d['losses'] if l[0]=='trace_stats'][0]",
    );
    assert_eq!(got, want);
    let text = report_ok(&[trace]);
    assert!(text.contains(&format!("  trace_stats: {want}\n")), "{text}");

    unknown_packets_are_counted_and_skipped(Path::new(trace), &json);
}

/// The same trace with packets of a kind nobody writes and a top-level
/// field that is no packet: both counted by name, the rest unchanged.
fn unknown_packets_are_counted_and_skipped(trace: &Path, clean_json: &str) {
    let bytes = std::fs::read(trace).unwrap();
    let mut odd = packet_with(900);
    odd.extend(&bytes);
    odd.extend(packet_with(900));
    odd.extend([0x10, 0x07]); // Trace field 2, a varint: not a packet.
    let path = trace.with_file_name("odd.pftrace");
    std::fs::write(&path, odd).unwrap();
    let path = path.to_str().unwrap();
    let out = report(&[path]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("  unknown_packets: field 900: 2 packets skipped\n"),
        "{text}"
    );
    assert!(text.contains("  non_packet_fields: 1\n"), "{text}");
    let json = report_ok(&["--json", path]);
    for key in ["event_counts", "cpus", "threads", "machine"] {
        assert_eq!(
            py_json(&json, &format!("d['{key}']")),
            py_json(clean_json, &format!("d['{key}']")),
            "{key}"
        );
    }
}
