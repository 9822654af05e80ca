//! Issue 33, defect 5: `timeout -s INT N tracebox ...` must never lose the
//! trace. coreutils' `timeout` signals the client and then its whole
//! process group, so the client sees two interrupts milliseconds apart;
//! they are one interruption. Every run ends with an end line and a file
//! of whole packets, also with every core busy.
//!
//! `TRACEBOX_INTERRUPT_TRIALS` (default 60, about half a minute) sets the
//! number of runs; `TRACEBOX_INTERRUPT_SEED` the random gaps.

use crate::support::cli::{wait_exit, Env, Killed};

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use quick_protobuf::{BytesReader, MessageRead};
use tracebox::pb::protos::Trace;

const BEFORE_START: &str = "interrupted before tracing started: nothing recorded";
const LIMIT: Duration = Duration::from_secs(60);

fn trials() -> u64 {
    std::env::var("TRACEBOX_INTERRUPT_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60)
}

/// xorshift64*: the same gaps for the same seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// One spinning thread per core until dropped.
struct CpuHog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CpuHog {
    fn start() -> CpuHog {
        let stop = Arc::new(AtomicBool::new(false));
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        let threads = (0..n)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                    }
                })
            })
            .collect();
        CpuHog { stop, threads }
    }
}

impl Drop for CpuHog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn start_probes(env: &Env) -> Killed {
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced_probes")
        .env("PERFETTO_PRODUCER_SOCK_NAME", &env.producer)
        .env("TRACED_PROBES_STATE_FILE", env.path("probes.state"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(env.path("probes.log")).unwrap())
        .spawn()
        .unwrap();
    let k = Killed(child);
    env.wait_query("linux.sys_stats", true);
    k
}

/// Packets in a trace file that must hold whole packets and nothing else.
fn whole_packets(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let trace = Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes)
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
    // Field by field to the exact end: no torn packet at the tail.
    let mut pos = 0;
    let mut n = 0;
    while pos < bytes.len() {
        assert_eq!(bytes[pos], 0x0A, "not a packet at {pos}");
        let (len, used) = varint(&bytes[pos + 1..]);
        pos += 1 + used + len as usize;
        n += 1;
    }
    assert_eq!(pos, bytes.len(), "a torn packet at the end");
    assert_eq!(n, trace.packet.len());
    n
}

fn varint(b: &[u8]) -> (u64, usize) {
    let mut v = 0;
    for (i, byte) in b.iter().enumerate().take(10) {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    panic!("bad varint");
}

#[derive(Default, Debug)]
struct Tally {
    recorded: u64,
    before_start: u64,
}

/// One run, stopped by `timeout -s INT` (even trials) or by a kill of the
/// client and then of its process group `gap` ms later (odd trials).
fn one_run(env: &Env, cfg: &str, i: u64, rng: &mut Rng, tally: &mut Tally) {
    let out = env.path(&format!("t{i}.pftrace"));
    let _ = std::fs::remove_file(&out);
    let link = env.dir.path().join("perfetto");
    let after_ms = 150 + rng.below(450);
    let gap_ms = rng.below(51);
    let args = ["--txt", "-c", cfg, "-o", out.to_str().unwrap()];
    let log = env.path(&format!("t{i}.log"));
    let (mut child, how) = if i.is_multiple_of(2) {
        let mut c = Command::new("timeout");
        c.args([
            "-s",
            "INT",
            &format!("{}.{:03}", after_ms / 1000, after_ms % 1000),
        ])
        .arg(&link)
        .args(args)
        .env("PERFETTO_PRODUCER_SOCK_NAME", &env.producer)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &env.consumer)
        .stderr(std::fs::File::create(&log).unwrap());
        (
            c.spawn().unwrap(),
            format!("timeout -s INT after {after_ms} ms"),
        )
    } else {
        let mut c = env.perfetto_cmd(&args);
        c.process_group(0)
            .stderr(std::fs::File::create(&log).unwrap());
        let child = c.spawn().unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        std::thread::sleep(Duration::from_millis(after_ms));
        let _ = kill(pid, Signal::SIGINT);
        std::thread::sleep(Duration::from_millis(gap_ms));
        let _ = killpg(pid, Signal::SIGINT);
        (
            child,
            format!("kill after {after_ms} ms, group {gap_ms} ms later"),
        )
    };
    let code = wait_exit(&mut child, LIMIT);
    let err = std::fs::read_to_string(&log).unwrap();
    let what = format!("run {i} ({how}): exit {code}, stderr:\n{err}");
    if err.contains(BEFORE_START) {
        assert_ne!(code, 0, "{what}");
        assert!(!out.exists(), "{what}");
        tally.before_start += 1;
        return;
    }
    // `timeout` itself exits 124 when it had to signal; the client's own
    // status is 0 then, as a kill shows.
    assert_eq!(code, if i.is_multiple_of(2) { 124 } else { 0 }, "{what}");
    assert!(
        err.contains("SIGINT/SIGTERM received: disabling tracing."),
        "{what}"
    );
    assert!(
        err.lines().any(|l| l.starts_with("Trace stats: ")),
        "no end line: {what}"
    );
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    assert!(
        err.contains(&format!("Wrote {size} bytes into {}", out.display())),
        "{what}"
    );
    assert!(whole_packets(&out) > 0, "{what}");
    let _ = std::fs::remove_file(&out);
    tally.recorded += 1;
}

#[test]
fn interrupts_from_timeout_and_the_process_group_never_lose_the_trace() {
    let env = Env::new("intr");
    let _traced = env.start_traced();
    let _probes = start_probes(&env);
    let cfg = env.write(
        "c.pbtx",
        "buffers { size_kb: 4096 }\n\
         data_sources { config { name: \"linux.sys_stats\"\n\
           sys_stats_config { meminfo_period_ms: 20 } } }\n\
         duration_ms: 60000\n",
    );
    let seed = std::env::var("TRACEBOX_INTERRUPT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(33u64);
    let mut rng = Rng(seed.max(1));
    let mut tally = Tally::default();
    let n = trials();
    {
        let _hog = CpuHog::start();
        for i in 0..n {
            one_run(&env, &cfg, i, &mut rng, &mut tally);
        }
    }
    eprintln!("{n} runs (seed {seed}): {tally:?}");
    assert_eq!(tally.recorded + tally.before_start, n);
    // The signals come 150 ms or more after the start: most runs record.
    assert!(tally.recorded > n / 2, "{tally:?}");
}

/// A signal before the session was asked for: nothing recorded, said so,
/// non-zero, and no empty file left behind.
#[test]
fn an_interrupt_before_tracing_started_says_nothing_was_recorded() {
    let env = Env::new("intrpre");
    let _traced = env.start_traced();
    let cfg = env.write(
        "c.pbtx",
        "buffers { size_kb: 1024 }\n\
         data_sources { config { name: \"linux.sys_stats\" } }\n\
         duration_ms: 1000\n\
         cmd_trace_start_delay { min_delay_ms: 30000 max_delay_ms: 30000 }\n",
    );
    let out = env.path("t.pftrace");
    let mut child = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    assert!(first.starts_with("Delaying the trace start"), "{first}");
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert_eq!(rest, format!("{BEFORE_START}\n"));
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert!(status.signal().is_none());
    assert!(!out.exists());
}
