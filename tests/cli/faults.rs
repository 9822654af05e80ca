//! Faults that leave a trace incomplete, each with real daemons and our
//! client: the test checks what is (and is not) in the trace and the words
//! on the end-of-trace line.

use crate::support::probes as traced_probes_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::mod_FtraceEvent::OneOfevent;
use tracebox::pb::protos::mod_TracePacket::OneOfdata;
use tracebox::pb::protos::Trace;
use traced_probes_common::*;

/// What a trace holds, as far as these tests care.
#[derive(Debug, Default)]
struct Held {
    prints: Vec<String>,
    ftrace_events: usize,
    process_tree_pids: usize,
    /// sched_switch events, compact or not.
    sched_switches: usize,
    ftrace_stats: usize,
    /// The last trace_stats' service-wide `chunks_discarded`.
    service_chunks_discarded: u64,
}

fn held(trace: &Path) -> Held {
    let bytes = std::fs::read(trace).unwrap();
    let trace =
        Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes).expect("the trace parses");
    let mut h = Held::default();
    for p in trace.packet {
        match p.data {
            OneOfdata::ftrace_events(b) => {
                h.sched_switches += b.compact_sched.map_or(0, |c| c.switch_timestamp.len());
                for e in b.event {
                    h.sched_switches += matches!(e.event, OneOfevent::sched_switch(_)) as usize;
                    h.ftrace_events += 1;
                    if let OneOfevent::print(p) = e.event {
                        h.prints.push(p.buf.unwrap_or_default().trim().to_owned());
                    }
                }
            }
            OneOfdata::process_tree(t) => h.process_tree_pids += t.processes.len(),
            OneOfdata::ftrace_stats(_) => h.ftrace_stats += 1,
            OneOfdata::trace_stats(s) => {
                h.service_chunks_discarded = s.chunks_discarded.unwrap_or(0)
            }
            _ => {}
        }
    }
    h
}

/// The official descriptors (PyPI perfetto) parse the file too.
fn upstream_parses(trace: &Path) {
    let py = python().expect("no Python venv: run scripts/setup-python.sh");
    let out = Command::new(py)
        .arg(Path::new(ROOT).join("tests/py/trace_summary.py"))
        .arg(trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "upstream does not parse {}: {}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn client(socks: &Sockets, cfg_text: &str, dir: &Path, out: &Path) -> Command {
    let cfg = dir.join("config.txt");
    std::fs::write(&cfg, cfg_text).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
    c.args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stdout(Stdio::null());
    c
}

fn end_line(stderr: &str) -> String {
    stderr
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap_or_else(|| panic!("no end line in {stderr:?}"))
        .to_owned()
}

/// A private tracefs instance, removed before and after.
struct Instance(PathBuf);

impl Instance {
    fn new(name: &str) -> Instance {
        let d = instance_dir(name);
        let _ = std::fs::remove_dir(&d);
        Instance(d)
    }

    fn mark(&self, text: &str) {
        self.try_mark(text).unwrap();
    }

    /// Retries while tracing is off (EBADF), as while the data source sets
    /// the instance up.
    fn mark_retrying(&self, text: &str) {
        for _ in 0..500 {
            match self.try_mark(text) {
                Err(e) if e.raw_os_error() == Some(libc::EBADF) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                r => return r.unwrap(),
            }
        }
        panic!("tracing stayed off in {}", self.0.display());
    }

    /// Fails (EBADF) once the session stopped the instance.
    fn try_mark(&self, text: &str) -> std::io::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(self.0.join("trace_marker"))?;
        f.write_all(text.as_bytes())
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("tracing_on"), "0");
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn ftrace_source(instance: &str, extra: &str) -> String {
    format!(
        r#"data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print"
    ftrace_events: "sched/sched_switch"
    {extra}
    buffer_size_kb: 512
    instance_name: "{instance}"
    drain_period_ms: 100 }} }} }}
"#
    )
}

