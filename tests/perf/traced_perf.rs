//! traced_perf against the real kernel: our traced on private sockets, a
//! ready traced_perf, our perfetto client, and a load program built with
//! frame pointers at test time (tests/data/perf/hot.c). Traces are read
//! back with perfetto_trace_pb2 (tests/py/check_perf_trace.py), the way
//! trace_processor reads interned callstacks.

use crate::support::probes as traced_probes_common;

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::Signal;
use traced_probes_common::*;

/// Compiles hot.c as `name` in `dir` (gcc, frame pointers in every
/// function).
pub fn build_load(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new("gcc")
        // -O0: gcc 12 drops the frame of leaf functions at -O1 even with
        // -mno-omit-leaf-frame-pointer, which hides their callers.
        .args(["-O0", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&out)
        .arg(Path::new(ROOT).join("tests/data/perf/hot.c"))
        .status()
        .expect("gcc is needed to build the load");
    assert!(st.success());
    out
}

pub fn start_perf(producer_sock: &str, log: &Path) -> Proc {
    let (r, w) = nix::unistd::pipe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced_perf")
        .env("PERFETTO_PRODUCER_SOCK_NAME", producer_sock)
        .env("TRACED_PERF_NOTIFY_FD", w.as_raw_fd().to_string())
        .env("TRACEBOX_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    drop(w);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut f = std::fs::File::from(r);
        let mut b = [0u8; 1];
        let n = f.read(&mut b).unwrap_or(0);
        let _ = tx.send((n, b[0]));
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(30)).ok(),
        Some((1, b'1')),
        "traced_perf never reported ready"
    );
    Proc {
        child,
        name: "traced_perf",
    }
}

pub struct Run {
    pub lines: Vec<String>,
    pub end_line: String,
}

/// Records with `perf_cfg` (the body of perf_event_config) while `load`
/// runs; stops the client with SIGTERM once the load is done.
pub fn record(dir: &Path, perf_cfg: &str, load: impl FnOnce()) -> Run {
    record_with(dir, "", perf_cfg, false, load)
}

/// Which service traced_perf produces into.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Ours,
    /// Perfetto's own traced (tests/sdk-interop).
    Real,
    /// Ours on a loopback TCP socket, traced_perf behind our traced_relay
    /// (shared-memory emulation).
    OursRelayed,
}

/// `record`, with Perfetto's own traced (tests/sdk-interop) if `real`.
/// `top`: more TraceConfig fields.
pub fn record_with(dir: &Path, top: &str, perf_cfg: &str, real: bool, load: impl FnOnce()) -> Run {
    let service = if real { Service::Real } else { Service::Ours };
    record_via(dir, top, perf_cfg, service, load)
}

