//! Our traced_relay in front of the REAL Perfetto traced (tests/sdk-interop's
//! real-traced, v59) listening on a private UNIX socket and a TCP port: our
//! traced_probes (and the real SDK producer) behind the relay, our
//! `perfetto` client on the real traced's consumer socket.
//!
//! Like upstream's traced, real-traced serves RelayPort (the relay's own
//! link: InitRelay with the machine's SystemInfo, SyncClock rounds) only
//! with --enable-relay-endpoint. Without it the relay's link is refused:
//! producers must be forwarded all the same, and the relay's retries must
//! back off instead of spinning or flooding its log. With it, the machine's
//! system_info and remote_clock_sync reach the trace too.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::probes::{
    interop_bin, registered_data_sources, run_py_check, start_probes, wait_until, Proc,
};
use crate::traced_relay_wire_real::free_tcp_port;

const MACHINE_NAME: &str = "tbx-relayed-board";

/// The real traced, our relay and our traced_probes on private sockets in
/// a temporary directory; all killed when dropped.
struct Rig {
    dir: tempfile::TempDir,
    consumer: String,
    relay_sock: String,
    relay_started: Instant,
    probes: Proc,
    _relay: Proc,
    _traced: Proc,
}

impl Rig {
    fn start(relay_endpoint: bool) -> Rig {
        let traced_bin = interop_bin("real-traced").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
        let (local, consumer, relay_sock) = (path("p.sock"), path("c.sock"), path("relay.sock"));
        let tcp = format!("127.0.0.1:{}", free_tcp_port());

        let traced = Proc {
            child: Command::new(traced_bin)
                .args(["--producer-socket", &format!("{local},{tcp}")])
                .args(["--consumer-socket", &consumer])
                .args(relay_endpoint.then_some("--enable-relay-endpoint"))
                .env_remove("TRACED_NOTIFY_FD")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(path("traced.log")).unwrap())
                .spawn()
                .unwrap(),
            name: "real-traced",
        };
        wait_until(Duration::from_secs(20), "real-traced sockets", || {
            Path::new(&consumer).exists() && Path::new(&local).exists()
        });

