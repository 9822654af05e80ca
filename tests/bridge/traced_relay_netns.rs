//! Two machines on one host: network namespace A runs the central traced
//! (TCP producer socket on a veth address, RelayPort on) and a local
//! traced_probes; namespace B runs traced_relay and its own traced_probes.
//! Our perfetto client records from A's consumer socket. Needs root and
//! `ip`; skipped (said on stderr) otherwise.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::support::probes::{python, registered_data_sources, wait_until};
use tracebox::protozero::decode::{read_varint, FieldIter};

struct Netns {
    names: [String; 2],
}

impl Netns {
    fn ip(args: &[&str]) -> bool {
        Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Namespaces A and B joined by a veth pair, 10.231.0.1 and .2.
    fn create() -> Option<Netns> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let id = format!(
            "{}x{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let (a, b) = (format!("tbx-a-{id}"), format!("tbx-b-{id}"));
        let (va, vb) = (format!("tbxa{id}"), format!("tbxb{id}"));
        if !Self::ip(&["netns", "add", &a]) {
            return None;
        }
        let ns = Netns {
            names: [a.clone(), b.clone()],
        };
        let ok = Self::ip(&["netns", "add", &b])
            && Self::ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])
            && Self::ip(&["link", "set", &va, "netns", &a])
            && Self::ip(&["link", "set", &vb, "netns", &b])
            && Self::ip(&["-n", &a, "addr", "add", "10.231.0.1/24", "dev", &va])
            && Self::ip(&["-n", &b, "addr", "add", "10.231.0.2/24", "dev", &vb])
            && Self::ip(&["-n", &a, "link", "set", &va, "up"])
            && Self::ip(&["-n", &b, "link", "set", &vb, "up"])
            && Self::ip(&["-n", &a, "link", "set", "lo", "up"])
            && Self::ip(&["-n", &b, "link", "set", "lo", "up"]);
        ok.then_some(ns)
    }

    fn command(&self, which: usize, applet: &str, env: &[(&str, String)]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[which]])
            .arg(env!("CARGO_BIN_EXE_tracebox"))
            .arg(applet);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes its end of the veth, and the pair.
        for n in &self.names {
            Self::ip(&["netns", "del", n]);
        }
    }
}

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn field(p: &[u8], number: u32) -> Option<u64> {
    FieldIter::new(p)
        .filter(|f| f.number == number && f.wire_type == 0)
        .filter_map(|f| read_varint(f.value))
        .map(|v| v.0)
        .last()
}

fn has(p: &[u8], number: u32) -> bool {
    FieldIter::new(p).any(|f| f.number == number)
}

const TRUSTED_PID: u32 = 79;
const MACHINE_ID: u32 = 98;
const TIMESTAMP: u32 = 8;
const SYS_STATS: u32 = 7;

/// Whole packets of a trace file (one being written may end mid-packet).
fn packets_in(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    let mut it = FieldIter::new(&b);
    for f in it.by_ref() {
        if f.number == 1 {
            out.push(f.value.to_vec());
        }
    }
    out
}

fn boot_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Both namespaces with their daemons running, both probes registered and
/// the relay's clocks synced.
struct World {
    ns: Netns,
    dir: tempfile::TempDir,
    consumer: String,
    relay_local: String,
    _traced: Proc,
    probes_a: Proc,
    relay: Option<Proc>,
    probes_b: Proc,
}

impl World {
    fn new() -> Option<World> {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: network namespaces need root");
            return None;
        }
        let Some(ns) = Netns::create() else {
            eprintln!("skipped: cannot create network namespaces");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let sock = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        let (producer, consumer, relay_local) =
            (sock("p.sock"), sock("c.sock"), sock("relay.sock"));

        let (rd, wr) = nix::unistd::pipe().unwrap();
        let no_cloexec = nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty());
        nix::fcntl::fcntl(wr.as_raw_fd(), no_cloexec).unwrap();
        let traced = ns
            .command(
                0,
                "traced",
                &[
                    (
                        "PERFETTO_PRODUCER_SOCK_NAME",
                        format!("{producer},10.231.0.1:20001"),
                    ),
                    ("PERFETTO_CONSUMER_SOCK_NAME", consumer.clone()),
                    ("TRACED_NOTIFY_FD", wr.as_raw_fd().to_string()),
                ],
            )
            .arg("--enable-relay-endpoint-on=10.231.0.1:20001")
            .spawn()
            .unwrap();
        let traced = Proc(traced);
        drop(wr);
        let mut b = [0u8; 1];
        std::io::Read::read_exact(&mut std::fs::File::from(rd), &mut b).expect("traced ready");