pub fn record_via(
    dir: &Path,
    top: &str,
    perf_cfg: &str,
    service: Service,
    load: impl FnOnce(),
) -> Run {
    let mut socks = Sockets::in_dir(dir);
    let tcp = format!("127.0.0.1:{}", {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    });
    let local_producer = socks.producer.clone();
    if service == Service::OursRelayed {
        socks.producer = format!("{},{tcp}", socks.producer);
    }
    let _traced = if service == Service::Real {
        let bin = interop_bin("real-traced").unwrap();
        start_real_traced(&bin, &socks, &dir.join("traced.log"))
    } else {
        start_our_traced(&socks, &dir.join("traced.log"))
    };
    let relay_sock = dir.join("relay.sock").display().to_string();
    let _relay = (service == Service::OursRelayed).then(|| {
        let relay = Proc {
            child: Command::new(env!("CARGO_BIN_EXE_tracebox"))
                .arg("traced_relay")
                .env("PERFETTO_PRODUCER_SOCK_NAME", &relay_sock)
                .env("PERFETTO_RELAY_SOCK_NAME", &tcp)
                .env("PERFETTO_MACHINE_NAME", "board-perf")
                .env_remove("TRACED_RELAY_NOTIFY_FD")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("relay.log")).unwrap())
                .spawn()
                .unwrap(),
            name: "traced_relay",
        };
        wait_until(Duration::from_secs(20), "the relay's socket", || {
            Path::new(&relay_sock).exists()
        });
        relay
    });
    let perf_log = dir.join("perf.log");
    let _perf = match service {
        Service::OursRelayed => start_perf(&relay_sock, &perf_log),
        _ => start_perf(&local_producer, &perf_log),
    };
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        format!(
            "duration_ms: 60000\nbuffers {{ size_kb: 32768 }}\n{top}\n\
             data_sources {{ config {{ name: \"linux.perf\" perf_event_config {{ {perf_cfg} }} }} }}\n"
        ),
    )
    .unwrap();
    let out = dir.join("trace.pb");
    let err_path = dir.join("client.err");
    let client = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(&out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let mut client = Proc {
        child: client,
        name: "perfetto",
    };
    wait_until(Duration::from_secs(30), "linux.perf started", || {
        let log = std::fs::read_to_string(&perf_log).unwrap_or_default();
        assert!(!log.contains("cannot set up linux.perf"), "{log}");
        log.contains("started linux.perf")
    });
    load();
    client.signal(Signal::SIGTERM);
    let st = client
        .wait_exit(Duration::from_secs(60))
        .expect("client exits");
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert!(
        st.success(),
        "client failed: {err}\n{}",
        std::fs::read_to_string(&perf_log).unwrap_or_default()
    );
    let end_line = err
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap_or_default()
        .to_string();
    let py = python().expect("no Python venv: run scripts/setup-python.sh");
    let o = Command::new(py)
        .arg(Path::new(ROOT).join("tests/py/check_perf_trace.py"))
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "perfetto_trace_pb2 could not read the trace: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(String::from)
        .collect();
    let errors: Vec<&String> = lines.iter().filter(|l| l.starts_with("error")).collect();
    assert!(errors.is_empty(), "{errors:?}");
    // Every sample traced_perf counted is in the trace.
    let log = std::fs::read_to_string(&perf_log).unwrap();
    if let Some(n) = log_stat(&log, "samples") {
        let in_trace = lines.iter().filter(|l| l.starts_with("sample ")).count() as u64;
        assert_eq!(
            in_trace,
            n,
            "samples in the trace vs counted by traced_perf: {log}\n{end_line}\n{}",
            std::fs::read_to_string(dir.join("traced.log")).unwrap_or_default()
        );
    }
    Run { lines, end_line }
}

