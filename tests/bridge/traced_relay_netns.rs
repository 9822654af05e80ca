//! Two machines on one host: network namespace A runs the central traced
//! (TCP producer socket on a veth address) and a local traced_probes;
//! namespace B runs traced_relay and its own traced_probes. A consumer
//! records one trace holding both probes' packets, B's stamped with
//! machine id 1 and A's with none. Needs root and `ip`; skipped (said on
//! stderr) otherwise.

use std::os::fd::AsRawFd;
use std::process::{Child, Command};
use std::time::Duration;

use crate::support::probes::{registered_data_sources, wait_until};
use crate::support::traced::{call, connect, packets_from_replies};
use tracebox::protozero::decode::{read_varint, FieldIter};
use tracebox::protozero::{put_bytes, put_str, put_varint, VecStream};

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
        let id = std::process::id();
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

    fn spawn(&self, which: usize, applet: &str, env: &[(&str, String)]) -> Proc {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[which]])
            .arg(env!("CARGO_BIN_EXE_tracebox"))
            .arg(applet);
        for (k, v) in env {
            c.env(k, v);
        }
        Proc(c.spawn().unwrap())
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

fn trusted(p: &[u8], field: u32) -> Option<u64> {
    FieldIter::new(p)
        .filter(|f| f.number == field)
        .filter_map(|f| read_varint(f.value))
        .map(|v| v.0)
        .last()
}

#[test]
fn two_namespaces_one_trace_with_machine_ids() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let Some(ns) = Netns::create() else {
        eprintln!("skipped: cannot create network namespaces");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (producer, consumer, relay_local) = (sock("p.sock"), sock("c.sock"), sock("relay.sock"));

    let (rd, wr) = nix::unistd::pipe().unwrap();
    let no_cloexec = nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty());
    nix::fcntl::fcntl(wr.as_raw_fd(), no_cloexec).unwrap();
    let _traced = ns.spawn(
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
    );
    drop(wr);
    let mut b = [0u8; 1];
    std::io::Read::read_exact(&mut std::fs::File::from(rd), &mut b).expect("traced ready");

    let probes_env = |sock: &str, state: &str| {
        [
            ("PERFETTO_PRODUCER_SOCK_NAME", sock.to_string()),
            (
                "TRACED_PROBES_STATE_FILE",
                dir.path().join(state).display().to_string(),
            ),
        ]
    };
    let probes_a = ns.spawn(0, "traced_probes", &probes_env(&producer, "state-a"));
    let _relay = ns.spawn(
        1,
        "traced_relay",
        &[
            ("PERFETTO_PRODUCER_SOCK_NAME", relay_local.clone()),
            ("PERFETTO_RELAY_SOCK_NAME", "10.231.0.1:20001".into()),
            ("PERFETTO_MACHINE_NAME", "board-b".into()),
        ],
    );
    wait_until(Duration::from_secs(20), "relay socket", || {
        std::path::Path::new(&relay_local).exists()
    });
    let probes_b = ns.spawn(1, "traced_probes", &probes_env(&relay_local, "state-b"));
    wait_until(Duration::from_secs(30), "both probes registered", || {
        registered_data_sources(&consumer)
            .iter()
            .filter(|d| *d == "linux.system_info")
            .count()
            == 2
    });

    let mut dsc = VecStream::new();
    put_str(&mut dsc, 1, "linux.system_info");
    let mut ds = VecStream::new();
    put_bytes(&mut ds, 1, dsc.as_bytes());
    let mut buf = VecStream::new();
    put_varint(&mut buf, 1, 1024);
    let mut tc = VecStream::new();
    put_bytes(&mut tc, 1, buf.as_bytes());
    put_bytes(&mut tc, 2, ds.as_bytes());
    let mut req = VecStream::new();
    put_bytes(&mut req, 1, tc.as_bytes());
    let (mut cons, cport) = connect(&consumer, "ConsumerPort");
    let enable = cons
        .start_invoke(&cport, "EnableTracing", req.as_bytes(), None)
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    call(&mut cons, &cport, "DisableTracing", &[]);
    cons.next_reply(enable).unwrap().unwrap();
    let packets = packets_from_replies(&cons.invoke(&cport, "ReadBuffers", &[], None).unwrap());

    let of = |pid: u32| {
        packets
            .iter()
            .filter(|p| trusted(p, 79) == Some(pid as u64))
            .collect::<Vec<_>>()
    };
    let (a, b) = (of(probes_a.0.id()), of(probes_b.0.id()));
    assert!(
        !a.is_empty() && !b.is_empty(),
        "A: {}, B: {}",
        a.len(),
        b.len()
    );
    assert!(a.iter().all(|p| trusted(p, 98).is_none()), "A is the host");
    assert!(
        b.iter().all(|p| trusted(p, 98) == Some(1)),
        "B is machine 1"
    );
}
