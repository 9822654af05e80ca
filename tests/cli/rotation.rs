//! `--rotate-size`, `--rotate-time`, `--rotate-keep`: a streamed trace cut
//! into numbered files while markers flood a private tracefs instance and
//! the scheduler runs. Every file is read with the official descriptors:
//! each has its own trace config, clock snapshot, system info and process
//! tree, and the markers of all files together have no gap and no
//! duplicate.

use crate::support::cli::python;
use crate::support::probes::*;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Markers written, in batches with a pause between.
struct Markers {
    count: u64,
    batch: u64,
    pause: Duration,
    /// Bytes per marker (its number, then padding).
    len: usize,
}

/// A few seconds of trace, so several cuts happen while the flood runs.
const FLOOD: Markers = Markers {
    count: MARKERS,
    batch: 200,
    pause: Duration::from_millis(30),
    len: 0,
};
const MARKERS: u64 = 24_000;
/// Every flood's `file_write_period_ms`.
const WRITE_PERIOD_MS: u64 = 200;

#[test]
fn rotation_by_size_loses_and_repeats_nothing() {
    let (_dir, files, log) = run(
        "tbx_cli_rot_size",
        "tbx-rots",
        &["--rotate-size", "64kb"],
        "",
    );
    assert!(files.len() >= 3, "only {} files: {log}", files.len());
    check_union(&files, "tbx-rots");
    assert!(says_nothing_lost(&log), "{log}");
}

#[test]
fn rotation_by_time_loses_and_repeats_nothing() {
    let (_dir, files, log) = run("tbx_cli_rot_time", "tbx-rott", &["--rotate-time", "1s"], "");
    assert!(files.len() >= 2, "only {} files: {log}", files.len());
    check_union(&files, "tbx-rott");
    assert!(says_nothing_lost(&log), "{log}");
}

#[test]
fn rotation_of_a_deflate_trace_loses_and_repeats_nothing() {
    rotate_compressed(
        "tbx_cli_rot_zip",
        "tbx-rotz",
        "compression_type: COMPRESSION_TYPE_DEFLATE",
    );
}

/// The same with zstd (`zstd_compressed_packets`; the checker opens both
/// kinds).
#[test]
fn rotation_of_a_zstd_trace_loses_and_repeats_nothing() {
    rotate_compressed("tbx_cli_rot_zstd", "tbx-rotzs", "compression { zstd {} }");
}

/// A flood rotated every second with `compression`: every packet
/// compressed, the ones held for the next file at a cut too (upstream's
/// service compresses every packet it writes), and in their place after
/// the header: each file's cpus start together.
fn rotate_compressed(instance: &str, prefix: &str, compression: &str) {
    let (_dir, files, log) = run(instance, prefix, &["--rotate-time", "1s"], compression);
    assert!(files.len() >= 2, "only {} files: {log}", files.len());
    for f in check_union(&files, prefix) {
        assert!(f["zipped"] > 0 && f["plain"] == 0, "{f:?}");
        assert!(f["early"] * 200 <= f["events"], "{f:?}");
    }
    assert!(says_nothing_lost(&log), "{log}");
}

const START_TRIGGER: &str = "tbx_rot_go";
const START_TRIGGER_CONFIG: &str = r#"trigger_config {
    trigger_mode: START_TRACING
    trigger_timeout_ms: 120000
    triggers { name: "tbx_rot_go" stop_delay_ms: 120000 }
}"#;

#[test]
fn rotation_by_time_waits_for_a_start_trigger() {
    let (_dir, files, log) = run(
        "tbx_cli_rot_trig",
        "tbx-rotg",
        &["--rotate-time", "1s"],
        START_TRIGGER_CONFIG,
    );
    assert!(files.len() >= 2, "only {} files: {log}", files.len());
    assert!(!log.contains("Rotation stopped"), "{log}");
    check_union(&files, "tbx-rotg");
}

#[test]
fn rotate_keep_leaves_only_the_newest_files() {
    let (_dir, files, log) = run(
        "tbx_cli_rot_keep",
        "tbx-rotk",
        &["--rotate-size", "64kb", "--rotate-keep", "2"],
        "",
    );
    assert_eq!(files.len(), 2, "{log}");
    let last: u64 = files[1]
        .extension()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(last >= 3, "too few cuts to prove anything: {log}");
    assert!(log.contains("older removed by --rotate-keep"), "{log}");
    assert!(says_nothing_lost(&log), "{log}");
    // The survivors still open on their own.
    let (_, per_file) = check_files(&files, "tbx-rotk");
    one_full_scan_each(&files, &per_file);
}