/// The count before ` NAME` in the line traced_perf logs at stop
/// ("linux.perf: N samples (N out of scope), N lost, ...").
pub fn log_stat(log: &str, name: &str) -> Option<u64> {
    let line = log
        .lines()
        .find(|l| l.contains("linux.perf: ") && l.contains(" samples ("))?;
    let end = line.find(&format!(" {name}"))?;
    let start = line[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    line[start..end].parse().ok()
}

/// One PerfSample as check_perf_trace.py prints it.
#[derive(Debug)]
pub struct Sample {
    pub pid: u32,
    pub cpu: u32,
    /// Profiling.CpuMode: 1 kernel, 2 user.
    pub mode: u32,
    pub ts: u64,
    /// timebase_count: the timebase's running count on its CPU.
    pub count: Option<u64>,
    /// Frames in the /kernel mapping.
    pub kframes: usize,
    /// Function names, root first ("?" unnamed, "-" no callstack).
    pub names: Vec<String>,
}

pub fn samples(run: &Run) -> Vec<Sample> {
    run.lines
        .iter()
        .filter_map(|l| l.strip_prefix("sample "))
        .map(|l| {
            let f: Vec<&str> = l.splitn(8, ' ').collect();
            Sample {
                pid: f[0].parse().unwrap(),
                cpu: f[2].parse().unwrap(),
                mode: f[3].parse().unwrap(),
                ts: f[4].parse().unwrap(),
                count: f[5].parse().ok(),
                kframes: f[6].parse().unwrap(),
                names: f[7].split(';').map(String::from).collect(),
            }
        })
        .collect()
}

/// Samples lost in the kernel, summed from the trace's PerfSample packets.
pub fn lost_in_trace(run: &Run) -> u64 {
    run.lines
        .iter()
        .filter_map(|l| l.strip_prefix("lost "))
        .map(|l| l.split(' ').nth(1).unwrap().parse::<u64>().unwrap())
        .sum()
}

pub fn run_load(bin: &Path, args: &[&str]) -> std::process::Child {
    Command::new(bin).args(args).spawn().unwrap()
}

#[test]
fn callstacks_names_scope_and_kernel_frames() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Names no other test's load has (tests run in parallel).
    let hot = build_load(dir, "perf_scope_hot");
    let other = build_load(dir, "perf_scope_other");
    let mut pids = (0, 0, 0);
    // The kernel walks the user stack (the load has frame pointers): the
    // default DWARF unwinding copies 64 KiB of stack per sample, the rings
    // overflow under load, and losses early in the run (while hot_one
    // still runs) skew the 3:1 split. unwinding.rs covers DWARF.
    let run = record(
        dir,
        "timebase { frequency: 1000 counter: SW_CPU_CLOCK } \
         callstack_sampling { scope { target_cmdline: \"perf_scope_hot\" } kernel_frames: true \
         user_frames: UNWIND_KERNEL_FRAME_POINTER } \
         ring_buffer_read_period_ms: 50",
        || {
            let mut split = run_load(&hot, &["split", "3000"]);
            let mut sys = run_load(&hot, &["syscall", "400000"]);
            let mut oth = run_load(&other, &["split", "1000"]);
            pids = (split.id(), sys.id(), oth.id());
            for c in [&mut split, &mut sys, &mut oth] {
                assert!(c.wait().unwrap().success());
            }
        },
    );
    let all = samples(&run);
    let (split_pid, sys_pid, other_pid) = pids;
    assert!(
        all.iter().all(|s| s.pid != other_pid),
        "a sample of a process out of scope"
    );
    assert!(
        all.iter().all(|s| s.pid == split_pid || s.pid == sys_pid),
        "only perf_scope_hot processes are in scope"
    );
    // timebase_count is cpu-clock's running count on the sample's CPU (as
    // upstream reads it): it only grows, across processes, in time order.
    // The trace need not be in that order: a sample waiting in the unwind
    // queue is written after later ones (upstream's traced_perf unwinds
    // asynchronously too), and trace_processor sorts by timestamp.
    for cpu in 0..2 {
        let mut on_cpu: Vec<&Sample> = all.iter().filter(|s| s.cpu == cpu).collect();
        on_cpu.sort_by_key(|s| s.ts);
        let counts: Vec<u64> = on_cpu
            .iter()
            .map(|s| s.count.expect("a sample without timebase_count"))
            .collect();
        assert!(
            counts.windows(2).all(|w| w[1] >= w[0]),
            "cpu {cpu}: {counts:?}"
        );
    }
    // The 3:1 split, by stacks that contain each function.
    let has = |s: &Sample, f: &str| s.names.iter().any(|n| n == f);
    let split: Vec<_> = all.iter().filter(|s| s.pid == split_pid).collect();
    let three = split.iter().filter(|s| has(s, "hot_three")).count() as f64;
    let one = split.iter().filter(|s| has(s, "hot_one")).count() as f64;
    assert!(three + one > 200.0, "too few samples: {three} + {one}");
    let share = three / (three + one);
    assert!(
        (share - 0.75).abs() < 0.05,
        "hot_three has {share:.3} of the samples (want 0.75): {three} vs {one}"
    );
    // Names of the whole chain: main thread function above the hot one.
    assert!(split.iter().any(|s| {
        let i = s.names.iter().position(|n| n == "three_main");
        let j = s.names.iter().position(|n| n == "hot_three");
        matches!((i, j), (Some(i), Some(j)) if i < j)
    }));
    assert!(split
        .iter()
        .any(|s| s.names.last().is_some_and(|n| n == "work_unit")));
    // Kernel frames of the read(2) loop, under the user frames (libc's
    // read has no frame of its own, so its caller's caller, main, shows).
    let sys: Vec<_> = all.iter().filter(|s| s.pid == sys_pid).collect();
    let kernel_read = sys
        .iter()
        .filter(|s| {
            let user = s.names.iter().position(|n| n == "main");
            let kernel = s
                .names
                .iter()
                .position(|n| n == "ksys_read" || n == "vfs_read");
            matches!((user, kernel), (Some(u), Some(k)) if u < k)
        })
        .count();
    assert!(
        kernel_read * 4 > sys.len(),
        "{kernel_read} of {} samples show read's kernel functions: {:?}",
        sys.len(),
        &sys[..sys.len().min(5)]
    );
    // Mappings carry the build id of the ELF note, as readelf reads it.
    let hot_path = hot.to_str().unwrap();
    let notes = Command::new("readelf")
        .arg("-n")
        .arg(&hot)
        .output()
        .unwrap();
    let notes = String::from_utf8_lossy(&notes.stdout);
    let build_id = notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("gcc wrote no build id: {notes}"));
    assert!(
        run.lines
            .iter()
            .any(|l| *l == format!("mapping {hot_path} {build_id}")),
        "no mapping {hot_path} with build id {build_id}: {:?}",
        run.lines
            .iter()
            .filter(|l| l.starts_with("mapping "))
            .collect::<Vec<_>>()
    );
    assert!(run.lines.iter().any(|l| l.starts_with("mapping /kernel ")));
}