        let root = dir.path().to_path_buf();
        let probes_env = |sock: &str, state: &str| {
            [
                ("PERFETTO_PRODUCER_SOCK_NAME", sock.to_string()),
                (
                    "TRACED_PROBES_STATE_FILE",
                    root.join(state).display().to_string(),
                ),
            ]
        };
        let probes_a = Proc(
            ns.command(0, "traced_probes", &probes_env(&producer, "state-a"))
                .spawn()
                .unwrap(),
        );
        let mut w = World {
            probes_b: Proc(Command::new("true").spawn().unwrap()),
            ns,
            consumer,
            relay_local,
            _traced: traced,
            probes_a,
            relay: None,
            dir,
        };
        w.start_relay("relay-1.log");
        w.probes_b = Proc(
            w.ns.command(1, "traced_probes", &probes_env(&w.relay_local, "state-b"))
                .spawn()
                .unwrap(),
        );
        wait_until(Duration::from_secs(30), "both probes registered", || {
            registered_data_sources(&w.consumer)
                .iter()
                .filter(|d| *d == "linux.system_info")
                .count()
                == 2
        });
        Some(w)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts traced_relay in B (logging to `log`), ready once its clocks
    /// are synced with traced.
    fn start_relay(&mut self, log: &str) {
        let log = self.path(log);
        let relay = self
            .ns
            .command(
                1,
                "traced_relay",
                &[
                    ("PERFETTO_PRODUCER_SOCK_NAME", self.relay_local.clone()),
                    ("PERFETTO_RELAY_SOCK_NAME", "10.231.0.1:20001".into()),
                    ("PERFETTO_MACHINE_NAME", "board-b".into()),
                ],
            )
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        self.relay = Some(Proc(relay));
        wait_until(Duration::from_secs(30), "relay clocks synced", || {
            std::fs::read_to_string(&log).is_ok_and(|t| t.contains("clocks synced"))
        });
    }

    fn perfetto(&self, config: &str, out: &Path) -> Command {
        let cfg = out.with_extension("pbtx");
        std::fs::write(&cfg, config).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
        c.args(["perfetto", "--txt", "-c"])
            .arg(&cfg)
            .arg("-o")
            .arg(out)
            .env("PERFETTO_CONSUMER_SOCK_NAME", &self.consumer);
        c
    }

    fn record(&self, config: &str, name: &str) -> (Vec<Vec<u8>>, PathBuf) {
        let out = self.path(name);
        let o: Output = self.perfetto(config, &out).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        (packets_in(&out), out)
    }

    /// `(A's, B's)` packets: by the trusted pid of each traced_probes.
    fn split(&self, packets: &[Vec<u8>]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let of = |pid: u32| -> Vec<Vec<u8>> {
            packets
                .iter()
                .filter(|p| field(p, TRUSTED_PID) == Some(pid as u64))
                .cloned()
                .collect()
        };
        (of(self.probes_a.0.id()), of(self.probes_b.0.id()))
    }
}

const SYSTEM_INFO: &str = r#"
buffers { size_kb: 1024 }
data_sources { config { name: "linux.system_info" } }
duration_ms: 300
"#;