#[test]
fn a_perfetto_traced_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let bin = interop_bin("real-traced").unwrap();
    let _traced = start_real_traced(&bin, &socks, &dir.join("traced.log"));
    let cfg = dir.join("c.txt");
    std::fs::write(
        &cfg,
        "write_into_file: true\nduration_ms: 1000\nbuffers { size_kb: 1024 }\n",
    )
    .unwrap();
    let out = client(&socks, &cfg, &dir.join("t"), &["--rotate-size", "1mb"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("this traced cannot rotate files"), "{err}");
    assert!(!dir.join("t.000").exists());
}

/// Each file after a cut starts with every cpu at the same moment: (next
/// to) no event of a file precedes trace_processor's
/// ftrace_latest_data_start_ns (it would not import them). Kernel symbols are interned, so each cut
/// restarts the ftrace sequence's incremental state.
#[test]
fn rotated_files_start_with_every_cpu_together() {
    let instance = "tbx_cli_rot_cpus";
    let (_tmp, (files, log)) = in_instance(instance, |dir| {
        let daemons = start_our_daemons(dir);
        flood_with(
            &daemons,
            dir,
            instance,
            "tbx-rotc",
            &["--rotate-size", "64kb"],
            "",
            r#"ftrace_events: "workqueue/workqueue_execute_start"
    symbolize_ksyms: true"#,
            &FLOOD,
        )
        .0
    });
    assert!(files.len() >= 3, "only {} files: {log}", files.len());
    // The cpus are read one after the other, microseconds apart: a rare
    // event falls in between (before, a cut hid about half a second of
    // every cpu but the last one read: a third of a file's events).
    for (i, f) in check_union(&files, "tbx-rotc").iter().enumerate() {
        let name = files[i].display();
        assert!(f["cpus"] >= 1 && f["events"] > 0, "{name}: {f:?}");
        assert!(f["early"] * 200 <= f["events"], "{name}: {f:?}");
    }
}

/// Two rotated recordings one after the other on the same traced and
/// traced_probes: each is cut (a long-lived traced rotates every session).
#[test]
fn a_second_rotated_recording_on_the_same_traced_rotates_too() {
    let instance = "tbx_cli_rot_twice";
    let (_tmp, runs) = in_instance(instance, |dir| {
        let daemons = start_our_daemons(dir);
        let mut runs = Vec::new();
        // The same -o both times, as a script would run it.
        let sub = dir.join("r1");
        std::fs::create_dir(&sub).unwrap();
        for _ in 0..2 {
            let (files, log) = flood(
                &daemons,
                &sub,
                instance,
                "tbx-rot2",
                &["--rotate-size", "64kb"],
                "",
            );
            check_union(&files, "tbx-rot2");
            runs.push((files.len(), log));
        }
        runs
    });
    for (n, log) in runs {
        assert!(n >= 3, "only {n} files: {log}");
        assert!(
            log.contains(&format!("Trace written into {n} file(s)")),
            "{log}"
        );
        assert!(says_nothing_lost(&log), "{log}");
    }
}

/// A cut that cannot happen (the next file cannot be opened: a directory
/// stands at its name) is named on the end line and in the trace, and the
/// trace goes on, whole, in the file being written.
#[test]
fn a_cut_that_cannot_happen_is_named_in_the_trace_and_on_the_end_line() {
    let instance = "tbx_cli_rot_stop";
    let (tmp, (files, log)) = in_instance(instance, |dir| {
        let daemons = start_our_daemons(dir);
        std::fs::create_dir(dir.join("t.001")).unwrap();
        flood(
            &daemons,
            dir,
            instance,
            "tbx-rots",
            &["--rotate-size", "64kb"],
            "",
        )
    });
    let dir = tmp.path();
    eprintln!("{log}");
    assert_eq!(files.len(), 1, "{log}");
    // The client could not open the next file, so it never asked traced
    // to cut: the data sources were not cleared, one /proc scan.
    check_union(&files, "tbx-rots");
    let t = dir.join("t");
    let (first, next) = (
        format!("{}.000", t.display()),
        format!("{}.001", t.display()),
    );
    let reason = format!("Failed to open {next}: Is a directory (os error 21)");
    // The file list, then the loss line (read from the trace).
    assert!(
        log.contains(&format!(
            "Trace written into 1 file(s): {first} to {first}; {} -> {first}; rotation \
             stopped, the last file holds the rest: {reason}",
            t.display()
        )),
        "{log}"
    );
    // A note after the losses, not a loss: the trace is whole in the file
    // being written.
    let end = log
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap();
    assert!(
        end.ends_with(&format!(
            "; rotation stopped, a file holds more than --rotate-* asked: {reason} (the trace \
             goes on in {first})"
        )) && !end.contains("INCOMPLETE: rotation"),
        "{log}"
    );
    // In the trace: tracebox_service_event (1900) rotation_stopped (9),
    // declared by the file's extension_descriptor (check_union found no
    // unknown field).
    use tracebox::protozero::decode::FieldIter;
    let trace = std::fs::read(&files[0]).unwrap();
    let named: Vec<String> = crate::support::traced::packets_from_file(&trace)
        .iter()
        .flat_map(|p| {
            FieldIter::new(p)
                .filter(|f| f.number == 1900)
                .collect::<Vec<_>>()
        })
        .flat_map(|f| FieldIter::new(f.value).filter(|g| g.number == 9 && g.wire_type == 2))
        .map(|g| String::from_utf8_lossy(g.value).into_owned())
        .collect();
    assert_eq!(
        named,
        [format!("{reason} (the trace goes on in {first})")],
        "{log}"
    );
}