/// The timebase here is cpu-clock named as a raw event of the `software`
/// PMU (its type read from sysfs).
#[test]
fn a_tiny_ring_reports_lost_samples_and_names_can_be_off() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_hot");
    let run = record(
        dir,
        "timebase { frequency: 4000 raw_event { pmu_name: \"software\" config: 0 } } \
         callstack_sampling { kernel_frames: true } \
         ring_buffer_pages: 1 ring_buffer_read_period_ms: 2000 \
         tracebox_function_names: false",
        || {
            let mut c = run_load(&hot, &["split", "2000"]);
            assert!(c.wait().unwrap().success());
            std::thread::sleep(Duration::from_millis(2500));
        },
    );
    let lost = lost_in_trace(&run);
    assert!(lost > 0, "no PerfSample.kernel_records_lost in the trace");
    // Names were turned off: frames carry none.
    let all = samples(&run);
    assert!(!all.is_empty());
    assert!(all
        .iter()
        .all(|s| s.names.iter().all(|n| n == "?" || n == "-")));
    assert!(
        run.end_line
            .contains(&format!("LOST {lost} perf records in the kernel")),
        "end line: {:?} (trace says {lost})",
        run.end_line
    );
}

/// Events this kernel lacks fail their data source's setup with the reason
/// in traced_perf's log, and the client's end line names the source that
/// never started: a hardware counter (this VM has none), a tracepoint and a
/// PMU that do not exist, a CPU that does not exist, and a tracepoint on
/// the boot clock (the kernel reads only NMI-safe clocks for it).
#[test]
fn events_the_kernel_lacks_are_clear_setup_errors() {
    let hw = Path::new("/sys/bus/event_source/devices/cpu").exists();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let socks = Sockets::in_dir(dir);
    let _traced = start_our_traced(&socks, &dir.join("traced.log"));
    let perf_log = dir.join("perf.log");
    let _perf = start_perf(&socks.producer, &perf_log);
    let mut sources = vec![
        "timebase { period: 1 tracepoint { name: \"nosuchgroup:nosuchevent\" } }",
        "timebase { frequency: 100 raw_event { pmu_name: \"nosuchpmu\" config: 1 } }",
        "timebase { frequency: 100 counter: SW_CPU_CLOCK } target_cpu: 4000",
        "timebase { period: 1 tracepoint { name: \"sched:sched_switch\" } \
         timestamp_clock: PERF_CLOCK_BOOTTIME }",
    ];
    if !hw {
        sources.push("timebase { frequency: 100 counter: HW_CPU_CYCLES }");
    }
    let mut cfg = "duration_ms: 1000\nbuffers { size_kb: 1024 }\n".to_string();
    for s in &sources {
        cfg += &format!(
            "data_sources {{ config {{ name: \"linux.perf\" perf_event_config {{ {s} }} }} }}\n"
        );
    }
    std::fs::write(dir.join("config.txt"), cfg).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(dir.join("config.txt"))
        .arg("-o")
        .arg(dir.join("trace.pb"))
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let log = std::fs::read_to_string(&perf_log).unwrap();
    let failed = log.matches("cannot set up linux.perf").count();
    assert_eq!(failed, sources.len(), "{log}");
    for want in [
        "tracepoint nosuchgroup:nosuchevent: this kernel has no such event",
        "raw_event pmu_name \"nosuchpmu\": this kernel has no such PMU",
        "cpu 4000: perf_event_open(cpu-clock)",
        "perf_event_open(sched:sched_switch): Invalid argument (os error 22) \
         (PERF_CLOCK_BOOTTIME and PERF_CLOCK_REALTIME work with software counters only",
    ] {
        assert!(log.contains(want), "{want:?} not in {log}");
    }
    if !hw {
        assert!(
            log.contains("perf_event_open(cpu-cycles)") && log.contains("no such event"),
            "{log}"
        );
    }
    let end = err
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap_or_default();
    assert!(
        end.contains(
            "data sources that never started (setup failed? see the producer's log): linux.perf"
        ),
        "end line: {end:?}"
    );
    // Named once: a source that never started is not also a stop that
    // timed out (issue 33, defect 10).
    assert!(!end.contains("did not stop within"), "end line: {end:?}");
}

