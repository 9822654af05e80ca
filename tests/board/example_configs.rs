//! configs/: every example parses (and equals what Python's text_format
//! makes of it, in tests/py_crosscheck.rs), and each one records on our
//! daemons on private sockets, in a private tracefs instance, shortened to
//! a second or two. The trace is checked with the official descriptors.

use crate::support::cli as cli_support;
use crate::support::probes as traced_probes_common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use cli_support::{summary, wait_exit};
use traced_probes_common::start_our_daemons;

fn configs() -> Vec<PathBuf> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/configs");
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pbtx"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_example_parses() {
    let all = configs();
    assert!(all.len() >= 5, "{all:?}");
    for p in all {
        let text = std::fs::read_to_string(&p).unwrap();
        tracebox::cmd::pbtx::trace_config_txt_to_pb(&p.display().to_string(), &text)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The example, shortened and moved into its own tracefs instance.
pub(crate) fn shortened(text: &str, instance: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("duration_ms:") {
            out.push_str("duration_ms: 1500\n");
        } else if t.starts_with("trigger_timeout_ms:") {
            out.push_str("trigger_timeout_ms: 30000\n");
        } else if t.starts_with("triggers {") {
            out.push_str("triggers { name: \"dump_now\" stop_delay_ms: 500 }\n");
        } else {
            out.push_str(line);
            out.push('\n');
            if t.starts_with("ftrace_config {") {
                out.push_str(&format!("instance_name: \"{instance}\"\n"));
            }
        }
    }
    out
}

#[test]
fn every_example_records() {
    let dir = tempfile::tempdir().unwrap();
    let d = start_our_daemons(dir.path());
    let link = dir.path().join("perfetto");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
    for (i, p) in configs().into_iter().enumerate() {
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let instance = format!("tbx_cfg_{}_{i}", std::process::id());
        let text = shortened(&std::fs::read_to_string(&p).unwrap(), &instance);
        let cfg = dir.path().join(format!("{name}.pbtx"));
        std::fs::write(&cfg, &text).unwrap();
        let out = dir.path().join(format!("{name}.pftrace"));
        let mut rec = Command::new(&link)
            .args([
                "--txt",
                "-c",
                cfg.to_str().unwrap(),
                "-o",
                out.to_str().unwrap(),
            ])
            .env("PERFETTO_PRODUCER_SOCK_NAME", &d.socks.producer)
            .env("PERFETTO_CONSUMER_SOCK_NAME", &d.socks.consumer)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if text.contains("trigger_config") {
            std::thread::sleep(Duration::from_millis(1000));
            let t = Command::new(env!("CARGO_BIN_EXE_tracebox"))
                .args(["trigger_perfetto", "dump_now"])
                .env("PERFETTO_PRODUCER_SOCK_NAME", &d.socks.producer)
                .output()
                .unwrap();
            assert!(t.status.success(), "{name}: trigger failed");
        }
        let code = wait_exit(&mut rec, Duration::from_secs(60));
        let mut err = String::new();
        std::io::Read::read_to_string(&mut rec.stderr.take().unwrap(), &mut err).unwrap();
        assert_eq!(code, 0, "{name}: {err}");
        let s = summary(&out);
        assert!(
            s.num("compact_switches") > 0 || s.contains("\"sched_switch\""),
            "{name}: no scheduling events: {s:?}"
        );
        if text.contains("linux.process_stats") {
            assert!(s.contains("\"process_tree\""), "{name}: {s:?}");
        }
        if text.contains("trigger_config") {
            assert!(s.contains("\"triggers\": [\"dump_now\"]"), "{name}: {s:?}");
        }
        assert!(err.contains("Trace stats"), "{name}: {err}");
    }
}

/// The text configs README shows: bare fenced blocks that hold
/// `data_sources` or `buffers`, and `cat > NAME.pbtx <<EOF` heredocs.
pub(crate) fn readme_configs() -> Vec<(usize, String)> {
    let text = include_str!("../../README.md");
    let mut out = Vec::new();
    let mut block: Option<(usize, bool, String)> = None;
    let mut heredoc: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        if let Some((start, body)) = heredoc.as_mut() {
            if line == "EOF" {
                out.push((*start, std::mem::take(body)));
                heredoc = None;
            } else {
                body.push_str(line);
                body.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("```") {
            match block.take() {
                Some((start, true, body))
                    if body.contains("data_sources") || body.contains("buffers {") =>
                {
                    out.push((start, body))
                }
                Some(_) => {}
                None => block = Some((n + 1, rest.is_empty(), String::new())),
            }
            continue;
        }
        if let Some((_, _, body)) = block.as_mut() {
            if line.starts_with("cat > ") && line.contains(".pbtx <<") {
                heredoc = Some((n + 1, String::new()));
            } else {
                body.push_str(line);
                body.push('\n');
            }
        }
    }
    out
}

/// Every README config parses; those without triggers record what they
/// promise (the profiling example's process names need a process tree).
#[test]
fn readme_configs_parse_and_record_what_they_promise() {
    let all = readme_configs();
    assert!(all.len() >= 4, "{all:?}");
    assert!(
        all.iter().any(|(_, c)| c.contains("linux.perf")),
        "the profiling heredoc was not found"
    );
    for (line, text) in &all {
        tracebox::cmd::pbtx::trace_config_txt_to_pb(&format!("README.md:{line}"), text)
            .unwrap_or_else(|e| panic!("README.md:{line}: {e}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let d = start_our_daemons(dir.path());
    let link = dir.path().join("perfetto");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
    for (line, text) in all.iter().filter(|(_, t)| !t.contains("trigger_config")) {
        let instance = format!("tbx_readme_{}_{line}", std::process::id());
        let mut text = shortened(text, &instance);
        // Snippets (README says they go into a config) get the rest.
        if !text.contains("duration_ms:") {
            text.push_str("duration_ms: 1500\n");
        }
        if !text.contains("buffers {") {
            text.push_str("buffers { size_kb: 1024 }\n");
        }
        let cfg = dir.path().join(format!("readme{line}.pbtx"));
        std::fs::write(&cfg, &text).unwrap();
        let out = dir.path().join(format!("readme{line}.pftrace"));
        let o = Command::new(&link)
            .args(["--txt", "-c"])
            .arg(&cfg)
            .arg("-o")
            .arg(&out)
            .env("PERFETTO_PRODUCER_SOCK_NAME", &d.socks.producer)
            .env("PERFETTO_CONSUMER_SOCK_NAME", &d.socks.consumer)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "README.md:{line}: {err}");
        assert!(err.contains("Trace stats"), "README.md:{line}: {err}");
        let s = summary(&out);
        // process_stats promises named processes: only a scan at the start
        // gives them when nothing else (ftrace) names pids.
        if text.contains("linux.process_stats") {
            assert!(
                s.contains("\"process_tree\""),
                "README.md:{line}: no process tree (scan_all_processes_on_start?): {s:?}"
            );
        }
        if text.contains("sched/sched_switch") {
            assert!(
                s.num("compact_switches") > 0 || s.contains("\"sched_switch\""),
                "README.md:{line}: no scheduling events: {s:?}"
            );
        }
    }
}