/// About 1 MB/s of markers for 5 s: 1000 markers of 1000 bytes a second.
const MEGABYTE_A_SECOND: Markers = Markers {
    count: 5000,
    batch: 50,
    pause: Duration::from_millis(50),
    len: 1000,
};

/// `--rotate-size` cuts soon after a file reaches the size: every file but
/// the last holds at most the size plus one write period's data (traced
/// flushes the producers before each periodic write, and the client looks
/// at the size four times a period, cutting before the write that would
/// cross it). One period's data is the flood's rate, all files' bytes over
/// the time the markers took, times `file_write_period_ms`; the first file
/// may hold one more.
///
/// The promise needs the recorder to get the CPU when it asks for it: the
/// daemons and the client run at nice -10 (they inherit it from this
/// thread). Where the machine starves them anyway (a full CI run beside
/// builds: one file held 3.7 periods), a write comes late by as long: a
/// thread at the same nice measures the longest such delay, and the bound
/// grows by the data of that delay.
#[test]
fn rotated_files_stay_within_one_write_period_of_the_size() {
    // SAFETY: plain syscall on this thread (who = 0) with integer arguments.
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
    assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
    for (kb, instance) in [(100u64, "tbx_cli_rot_100k"), (300, "tbx_cli_rot_300k")] {
        let prefix = format!("tbx-rsz{kb}");
        let size = format!("{kb}kb");
        let starved = StarvationProbe::start();
        let (_tmp, (files, log, took)) = in_instance(instance, |dir| {
            let daemons = start_our_daemons(dir);
            let ((files, log), took) = flood_with(
                &daemons,
                dir,
                instance,
                &prefix,
                &["--rotate-size", &size],
                "",
                "",
                &MEGABYTE_A_SECOND,
            );
            (files, log, took)
        });
        let late = starved.stop();
        check_cuts(&files, &prefix, MEGABYTE_A_SECOND.count);
        assert!(says_nothing_lost(&log), "{log}");
        let sizes: Vec<u64> = files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .collect();
        assert!(sizes.len() >= 4, "{sizes:?}: {log}");
        let rate = sizes.iter().sum::<u64>() as f64 / took.as_secs_f64();
        let window = Duration::from_millis(WRITE_PERIOD_MS) + late;
        let bound = kb * 1024 + (rate * window.as_secs_f64()) as u64;
        eprintln!(
            "--rotate-size {size}: {sizes:?}, bound {bound} ({rate:.0} B/s, longest \
             starvation {late:?})"
        );
        // The client learns a write's size from the file's growth, so the
        // first file may take one write more before its cut.
        let period = bound - kb * 1024;
        let last = files.len() - 1;
        for (i, (f, &n)) in files.iter().zip(&sizes).enumerate().take(last) {
            let limit = if i == 0 { bound + period } else { bound };
            assert!(n <= limit, "{}: {n} B > {limit} B: {sizes:?}", f.display());
        }
    }
}

/// A thread that sleeps 10 ms at a time and keeps the longest it woke up
/// late: how long the scheduler held back a task at its nice.
struct StarvationProbe {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Duration>,
}