        let relay_started = Instant::now();
        let relay = Proc {
            child: Command::new(env!("CARGO_BIN_EXE_tracebox"))
                .arg("traced_relay")
                .env("PERFETTO_PRODUCER_SOCK_NAME", &relay_sock)
                .env("PERFETTO_RELAY_SOCK_NAME", &tcp)
                .env("PERFETTO_MACHINE_NAME", MACHINE_NAME)
                .env("TRACEBOX_LOG", "debug")
                .env_remove("TRACED_RELAY_NOTIFY_FD")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(path("relay.log")).unwrap())
                .spawn()
                .unwrap(),
            name: "traced_relay",
        };
        wait_until(Duration::from_secs(20), "the relay's socket", || {
            Path::new(&relay_sock).exists()
        });

        let log = dir.path().join("probes.log");
        let probes = start_probes(&relay_sock, &dir.path().join("state"), &[], &log, true);
        wait_until(Duration::from_secs(30), "relayed registration", || {
            let ds = registered_data_sources(&consumer);
            ds.iter().any(|d| d == "linux.process_stats")
                && ds.iter().any(|d| d == "linux.system_info")
        });
        Rig {
            dir,
            consumer,
            relay_sock,
            relay_started,
            probes,
            _relay: relay,
            _traced: traced,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_default()
    }

    fn logs(&self) -> String {
        ["traced.log", "relay.log", "probes.log"]
            .iter()
            .map(|n| format!("--- {n}\n{}", self.log(n)))
            .collect()
    }

    /// Records `config` with our `perfetto` client until `ready` holds,
    /// then stops it with SIGTERM; returns the trace and the end line.
    fn record(
        &self,
        tag: &str,
        config: &str,
        mut ready: impl FnMut(&Rig) -> bool,
    ) -> (PathBuf, String) {
        let cfg = self.path(&format!("{tag}.pbtx"));
        std::fs::write(&cfg, config).unwrap();
        let out = self.path(&format!("{tag}.pftrace"));
        let link = self.path("perfetto");
        if !link.exists() {
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
        }
        let mut client = Proc {
            child: Command::new(&link)
                .args(["--txt", "-c", cfg.to_str().unwrap()])
                .args(["-o", out.to_str().unwrap()])
                .env("PERFETTO_CONSUMER_SOCK_NAME", &self.consumer)
                .env("PERFETTO_PRODUCER_SOCK_NAME", self.path("p.sock"))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            name: "perfetto",
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready(self) {
            assert!(
                Instant::now() < deadline,
                "the session never got going\n{}",
                self.logs()
            );
            assert!(
                client.child.try_wait().unwrap().is_none(),
                "perfetto exited early"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        client.signal(nix::sys::signal::Signal::SIGTERM);
        let st = client.wait_exit(Duration::from_secs(60));
        let mut err = String::new();
        client
            .child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        assert_eq!(
            st.map(|s| s.success()),
            Some(true),
            "perfetto: {err}\n{}",
            self.logs()
        );
        let end = err
            .lines()
            .find(|l| l.starts_with("Trace stats:"))
            .unwrap_or_else(|| panic!("no end line: {err}"))
            .to_string();
        (out, end)
    }
}

fn config(ds_extra: &str, trace_extra: &str) -> String {
    format!(
        "buffers {{ size_kb: 8192 fill_policy: DISCARD }}\n\
         data_sources {{ config {{ name: \"linux.process_stats\"\n\
             process_stats_config {{ scan_all_processes_on_start: true }} }} }}\n\
         data_sources {{ config {{ name: \"linux.system_info\" }} }}\n\
         {ds_extra}\
         {trace_extra}\n\
         duration_ms: 120000\n"
    )
}

fn check_trace(trace: &Path, probes_pid: i32, sdk_packets: u32, relay_port: bool) -> String {
    let mut args = vec![
        trace.display().to_string(),
        probes_pid.to_string(),
        std::process::id().to_string(),
        "--sdk-packets".into(),
        sdk_packets.to_string(),
    ];
    if relay_port {
        args.push("--relay-port".into());
    }
    run_py_check("check_relayed_probes.py", &args)
}

/// Both traced_probes data sources set up (the start follows on the same
/// connection, ahead of any stop).
fn probes_set_up(rig: &Rig) -> bool {
    let log = rig.log("probes.log");
    log.contains("setup linux.process_stats") && log.contains("setup linux.system_info")
}

/// The relay retried its RelayPort link with a doubling delay (100 ms up
/// to 30 s): a bound on its (debug) log lines for the time it ran, far
/// below what a spinning retry would write; and one warning in all.
fn assert_relay_backs_off(rig: &Rig) {
    let ran_s = rig.relay_started.elapsed().as_secs();
    let log = rig.log("relay.log");
    let tries: Vec<&str> = log.lines().filter(|l| l.contains("RelayPort")).collect();
    assert!(
        !tries.is_empty(),
        "the refused RelayPort is not logged\n{}",
        rig.logs()
    );
    let bound = 12 + ran_s as usize / 30;
    assert!(
        tries.len() <= bound,
        "{} RelayPort lines in {ran_s} s\n{}",
        tries.len(),
        rig.logs()
    );
    let warnings: Vec<&&str> = tries.iter().filter(|l| !l.contains("(again)")).collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("--enable-relay-endpoint"),
        "{}",
        warnings[0]
    );
}

#[test]
fn traced_probes_through_our_relay_into_the_real_traced() {
    let rig = Rig::start(false);
    let (trace, end) = rig.record(
        "all",
        &config("", "trace_all_machines: true"),
        probes_set_up,
    );
    let figures = check_trace(&trace, rig.probes.pid(), 0, false);
    eprintln!("{figures}");
    assert_unsynced_end_line(&end, &rig);
    assert_relay_backs_off(&rig);
    // The relay still serves its socket: nothing it hit made it exit.
    assert!(Path::new(&rig.relay_sock).exists());
}

/// The real SDK producer next to traced_probes behind the relay: both
/// reach the real traced on the same machine.
#[test]
fn sdk_producer_and_traced_probes_through_our_relay_into_the_real_traced() {
    let Some(sdk) = interop_bin("sdk-producer") else {
        return;
    };
    let rig = Rig::start(false);
    let ds = format!("tbx.relay_real.{}", std::process::id());
    let done = rig.path("sdk.done");
    let _sdk = Proc {
        child: Command::new(sdk)
            .args(["--data-source", &ds, "--packets", "200", "--size", "64"])
            .args(["--threads", "1", "--timeout-s", "60"])
            .args(["--done-file", done.to_str().unwrap()])
            .env("PERFETTO_PRODUCER_SOCK_NAME", &rig.relay_sock)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(rig.path("sdk.log")).unwrap())
            .spawn()
            .unwrap(),
        name: "sdk-producer",
    };
    wait_until(Duration::from_secs(30), "sdk registration", || {
        registered_data_sources(&rig.consumer).contains(&ds)
    });
    let (trace, end) = rig.record(
        "sdk",
        &config(
            &format!("data_sources {{ config {{ name: \"{ds}\" }} }}\n"),
            "trace_all_machines: true",
        ),
        |r| probes_set_up(r) && done.exists(),
    );
    let figures = check_trace(&trace, rig.probes.pid(), 200, false);
    eprintln!("{figures}");
    assert_unsynced_end_line(&end, &rig);
    assert_relay_backs_off(&rig);
}