#[test]
fn a_producer_killed_mid_trace_keeps_its_data_and_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let name = "tbx_faults_kill";
    let inst = Instance::new(name);
    let socks = Sockets::in_dir(dir);
    let _traced = start_our_traced(&socks, &dir.join("traced.log"));
    // At the default log level: debug logging changes traced_probes'
    // timing enough that it commits its process tree before the kill.
    let mut probes = Proc {
        child: Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("traced_probes")
            .env("PERFETTO_PRODUCER_SOCK_NAME", &socks.producer)
            .env("TRACED_PROBES_STATE_FILE", dir.join("state"))
            .env_remove("TRACEBOX_LOG")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("probes.log")).unwrap())
            .spawn()
            .unwrap(),
        name: "traced_probes",
    };
    wait_until(Duration::from_secs(20), "traced_probes registers", || {
        let ds = registered_data_sources(&socks.consumer);
        ["linux.ftrace", "linux.process_stats"]
            .iter()
            .all(|n| ds.iter().any(|d| d == n))
    });
    // write_into_file with no periodic write before the kill: what
    // traced_probes had not committed is only in its shared memory. An
    // explicit drain period: pages leave the kernel every 100 ms (the
    // default period stretches to 2 s on a quiet machine).
    let ftrace = format!(
        "data_sources {{ config {{ name: \"linux.ftrace\" ftrace_config {{\
         ftrace_events: \"ftrace/print\" atrace_categories: \"sched\"\
         symbolize_ksyms: true drain_period_ms: 100 instance_name: \"{name}\" }} }} }}\n"
    );
    let cfg = format!(
        "duration_ms: 6000\nwrite_into_file: true\nfile_write_period_ms: 10000\n\
         flush_period_ms: 30000\nbuffers {{ size_kb: 16384 }}\n{ftrace}\
         data_sources {{ config {{ name: \"linux.process_stats\" process_stats_config {{\
         scan_all_processes_on_start: true }} }} }}\n"
    );
    let out = dir.join("trace.pb");
    let mut c = client(&socks, &cfg, dir, &out)
        .stderr(std::fs::File::create(dir.join("consumer.log")).unwrap())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(30), "ftrace start", || {
        read_trim(instance_dir(name).join("tracing_on")) == "1"
    });
    // A new instance traces from its creation, before the data source
    // started (which clears it, with tracing off for a moment: a marker
    // written then fails with EBADF and is written again): markers go over
    // a second, then a second passes for traced_probes to read them all.
    for i in 0..50 {
        inst.mark_retrying(&format!("tbx-kill {i:02}"));
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1000));
    probes.signal(Signal::SIGKILL);
    assert!(probes.wait_exit(Duration::from_secs(5)).is_some());
    let status = c.wait().unwrap();
    let err = std::fs::read_to_string(dir.join("consumer.log")).unwrap();
    if !status.success() {
        dump(dir);
    }
    assert!(status.success(), "{err}");
    let h = held(&out);
    upstream_parses(&out);
    assert!(h.process_tree_pids > 0, "no process tree: {h:?}");
    assert!(h.sched_switches > 0, "no sched_switch: {h:?}");
    let mut marks: Vec<&str> = h
        .prints
        .iter()
        .filter_map(|p| p.strip_prefix("tbx-kill "))
        .collect();
    marks.sort();
    let first = 50 - marks.len();
    let want: Vec<String> = (first..50).map(|i| format!("{i:02}")).collect();
    assert_eq!(marks, want, "every marker after the start is kept");
    assert!(
        marks.len() >= 10,
        "the start took over half a second: {marks:?}"
    );
    let line = end_line(&err);
    assert!(
        line.contains("producer perfetto.traced_probes disconnected")
            && line.contains("s into the trace")
            && line.contains("linux.ftrace"),
        "{line}"
    );
    assert!(!line.contains("nothing lost"), "{line}");
}