impl StarvationProbe {
    fn start() -> StarvationProbe {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let tick = Duration::from_millis(10);
            let mut worst = Duration::ZERO;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let t0 = std::time::Instant::now();
                std::thread::sleep(tick);
                worst = worst.max(t0.elapsed().saturating_sub(tick));
            }
            worst
        });
        StarvationProbe { stop, thread }
    }

    fn stop(self) -> Duration {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Runs a flood under rotation; returns the directory (dropping it removes
/// the files), the numbered files left, oldest first, and the client's
/// stderr.
fn run(
    instance: &str,
    prefix: &str,
    rotate: &[&str],
    extra_config: &str,
) -> (tempfile::TempDir, Vec<PathBuf>, String) {
    let (tmp, (files, log)) = in_instance(instance, |dir| {
        let daemons = start_our_daemons(dir);
        flood(&daemons, dir, instance, prefix, rotate, extra_config)
    });
    (tmp, files, log)
}

/// Runs `body` with a fresh directory (kept until the returned handle
/// drops) and `instance` removed before and after; on a panic the
/// daemons' logs are shown first.
fn in_instance<T>(
    instance: &str,
    body: impl FnOnce(&Path) -> T + std::panic::UnwindSafe,
) -> (tempfile::TempDir, T) {
    let _ = std::fs::remove_dir(instance_dir(instance));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_owned();
    let r = std::panic::catch_unwind(|| body(&dir));
    if r.is_err() {
        dump(&dir);
    }
    // Its 8 MB per CPU go back to the kernel.
    let _ = std::fs::write(instance_dir(instance).join("tracing_on"), "0");
    let _ = std::fs::remove_dir(instance_dir(instance));
    (tmp, r.unwrap_or_else(|e| std::panic::resume_unwind(e)))
}

/// One rotated recording on `daemons`, its files and logs in `dir`.
fn flood(
    daemons: &Daemons,
    dir: &Path,
    instance: &str,
    prefix: &str,
    rotate: &[&str],
    extra_config: &str,
) -> (Vec<PathBuf>, String) {
    flood_with(
        daemons,
        dir,
        instance,
        prefix,
        rotate,
        extra_config,
        "",
        &FLOOD,
    )
    .0
}

/// [`flood`] with more `ftrace_config` fields and other markers; also
/// how long the markers took.
#[allow(clippy::too_many_arguments)]
fn flood_with(
    daemons: &Daemons,
    dir: &Path,
    instance: &str,
    prefix: &str,
    rotate: &[&str],
    extra_config: &str,
    extra_ftrace: &str,
    markers: &Markers,
) -> ((Vec<PathBuf>, String), Duration) {
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!(
            r#"write_into_file: true
file_write_period_ms: {WRITE_PERIOD_MS}
buffers {{ size_kb: 16384 fill_policy: DISCARD }}
data_sources {{ config {{ name: "linux.ftrace" ftrace_config {{
    ftrace_events: "ftrace/print"
    ftrace_events: "sched/sched_switch"
    buffer_size_kb: 8192
    instance_name: "{instance}"
    drain_period_ms: 100
    {extra_ftrace} }} }} }}
data_sources {{ config {{ name: "linux.process_stats"
    process_stats_config {{ scan_all_processes_on_start: true }} }} }}
{extra_config}
"#
        ),
    )
    .unwrap();
    let out = dir.join("t");
    let starts_before = ftrace_starts(daemons, instance);
    let mut c = client(&daemons.socks, &cfg, &out, rotate)
        .stderr(std::fs::File::create(dir.join("consumer.log")).unwrap())
        .spawn()
        .unwrap();
    if extra_config == START_TRIGGER_CONFIG {
        // The client's age timer runs out twice before the start: those
        // cuts are refused (not started yet) and rotation goes on after.
        std::thread::sleep(Duration::from_millis(2500));
        let t = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["trigger_perfetto", START_TRIGGER])
            .env("PERFETTO_PRODUCER_SOCK_NAME", &daemons.socks.producer)
            .output()
            .unwrap();
        assert!(t.status.success(), "{}", String::from_utf8_lossy(&t.stderr));
    }
    let idir = instance_dir(instance);
    wait_started_again(daemons, instance, starts_before);
    let marker = std::fs::OpenOptions::new()
        .write(true)
        .open(idir.join("trace_marker"))
        .unwrap();
    // --rotate-keep runs until its files have been cut a few times: how
    // many cuts the fixed flood makes depends on the machine's load (a
    // cut waits for a flush and a /proc scan), and keep-N needs several.
    let want_last = if rotate.contains(&"--rotate-keep") {
        3
    } else {
        0
    };
    let began = std::time::Instant::now();
    let deadline = began + Duration::from_secs(60);
    let mut i = 0;
    while i < markers.count
        || (newest_number(&out) < want_last && std::time::Instant::now() < deadline)
    {
        let m = format!("{prefix} {i:06} ");
        let pad = markers.len.saturating_sub(m.len());
        (&marker)
            .write_all(format!("{m}{:x<pad$}", "").as_bytes())
            .unwrap();
        if i % markers.batch == markers.batch - 1 {
            // Paces the flood (and makes the scheduler switch).
            std::thread::sleep(markers.pause);
        }
        i += 1;
    }
    let took = began.elapsed();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(c.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = crate::support::cli::wait_exit(&mut c, Duration::from_secs(120));
    let log = std::fs::read_to_string(dir.join("consumer.log")).unwrap();
    assert_eq!(status, 0, "{log}");
    let link = std::fs::read_link(&out).unwrap();
    let files = numbered(dir);
    assert_eq!(
        Some(link.as_os_str()),
        files.last().and_then(|f| f.file_name()),
        "the link names the newest file"
    );
    ((files, log), took)
}

/// How many times traced_probes (logging in the daemons' directory, next
/// to their sockets) said it started on `instance`.
fn ftrace_starts(daemons: &Daemons, instance: &str) -> usize {
    let log = Path::new(&daemons.socks.producer).with_file_name("probes.log");
    let started = format!(
        "started on {}",
        tracebox::traced_probes::ftrace::ownership::describe(instance)
    );
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.ends_with(&started))
        .count()
}