/// With RelayPort served, the relay's InitRelay and SyncClock are taken
/// by the real service: the relayed machine gets its system_info and
/// remote_clock_sync beside traced_probes' data.
#[test]
fn relay_port_of_our_relay_is_served_by_the_real_traced() {
    let rig = Rig::start(true);
    let (trace, end) = rig.record("relayport", &config("", "trace_all_machines: true"), |r| {
        probes_set_up(r) && r.log("relay.log").contains("clocks synced with")
    });
    let figures = check_trace(&trace, rig.probes.pid(), 0, true);
    eprintln!("{figures}");
    assert_eq!(end, "Trace stats: nothing lost", "{}", rig.logs());
    let relay_log = rig.log("relay.log");
    assert!(
        !relay_log.contains("RelayPort connection to"),
        "the RelayPort link failed:\n{}",
        rig.logs()
    );
}

/// Without trace_all_machines or a machine_name_filter naming it, the real
/// service starts no data source of a relayed machine; a filter with the
/// relay's PERFETTO_MACHINE_NAME starts just that one. Checked by order on
/// the one connection: the second session lists the unfiltered
/// linux.system_info before the filtered linux.process_stats, so any setup
/// of system_info (from either session) is logged before process_stats'.
#[test]
fn real_traced_starts_relayed_data_sources_only_when_asked() {
    let rig = Rig::start(false);
    let (host_only, end) = rig.record("host", &config("", ""), |r| session_listed(&r.consumer));
    let remote = packets_with(&host_only, &[98]);
    assert_eq!(remote, 0, "packets of the relayed machine\n{}", rig.logs());
    assert_eq!(end, "Trace stats: nothing lost", "{}", rig.logs());

    let by_name = format!(
        "buffers {{ size_kb: 8192 fill_policy: DISCARD }}\n\
         data_sources {{ config {{ name: \"linux.system_info\" }} }}\n\
         data_sources {{ config {{ name: \"linux.process_stats\"\n\
             process_stats_config {{ scan_all_processes_on_start: true }} }}\n\
           machine_name_filter: \"{MACHINE_NAME}\" }}\n\
         duration_ms: 120000\n"
    );
    let (named, end) = rig.record("named", &by_name, |r| {
        r.log("probes.log").contains("setup linux.process_stats")
    });
    let log = rig.log("probes.log");
    assert_eq!(
        log.matches("setup linux.process_stats").count(),
        1,
        "{}",
        rig.logs()
    );
    assert!(!log.contains("setup linux.system_info"), "{}", rig.logs());
    assert_unsynced_end_line(&end, &rig);
    // process_tree (TracePacket 2) on the relayed machine (machine_id 98).
    let trees = packets_with(&named, &[2, 98]);
    assert!(
        trees >= 1,
        "no process_tree of the relayed machine\n{}",
        rig.logs()
    );
}

/// The end line of a session with a relayed machine but no RelayPort:
/// nothing lost, but the machine's clocks are named as not aligned.
fn assert_unsynced_end_line(end: &str, rig: &Rig) {
    let want = "Trace stats: no data lost, but INCOMPLETE: no clock sync for relayed machine ";
    assert!(
        end.starts_with(want) && end.contains("--enable-relay-endpoint") && !end.contains(';'),
        "{end}\n{}",
        rig.logs()
    );
}

/// Packets of the trace file at `path` that have every field of `fields`.
fn packets_with(path: &Path, fields: &[u32]) -> usize {
    let packets = crate::support::traced::packets_from_file(&std::fs::read(path).unwrap());
    packets
        .iter()
        .filter(|p| {
            fields
                .iter()
                .all(|n| tracebox::protozero::decode::FieldIter::new(p).any(|f| f.number == *n))
        })
        .count()
}

/// True once the service lists a tracing session.
fn session_listed(consumer: &str) -> bool {
    use tracebox::pb::protos::QueryServiceStateResponse;
    let (mut c, port) = crate::support::traced::connect(consumer, "ConsumerPort");
    let Ok(replies) = c.invoke(&port, "QueryServiceState", &[], None) else {
        return false;
    };
    replies.iter().any(|r| {
        tracebox::protozero::decode::decode_message::<QueryServiceStateResponse>(&r.payload)
            .ok()
            .and_then(|m| m.service_state)
            .is_some_and(|s| s.num_sessions.unwrap_or(0) > 0 || !s.tracing_sessions.is_empty())
    })
}