/// traced_probes stops answering (SIGSTOP) before the trace ends: the
/// final flush and the stop time out. What it committed before is kept,
/// and the end line names both timeouts instead of "nothing lost".
#[test]
fn a_producer_that_stops_answering_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let name = "tbx_faults_stall";
    let inst = Instance::new(name);
    let daemons = start_our_daemons(dir);
    let (socks, probes) = (&daemons.socks, &daemons.probes);
    // Periodic flushes commit the markers into traced's buffer while
    // traced_probes still answers.
    let cfg = format!(
        "duration_ms: 4000\nflush_period_ms: 250\nflush_timeout_ms: 500\n\
         data_source_stop_timeout_ms: 500\nbuffers {{ size_kb: 4096 }}\n{}",
        ftrace_source(name, "")
    );
    let out = dir.join("trace.pb");
    let mut c = client(socks, &cfg, dir, &out)
        .stderr(std::fs::File::create(dir.join("consumer.log")).unwrap())
        .spawn()
        .unwrap();
    // After the data source's start, which clears the instance.
    wait_ftrace_started(dir, name);
    for i in 0..20 {
        inst.mark_retrying(&format!("tbx-stall {i:02}"));
    }
    std::thread::sleep(Duration::from_millis(1500));
    probes.signal(Signal::SIGSTOP);
    let status = c.wait().unwrap();
    probes.signal(Signal::SIGCONT);
    let err = std::fs::read_to_string(dir.join("consumer.log")).unwrap();
    if !status.success() {
        dump(dir);
    }
    assert!(status.success(), "{err}");
    upstream_parses(&out);
    let h = held(&out);
    let mut marks: Vec<&str> = h
        .prints
        .iter()
        .filter_map(|p| p.strip_prefix("tbx-stall "))
        .collect();
    marks.sort();
    let want: Vec<String> = (0..20).map(|i| format!("{i:02}")).collect();
    assert_eq!(marks, want, "what it committed before the stall is kept");
    let line = end_line(&err);
    assert!(
        line.contains(
            "data sources that did not answer the final flush within flush_timeout_ms \
             (what they held then may be missing): linux.ftrace in "
        ) && line.contains(
            "data sources that did not stop within data_source_stop_timeout_ms (what they \
             wrote after is not in the trace): linux.ftrace in "
        ),
        "{line}"
    );
    assert!(!line.contains("nothing lost"), "{line}");
    // The trace says so itself: the report of the file has the same line.
    let report = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(
        text.contains(line.trim_start_matches("Trace stats: ")),
        "{text}"
    );
}

#[test]
fn a_data_source_nobody_offers_is_named_with_a_suggestion() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let cfg = "duration_ms: 500\nbuffers { size_kb: 1024 }\n\
               data_sources { config { name: \"linux.ftrce\" } }\n";
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, cfg, dir, &out)
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(o.stdout.is_empty(), "warnings go to stderr: {o:?}");
    assert_eq!(held(&out).ftrace_events, 0);
    upstream_parses(&out);
    let line = end_line(&err);
    assert!(
        line.contains("no producer offers data source linux.ftrce (did you mean linux.ftrace?)"),
        "{line}"
    );
}

#[test]
fn unknown_ftrace_events_and_atrace_categories_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let name = "tbx_faults_unknown";
    let inst = Instance::new(name);
    let daemons = start_our_daemons(dir);
    let extra = "ftrace_events: \"sched/sched_swtch\" atrace_categories: \"shed\"";
    let cfg = format!(
        "duration_ms: 2000\nbuffers {{ size_kb: 4096 }}\n{}",
        ftrace_source(name, extra)
    );
    let out = dir.join("trace.pb");
    let c = client(&daemons.socks, &cfg, dir, &out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ftrace_started(dir, name);
    inst.mark("tbx-unknown present");
    let o = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let h = held(&out);
    assert!(h.prints.iter().any(|p| p == "tbx-unknown present"), "{h:?}");
    let line = end_line(&err);
    assert!(
        line.contains("unknown ftrace events or atrace categories:")
            && line.contains("sched/sched_swtch")
            && line.contains("shed"),
        "{line}"
    );
    assert!(!line.contains("nothing lost"), "{line}");
}

