//! Issue 33, defect 1: a relay that dies mid-trace. Our traced serves a
//! loopback TCP producer socket with --enable-relay-endpoint; traced_relay
//! forwards a traced_probes recording linux.sys_stats (meminfo every
//! 100 ms) and ftrace/print markers. The relay is SIGKILLed 3 s into an
//! 8 s trace and restarted 1 s later.
//!
//! Under shared-memory emulation the producer's chunks used to wait for a
//! full chunk or the final flush, so everything the machine had written
//! before the kill died with the link while the end line said "what it had
//! written is kept". traced now asks relayed producers to commit every
//! relay commit period (1 s by default): what is older than that window at
//! the kill is in the trace, and the end line names the window.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::probes::{
    instance_dir, registered_data_sources, start_probes, wait_ftrace_started, wait_until, Proc,
};
use crate::support::traced::{packets_from_file, start_traced_with};
use crate::traced_relay_wire_real::free_tcp_port;
use tracebox::protozero::decode::{read_varint, FieldIter};

const MACHINE_ID: u32 = 98;
const TIMESTAMP: u32 = 8;
const SYS_STATS: u32 = 7;
/// traced's default relay commit period: the window a dead link may lose.
const WINDOW_MS: u64 = 1000;
/// Time for a commit to travel (flush round trip, relay copy) on top.
const SLACK_MS: u64 = 300;

fn boot_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

fn varint(p: &[u8], number: u32) -> Option<u64> {
    FieldIter::new(p)
        .filter(|f| f.number == number && f.wire_type == 0)
        .find_map(|f| read_varint(f.value).map(|v| v.0))
}

fn start_relay(relay_sock: &str, tcp: &str, log: &Path) -> Proc {
    Proc {
        child: Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("traced_relay")
            .env("PERFETTO_PRODUCER_SOCK_NAME", relay_sock)
            .env("PERFETTO_RELAY_SOCK_NAME", tcp)
            .env("PERFETTO_MACHINE_NAME", "board-b")
            .env_remove("TRACED_RELAY_NOTIFY_FD")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
        name: "traced_relay",
    }
}

#[test]
fn a_relay_killed_mid_trace_loses_at_most_the_commit_window_and_says_so() {
    if !nix::unistd::geteuid().is_root() {
        return eprintln!("skipped: ftrace instances need root");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n);
    let sock = |n: &str| path(n).to_str().unwrap().to_string();
    let (consumer, relay_sock) = (sock("c.sock"), sock("relay.sock"));
    let tcp = format!("127.0.0.1:{}", free_tcp_port());
    let _traced = start_traced_with(
        &format!("{},{tcp}", sock("p.sock")),
        &consumer,
        &["--enable-relay-endpoint"],
    );
    let mut relay = start_relay(&relay_sock, &tcp, &path("relay-1.log"));
    wait_until(Duration::from_secs(20), "the relay's socket", || {
        Path::new(&relay_sock).exists()
    });
    let _probes = start_probes(&relay_sock, &path("state"), &[], &path("probes.log"), true);
    wait_until(Duration::from_secs(30), "relayed registration", || {
        registered_data_sources(&consumer).contains(&"linux.sys_stats".to_string())
    });

    let instance = format!("tbx_relay_dies_{}", std::process::id());
    let _ = std::fs::remove_dir(instance_dir(&instance));
    let cfg = path("dies.pbtx");
    std::fs::write(
        &cfg,
        format!(
            "buffers {{ size_kb: 8192 }}\n\
             data_sources {{ config {{ name: \"linux.sys_stats\"\n\
                 sys_stats_config {{ meminfo_period_ms: 100 }} }} }}\n\
             data_sources {{ config {{ name: \"linux.ftrace\"\n\
                 ftrace_config {{ ftrace_events: \"ftrace/print\" instance_name: \"{instance}\" }} }} }}\n\
             trace_all_machines: true\n\
             duration_ms: 8000\n"
        ),
    )
    .unwrap();
    let out = path("dies.pftrace");
    let mut client = Proc {
        child: Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["perfetto", "--txt", "-c"])
            .arg(&cfg)
            .arg("-o")
            .arg(&out)
            .env("PERFETTO_CONSUMER_SOCK_NAME", &consumer)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        name: "perfetto",
    };
    wait_ftrace_started(dir.path(), &instance);
    let started_at = boot_ns();

    // 50 markers over the first 3 s, each with the time it was written.
    let t0 = Instant::now();
    let marker_path = instance_dir(&instance).join("trace_marker");
    let mut written = Vec::new();
    for i in 0..50 {
        let text = format!("tbx-relay-dies-{i:03}");
        std::fs::write(&marker_path, &text).unwrap();
        written.push((text, boot_ns()));
        std::thread::sleep(Duration::from_millis(60));
    }
    std::thread::sleep(Duration::from_secs(3).saturating_sub(t0.elapsed()));
    let killed_at = boot_ns();
    drop(relay); // SIGKILL
    std::thread::sleep(Duration::from_secs(1));
    relay = start_relay(&relay_sock, &tcp, &path("relay-2.log"));

    let status = client.wait_exit(Duration::from_secs(60));
    let mut err = String::new();
    client
        .child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    drop(relay);
    let logs = || {
        ["probes.log", "relay-1.log", "relay-2.log"]
            .iter()
            .map(|n| {
                format!(
                    "--- {n}\n{}",
                    std::fs::read_to_string(path(n)).unwrap_or_default()
                )
            })
            .collect::<String>()
            + "--- perfetto\n"
            + &err
    };
    assert!(status.is_some_and(|s| s.success()), "{}", logs());

    let bytes = std::fs::read(&out).unwrap();
    let packets = packets_from_file(&bytes);
    let samples: Vec<u64> = packets
        .iter()
        .filter(|p| {
            varint(p, MACHINE_ID) == Some(1) && FieldIter::new(p).any(|f| f.number == SYS_STATS)
        })
        .filter_map(|p| varint(p, TIMESTAMP))
        .collect();
    let safe_before = killed_at - (WINDOW_MS + SLACK_MS) * 1_000_000;
    let kept = samples.iter().filter(|&&t| t < safe_before).count() as u64;
    let expected = safe_before.saturating_sub(started_at) / 100_000_000;
    eprintln!(
        "board-b samples: {} in all, {kept} older than the window (~{expected} taken)",
        samples.len()
    );
    assert!(
        expected >= 5 && kept * 10 >= expected * 9,
        "{kept} of ~{expected} samples older than the window are in the trace\n{}",
        logs()
    );
    assert!(
        samples.iter().any(|&t| t > killed_at),
        "no samples after the restart\n{}",
        logs()
    );

    let contains = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    let old: Vec<&String> = written
        .iter()
        .filter(|(_, t)| *t < safe_before)
        .map(|(m, _)| m)
        .collect();
    let missing: Vec<&&String> = old.iter().filter(|m| !contains(m.as_bytes())).collect();
    eprintln!(
        "markers: {} written, {} older than the window",
        written.len(),
        old.len()
    );
    assert!(old.len() >= 20, "{}", logs());
    assert!(missing.is_empty(), "markers lost: {missing:?}\n{}", logs());

    let line = err
        .lines()
        .find(|l| l.starts_with("Trace stats:"))
        .unwrap_or_else(|| panic!("no end line\n{}", logs()));
    eprintln!("{line}");
    assert!(
        line.contains("producer perfetto.traced_probes on machine board-b disconnected")
            && line.contains(&format!(
                "data of the last \u{2264} {WINDOW_MS} ms before the disconnect may be missing)"
            ))
            && !line.contains("what it had written is kept"),
        "{line}"
    );
}