#[test]
fn two_namespaces_one_trace_with_machine_ids() {
    let Some(w) = World::new() else { return };
    let (packets, file) = w.record(
        &format!("{SYSTEM_INFO}\ntrace_all_machines: true\n"),
        "all.pftrace",
    );
    let (a, b) = w.split(&packets);
    assert!(
        !a.is_empty() && !b.is_empty(),
        "A: {}, B: {}",
        a.len(),
        b.len()
    );
    assert!(
        a.iter().all(|p| field(p, MACHINE_ID).is_none()),
        "A is the host"
    );
    assert!(
        b.iter().all(|p| field(p, MACHINE_ID) == Some(1)),
        "B is machine 1"
    );
    // B's system info (InitRelay) and clock sync, read with the official
    // descriptors.
    let py = python().expect("no Python venv: run scripts/setup-python.sh");
    let check = Command::new(py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/check_machines.py"))
        .arg(&file)
        .arg("1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(check.status.success(), "{text}");
    // The on-board reader names B's system info and knows its clock sync.
    let report = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("report")
        .arg(&file)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&report.stdout);
    assert!(report.contains("machine_id=1 sysname="), "{report}");
    assert!(!report.contains("unknown_packets"), "{report}");

    // Without trace_all_machines only the host's data sources start; a
    // machine_name_filter picks machines by name.
    let (packets, _) = w.record(SYSTEM_INFO, "host.pftrace");
    let (a, b) = w.split(&packets);
    assert!(
        !a.is_empty() && b.is_empty(),
        "A: {}, B: {}",
        a.len(),
        b.len()
    );
    let only_b = SYSTEM_INFO.replace(
        r#"name: "linux.system_info" }"#,
        r#"name: "linux.system_info" } machine_name_filter: "board-b""#,
    );
    let (packets, _) = w.record(&only_b, "b.pftrace");
    let (a, b) = w.split(&packets);
    assert!(
        a.is_empty() && !b.is_empty(),
        "A: {}, B: {}",
        a.len(),
        b.len()
    );
}

#[test]
fn relay_restart_mid_trace_loses_only_the_gap_and_says_so() {
    let Some(mut w) = World::new() else { return };
    let out = w.path("restart.pftrace");
    let config = r#"
buffers { size_kb: 65536 }
data_sources { config { name: "linux.sys_stats" sys_stats_config { meminfo_period_ms: 100 } } }
trace_all_machines: true
unique_session_name: "restart"
duration_ms: 120000
"#;
    let client = w
        .perfetto(config, &out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut client = Proc(client);
    // A clone of the running session (it flushes first) shows what the
    // trace holds so far.
    let snap = w.path("snap.pftrace");
    let consumer = w.consumer.clone();
    let b_stats_after = |t: u64| {
        let cloned = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .args(["perfetto", "--clone-by-name", "restart", "-o"])
            .arg(&snap)
            .env("PERFETTO_CONSUMER_SOCK_NAME", &consumer)
            .output()
            .is_ok_and(|o| o.status.success());
        cloned
            && packets_in(&snap).iter().any(|p| {
                field(p, MACHINE_ID) == Some(1)
                    && has(p, SYS_STATS)
                    && field(p, TIMESTAMP).is_some_and(|ts| ts > t)
            })
    };
    wait_until(Duration::from_secs(30), "B's sys_stats", || {
        b_stats_after(0)
    });
    let killed_at = boot_ns();
    w.relay.take(); // SIGKILL
    w.start_relay("relay-2.log");
    wait_until(
        Duration::from_secs(60),
        "B's sys_stats after the restart",
        || b_stats_after(killed_at),
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(client.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = client.0.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(client.0.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    let packets = packets_in(&out);
    let b: Vec<u64> = packets
        .iter()
        .filter(|p| field(p, MACHINE_ID) == Some(1) && has(p, SYS_STATS))
        .filter_map(|p| field(p, TIMESTAMP))
        .collect();
    assert!(b.iter().any(|&t| t < killed_at), "B's data before the kill");
    assert!(
        b.iter().any(|&t| t > killed_at),
        "B's data after the restart"
    );
    let (a, _) = w.split(&packets);
    assert!(a.iter().any(|p| has(p, SYS_STATS)), "A's data");
    let line = err
        .lines()
        .find(|l| l.contains("Trace stats:"))
        .unwrap_or("");
    eprintln!("{line}");
    assert!(
        line.contains("producer perfetto.traced_probes on machine board-b disconnected")
            && line.contains("s into the trace")
            && !line.contains("never reached traced"),
        "{err}"
    );
}

/// 1,000 TCP connections from one address that never identify themselves
/// (opened from namespace A, so from 10.231.0.1) do not shut the relay
/// endpoint for another address: traced holds at most its per-address
/// budget of them, refuses the rest at once, and drops those it held at
/// the identity deadline; meanwhile a real relay restarted in B
/// (10.231.0.2) binds, syncs its clocks and brings its producer back.
#[test]
fn a_connection_flood_from_one_address_leaves_other_relays_in() {
    use std::io::Read;
    use tracebox::ipc::host::DEFAULT_MAX_CLIENTS_PER_ADDRESS;
    let Some(mut w) = World::new() else { return };
    w.relay.take(); // B's relay goes; its producer waits to reconnect.
    let ns_a = format!("/run/netns/{}", w.ns.names[0]);
    let flood: Vec<std::net::TcpStream> = std::thread::spawn(move || {
        let f = std::fs::File::open(ns_a).unwrap();
        nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        (0..1000)
            .map(|_| std::net::TcpStream::connect("10.231.0.1:20001").unwrap())
            .collect()
    })
    .join()
    .unwrap();
    w.start_relay("relay-2.log");
    wait_until(Duration::from_secs(30), "B's producer back", || {
        registered_data_sources(&w.consumer)
            .iter()
            .filter(|d| *d == "linux.system_info")
            .count()
            == 2
    });
    // Every flood connection ends: refused at once, or dropped at the
    // identity deadline.
    let mut held = 0;
    for mut s in flood {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let t0 = std::time::Instant::now();
        let mut b = [0u8; 16];
        match s.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            r => panic!("a flood connection still open: {r:?}"),
        }
        if t0.elapsed() > Duration::from_secs(1) {
            held += 1;
        }
    }
    assert!(
        held <= DEFAULT_MAX_CLIENTS_PER_ADDRESS,
        "{held} flood connections held"
    );
    // And the trace still has B's data, with its clock sync.
    let (packets, _) = w.record(
        &format!("{SYSTEM_INFO}\ntrace_all_machines: true\n"),
        "after-flood.pftrace",
    );
    let (_, b) = w.split(&packets);
    assert!(!b.is_empty(), "no packets of B after the flood");
}