/// A linux.ftrace source that cannot set up says so in the trace at the
/// first flush and at the last, not at every periodic flush (each would
/// take a chunk of the buffer), and the end line names it.
#[test]
fn a_failed_ftrace_setup_is_named_once_not_per_flush() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let cfg = "duration_ms: 2000\nflush_period_ms: 100\nbuffers { size_kb: 1024 }\n\
               data_sources { config { name: \"linux.ftrace\" ftrace_config {\
               ftrace_events: \"ftrace/print\" instance_name: \"../escape\" } } }\n";
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, cfg, dir, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let h = held(&out);
    assert_eq!(h.ftrace_events, 0, "{h:?}");
    assert!((1..=2).contains(&h.ftrace_stats), "{h:?}");
    let line = end_line(&err);
    assert!(
        line.starts_with("Trace stats: no data lost, but INCOMPLETE: ")
            && line.contains("linux.ftrace setup error: "),
        "{line}"
    );
}

#[test]
fn a_stop_trigger_that_never_fires_is_named() {
    trigger_never_fires("STOP", false);
}

#[test]
fn a_start_trigger_that_never_fires_is_named() {
    trigger_never_fires("START", false);
    trigger_never_fires("START", true);
}

fn trigger_never_fires(mode: &str, write_into_file: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let cfg = format!(
        "buffers {{ size_kb: 1024 }}\nwrite_into_file: {write_into_file}\n\
         data_sources {{ config {{ name: \"linux.process_stats\" }} }}\n\
         trigger_config {{ trigger_mode: {mode}_TRACING trigger_timeout_ms: 1000 \
         triggers {{ name: \"tbx-never\" stop_delay_ms: 0 }} }}\n"
    );
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, &cfg, dir, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0), 0);
    let line = end_line(&err);
    let want = format!(
        "the {mode} trigger did not fire within trigger_timeout_ms (1000 ms), so traced kept \
         no trace"
    );
    assert!(line.contains(&want), "{line}");
}

/// A trace that comes out empty (here: a size limit below the first
/// packet, where traced writes nothing, as upstream) is named.
#[test]
fn a_zero_byte_trace_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let cfg = "duration_ms: 500\nwrite_into_file: true\nmax_file_size_bytes: 1\n\
               buffers { size_kb: 1024 }\n\
               data_sources { config { name: \"linux.process_stats\" } }\n";
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, cfg, dir, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 0, "{err}");
    assert_eq!(
        end_line(&err),
        "Trace stats: no data lost, but INCOMPLETE: the trace is empty (0 bytes)"
    );
}

#[test]
fn a_clean_trace_says_nothing_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let cfg = "duration_ms: 500\nbuffers { size_kb: 1024 }\n\
               data_sources { config { name: \"linux.process_stats\" process_stats_config {\
               scan_all_processes_on_start: true } } }\n";
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, cfg, dir, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(held(&out).process_tree_pids > 0);
    assert!(says_nothing_lost(&err), "{err}");
}