/// Waits for one more start on `instance` than `before`, with tracing on.
fn wait_started_again(daemons: &Daemons, instance: &str, before: usize) {
    let idir = instance_dir(instance);
    wait_until(Duration::from_secs(30), "ftrace start", || {
        ftrace_starts(daemons, instance) > before
            && std::fs::read_to_string(idir.join("tracing_on")).is_ok_and(|t| t.trim() == "1")
    });
}

fn client(socks: &Sockets, cfg: &Path, out: &Path, rotate: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
    c.args(["perfetto", "--txt", "-c"])
        .arg(cfg)
        .arg("-o")
        .arg(out)
        .args(rotate)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stdout(Stdio::null());
    c
}

/// `t.NNN` in `dir`, by number.
/// N of the file the `OUT` link names (0 before the first cut).
fn newest_number(out: &Path) -> u64 {
    std::fs::read_link(out)
        .ok()
        .and_then(|l| l.extension()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

fn numbered(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix("t.")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

type Counts = BTreeMap<String, u64>;

/// The union line and the per-file counts of tests/py/check_rotation.py,
/// each file checked for its own header.
fn check_files(files: &[PathBuf], prefix: &str) -> (Counts, Vec<Counts>) {
    let out = Command::new(python())
        .arg(Path::new(ROOT).join("tests/py/check_rotation.py"))
        .arg(prefix)
        .args(files)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    let mut union = BTreeMap::new();
    let mut per_file = Vec::new();
    for line in text.lines() {
        let fields: BTreeMap<String, u64> = line
            .split_whitespace()
            .filter_map(|w| {
                let (k, v) = w.split_once('=')?;
                Some((k.to_owned(), v.parse().ok()?))
            })
            .collect();
        if fields.contains_key("union") {
            union = fields;
            continue;
        }
        for key in ["config", "clocks", "sysinfo", "procs", "sched"] {
            assert!(fields[key] > 0, "no {key} in {line}");
        }
        assert_eq!(fields["config"], 1, "{line}");
        assert_eq!(fields["sysinfo"], 1, "{line}");
        per_file.push(fields);
    }
    (union, per_file)
}

fn check_union(files: &[PathBuf], prefix: &str) -> Vec<Counts> {
    check_cuts(files, prefix, MARKERS)
}

/// [`check_union_of`] of a recording whose every cut happened: each file
/// holds exactly one full /proc scan (a cut clears the data sources once;
/// a second clear would scan again into the same file).
fn check_cuts(files: &[PathBuf], prefix: &str, count: u64) -> Vec<Counts> {
    let per_file = check_union_of(files, prefix, count);
    one_full_scan_each(files, &per_file);
    per_file
}

fn one_full_scan_each(files: &[PathBuf], per_file: &[Counts]) {
    for (f, counts) in files.iter().zip(per_file) {
        assert_eq!(counts["scans"], 1, "{}: {counts:?}", f.display());
    }
}

/// [`check_union`] of a flood of `count` markers.
fn check_union_of(files: &[PathBuf], prefix: &str, count: u64) -> Vec<Counts> {
    let (u, per_file) = check_files(files, prefix);
    assert_eq!(u["dups"], 0, "{u:?}");
    assert_eq!(u["gaps"], 0, "{u:?}");
    assert_eq!(
        (u["lo"], u["hi"], u["union"]),
        (0, count - 1, count),
        "{u:?}"
    );
    per_file
}