/// traced_perf behind traced_relay: traced tells it to emulate shared
/// memory, it keeps a private buffer and sends its chunks inline, and the
/// samples reach the trace stamped with the relayed machine.
#[test]
fn samples_through_the_relay_with_shared_memory_emulation() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_relay_hot");
    let mut pid = 0;
    let run = record_via(
        dir,
        "trace_all_machines: true",
        "timebase { frequency: 500 counter: SW_CPU_CLOCK } \
         callstack_sampling { scope { target_cmdline: \"perf_relay_hot\" } }",
        Service::OursRelayed,
        || {
            let mut c = run_load(&hot, &["split", "1000"]);
            pid = c.id();
            assert!(c.wait().unwrap().success());
        },
    );
    let all = samples(&run);
    assert!(
        all.iter()
            .any(|s| s.pid == pid && s.names.iter().any(|n| n == "hot_three")),
        "no sample of the load with its frames\n{}",
        std::fs::read_to_string(dir.join("perf.log")).unwrap_or_default()
    );
    let perf_log = std::fs::read_to_string(dir.join("perf.log")).unwrap();
    assert!(
        !perf_log.contains("without a shared memory fd"),
        "{perf_log}"
    );
    assert!(
        !run.end_line.contains("never reached traced"),
        "{}",
        run.end_line
    );
}

#[test]
fn perfettos_own_traced_takes_our_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_hot");
    let mut pid = 0;
    let run = record_with(
        dir,
        "",
        "timebase { frequency: 500 counter: SW_CPU_CLOCK } \
         callstack_sampling { scope { target_cmdline: \"perf_hot\" } }",
        true,
        || {
            let mut c = run_load(&hot, &["split", "1000"]);
            pid = c.id();
            assert!(c.wait().unwrap().success());
        },
    );
    let all = samples(&run);
    assert!(all
        .iter()
        .any(|s| s.pid == pid && s.names.iter().any(|n| n == "hot_three")));
    // kernel_frames unset: user frames only.
    assert!(all.iter().all(|s| s.kframes == 0), "a kernel frame");
    assert!(!run.lines.iter().any(|l| l.starts_with("mapping /kernel ")));
}