/// 1,000 `linux.ftrace` data sources, each in its own instance: traced
/// refuses the config before anything is set up (no instance, no file),
/// with upstream's exit code 0, and the next session records ftrace.
#[test]
fn a_thousand_data_sources_are_refused_with_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let prefix = format!("tbx_faults_1000_{}_", std::process::id());
    let mut cfg = String::from("duration_ms: 500\nbuffers { size_kb: 1024 }\n");
    for i in 0..1000 {
        cfg += &format!(
            "data_sources {{ config {{ name: \"linux.ftrace\" ftrace_config {{ \
             ftrace_events: \"ftrace/print\" instance_name: \"{prefix}{i}\" }} }} }}\n"
        );
    }
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, &cfg, dir, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "upstream exits 0: {err}");
    assert!(
        err.contains("Service error: Too many data sources configured (1000 > 256)"),
        "{err}"
    );
    assert!(!out.exists(), "an empty file is left: {err}");
    let left = std::fs::read_dir(Path::new(TRACEFS).join("instances"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .count();
    assert_eq!(left, 0, "instances were created");
    // Nothing was set up: the next session records ftrace normally.
    let name = "tbx_faults_after_1000";
    let inst = Instance::new(name);
    let cfg = format!(
        "duration_ms: 2000\nbuffers {{ size_kb: 4096 }}\n{}\
         data_sources {{ config {{ name: \"linux.process_stats\" process_stats_config {{\
         scan_all_processes_on_start: true }} }} }}\n",
        ftrace_source(name, "")
    );
    let c = client(&daemons.socks, &cfg, dir, &out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ftrace_started(dir, name);
    inst.mark("tbx-after-1000");
    let o = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let h = held(&out);
    assert!(h.prints.iter().any(|p| p == "tbx-after-1000"), "{h:?}");
    assert!(h.process_tree_pids > 0, "{err}");
    assert!(says_nothing_lost(&err), "{err}");
}

#[test]
fn config_fields_traced_ignores_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    let cfg = "duration_ms: 500\nbuffers { size_kb: 1024 }\n\
               exclusive_prio: 1\n\
               data_sources { config { name: \"linux.process_stats\" process_stats_config {\
               scan_all_processes_on_start: true } } }\n";
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, cfg, dir, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(held(&out).process_tree_pids > 0, "the trace is written");
    upstream_parses(&out);
    let line = end_line(&err);
    assert!(
        line.contains("config fields traced does not honour: exclusive_prio"),
        "{line}"
    );
}

/// A 1 MiB tmpfs mounted in a temp dir, unmounted when dropped.
struct SmallFs(PathBuf);

impl SmallFs {
    fn mount(dir: &Path) -> SmallFs {
        let m = dir.join("small");
        std::fs::create_dir(&m).unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tbx-faults"])
            .arg(&m)
            .status()
            .unwrap();
        assert!(st.success(), "mount tmpfs");
        SmallFs(m)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_ends_write_into_file_with_an_error_and_a_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fs = SmallFs::mount(dir);
    let daemons = start_our_daemons(dir);
    let out = fs.0.join("trace.pb");
    fill_until_it_fails(
        dir,
        &daemons.socks,
        &out,
        "tbx_faults_enospc",
        "No space left on device",
        1 << 20,
        200,
    );
}

#[test]
fn a_full_disk_on_the_final_write_ends_with_an_error_too() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let fs = SmallFs::mount(dir);
    let daemons = start_our_daemons(dir);
    let out = fs.0.join("trace.pb");
    // One write only, when the session ends: after the end was announced.
    fill_until_it_fails(
        dir,
        &daemons.socks,
        &out,
        "tbx_faults_enospc_final",
        "No space left on device",
        1 << 20,
        3_600_000,
    );
}

#[test]
fn a_file_size_limit_ends_write_into_file_with_an_error_and_a_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    // traced under RLIMIT_FSIZE = 4 MiB (room for traced_probes' 2 MiB
    // shared memory): writes past it fail with EFBIG.
    let child = Command::new("prlimit")
        .arg("--fsize=4194304:4194304")
        .arg(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced")
        .env("PERFETTO_PRODUCER_SOCK_NAME", &socks.producer)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("traced.log")).unwrap())
        .spawn()
        .unwrap();
    let _traced = Proc {
        child,
        name: "traced",
    };
    wait_until(Duration::from_secs(20), "traced sockets", || {
        Path::new(&socks.consumer).exists() && Path::new(&socks.producer).exists()
    });
    let _probes = start_probes(
        &socks.producer,
        &dir.join("state"),
        &[],
        &dir.join("probes.log"),
        true,
    );
    let out = dir.join("trace.pb");
    fill_until_it_fails(
        dir,
        &socks,
        &out,
        "tbx_faults_efbig",
        "File too large",
        4 << 20,
        200,
    );
}

/// A disk that fails: writes past 1 MiB get EIO (a FUSE file system
/// standing in for a dead block device, see support/eio_fs.rs).
#[test]
fn an_io_error_ends_write_into_file_with_an_error_and_a_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let Some(fs) = crate::support::eio_fs::mount(&dir.join("eio"), 1 << 20) else {
        eprintln!("skipped: no /dev/fuse on this kernel, nothing to fail writes with EIO");
        return;
    };
    let daemons = start_our_daemons(dir);
    let out = fs.dir.join("trace.pb");
    fill_until_it_fails(
        dir,
        &daemons.socks,
        &out,
        "tbx_faults_eio",
        "Input/output error",
        1 << 20,
        200,
    );
}

/// Records about 5 MB of markers with write_into_file into `out`, whose
/// file system or limit holds `room` bytes: the client prints traced's
/// error, exits 1, and the file parses, cut at a packet boundary.
fn fill_until_it_fails(
    dir: &Path,
    socks: &Sockets,
    out: &Path,
    name: &str,
    error: &str,
    room: u64,
    period_ms: u32,
) {
    let inst = Instance::new(name);
    let cfg = format!(
        "duration_ms: 4000\nwrite_into_file: true\nfile_write_period_ms: {period_ms}\n\
         buffers {{ size_kb: 16384 }}\n{}",
        ftrace_source(name, "")
    );
    let c = client(socks, &cfg, dir, out)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_ftrace_started(dir, name);
    let pad = "x".repeat(500);
    for i in 0..10_000 {
        if inst.try_mark(&format!("tbx-full {i:05} {pad}")).is_err() {
            break; // The session ended on the failed write.
        }
        if i % 1000 == 999 {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let o = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "Service error: Writing the trace file failed: {error}"
        )) && err.contains("the file is cut at the last whole packet"),
        "{err}"
    );
    assert!(!err.contains("Trace written into the output file"), "{err}");
    let line = end_line(&err);
    assert!(
        line.contains("INCOMPLETE: the output file could not be written to the end"),
        "{line}"
    );
    let h = held(out);
    upstream_parses(out);
    let marks = h
        .prints
        .iter()
        .filter(|p| p.starts_with("tbx-full "))
        .count();
    assert!(
        marks > 0 && marks < 10_000,
        "{marks} markers kept in {} bytes; {err}",
        std::fs::metadata(out).unwrap().len()
    );
    assert!(std::fs::metadata(out).unwrap().len() <= room);
}

#[test]
fn a_hostile_producers_discarded_chunks_are_not_a_clean_sessions_loss() {
    use tracebox::base::sock_addr::SockAddr;
    use tracebox::ipc::client::BlockingClient;
    use tracebox::pb::protos::mod_CommitDataRequest::ChunksToMove;
    use tracebox::pb::protos::{CommitDataRequest, InitializeConnectionRequest};
    use tracebox::traced_probes::wire::encode;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let daemons = start_our_daemons(dir);
    // A producer committing chunks it has no shared memory for: traced
    // discards them (TraceStats.chunks_discarded, service-wide).
    let addr = SockAddr::parse(&daemons.socks.producer).unwrap();
    let mut hostile = BlockingClient::connect(&addr).unwrap();
    hostile.set_timeout(Some(Duration::from_secs(5)));
    let svc = hostile.bind_service("ProducerPort").unwrap();
    let init = InitializeConnectionRequest {
        producer_name: Some("hostile".into()),
        ..Default::default()
    };
    hostile
        .invoke(&svc, "InitializeConnection", &encode(&init), None)
        .unwrap();
    let bad = CommitDataRequest {
        chunks_to_move: (0..3)
            .map(|i| ChunksToMove {
                page: Some(i),
                chunk: Some(0),
                target_buffer: Some(1),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    };
    hostile
        .invoke(&svc, "CommitData", &encode(&bad), None)
        .unwrap();
    let cfg = "duration_ms: 500\nbuffers { size_kb: 1024 }\n\
               data_sources { config { name: \"linux.process_stats\" process_stats_config {\
               scan_all_processes_on_start: true } } }\n";
    let out = dir.join("trace.pb");
    let o = client(&daemons.socks, cfg, dir, &out).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(held(&out).process_tree_pids > 0);
    let h = held(&out);
    assert_eq!(
        h.service_chunks_discarded, 3,
        "the hostile commits were discarded"
    );
    assert!(says_nothing_lost(&err), "{err}");
}