/// A limit the daemon is over at once (1 kB): traced_perf stops sampling at
/// its first memory check, says so in the trace (PerfSample.producer_event,
/// as upstream) and the client's end line names it.
#[test]
fn the_daemon_memory_guardrail_stops_sampling_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_guard_hot");
    let perf_log = dir.join("perf.log");
    let run = record(
        dir,
        "timebase { frequency: 1000 counter: SW_CPU_CLOCK } \
         callstack_sampling { kernel_frames: true } \
         ring_buffer_read_period_ms: 50 max_daemon_memory_kb: 1",
        || {
            let mut c = run_load(&hot, &["split", "100000"]);
            wait_until(Duration::from_secs(60), "the guardrail", || {
                std::fs::read_to_string(&perf_log)
                    .is_ok_and(|t| t.contains("over max_daemon_memory_kb"))
            });
            let _ = c.kill();
            let _ = c.wait();
        },
    );
    let stop = run.lines.iter().position(|l| l == "stopped 1");
    let stop = stop.unwrap_or_else(|| panic!("no producer_event in {:?}", run.lines));
    assert!(
        run.lines[..stop].iter().any(|l| l.starts_with("sample ")),
        "samples before the stop"
    );
    assert!(
        !run.lines[stop..].iter().any(|l| l.starts_with("sample ")),
        "a sample after the stop"
    );
    assert!(
        run.end_line
            .contains("linux.perf STOPPED early 1x: traced_perf went over max_daemon_memory_kb"),
        "end line: {:?}",
        run.end_line
    );
    // `tracebox report` repeats it from the trace alone.
    let report = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("report")
        .arg(dir.join("trace.pb"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(report.contains("linux.perf STOPPED early 1x"), "{report}");
}

/// Software followers (task-clock, context-switches) read with each
/// cpu-clock sample as one perf group: every sample carries both counts in
/// config order, each cpu's counts only grow, and on a cpu the task-clock
/// follower advances with the cpu-clock timebase (both count time on it).
#[test]
fn follower_counters_are_read_with_every_sample() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let hot = build_load(dir, "perf_follow_hot");
    let run = record(
        dir,
        "timebase { frequency: 500 counter: SW_CPU_CLOCK } \
         followers { counter: SW_TASK_CLOCK } followers { counter: SW_CONTEXT_SWITCHES } \
         ring_buffer_read_period_ms: 50",
        || {
            let mut c = run_load(&hot, &["split", "1500"]);
            assert!(c.wait().unwrap().success());
        },
    );
    let n_samples = run
        .lines
        .iter()
        .filter(|l| l.starts_with("sample "))
        .count();
    let counts: Vec<Vec<u64>> = run
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("counts "))
        .map(|l| l.split(' ').map(|v| v.parse().unwrap()).collect())
        .collect();
    assert!(n_samples > 100, "{n_samples} samples");
    // The defaults name the followers for trace_processor (counter enums).
    assert!(
        run.lines.iter().any(|l| l == "followers 3 4"),
        "{:?}",
        &run.lines[..5]
    );
    assert_eq!(counts.len(), n_samples, "a sample without follower counts");
    assert!(
        counts.iter().all(|c| c.len() == 4),
        "cpu, timebase, 2 followers"
    );
    let mut cpus: Vec<u64> = counts.iter().map(|c| c[0]).collect();
    cpus.sort_unstable();
    cpus.dedup();
    let mut switches = 0;
    for cpu in cpus {
        let on: Vec<&Vec<u64>> = counts.iter().filter(|c| c[0] == cpu).collect();
        for w in on.windows(2) {
            assert!((1..4).all(|i| w[1][i] >= w[0][i]), "cpu {cpu}: {w:?}");
        }
        let (first, last) = (on[0], on[on.len() - 1]);
        let clock = (last[1] - first[1]) as f64;
        let task = (last[2] - first[2]) as f64;
        if clock > 1e8 {
            assert!(
                (task / clock - 1.0).abs() < 0.1,
                "cpu {cpu}: task-clock advanced {task} ns, cpu-clock {clock} ns"
            );
        }
        switches += last[3] - first[3];
    }
    assert!(switches > 0, "no context switch counted");
}
