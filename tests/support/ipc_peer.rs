//! Shared by the IPC integration tests: a test service, a host runner
//! (in a thread or a child process) and child-process plumbing.
//!
//! Child processes re-run the test binary itself with
//! `--exact support::ipc_peer::child_role_entry` and
//! `TRACEBOX_TEST_ROLE=<role>` (the entry test is defined here).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::os::fd::OwnedFd;
use std::process::{Child, Command, Stdio};

use tracebox::base::event_loop::EventLoop;
use tracebox::base::sock_addr::SockAddr;
use tracebox::ipc::client::{BlockingClient, BoundService};
use tracebox::ipc::host::{Call, ClientId, Host, HostApp, Reply, ReplySink, ReplyTo, Services};

pub const SERVICE: &str = "TestPort";
pub const METHODS: &[&str] = &[
    "Echo",          // 1: replies with the args
    "Stream",        // 2: args = decimal n; n replies "0".."n-1", the last one final
    "ReadFd",        // 3: replies with the contents of the passed fd
    "SendFd",        // 4: replies with a memfd holding the args
    "Record",        // 5: appends args to a log (used with drop_reply)
    "GetLog",        // 6: replies with the log joined by ','
    "WhoAmI",        // 7: replies with the caller's SO_PEERCRED pid
    "Park",          // 8: stores the reply handle, no reply yet
    "Release",       // 9: answers every parked call with "released", then itself
    "Flood",         // 10: args = n; n replies of 64 KiB each
    "Disconnects",   // 11: number of clients seen disconnecting
    "FloodsHandled", // 12: Flood calls handled (each runs to its end or its cut in one go)
];
pub const FLOOD_CHUNK: usize = 64 * 1024;

/// The service behind every test host.
#[derive(Default)]
pub struct TestService {
    log: Vec<String>,
    parked: Vec<ReplyTo>,
    disconnects: u32,
    floods_handled: u32,
}

fn read_fd_contents(fd: OwnedFd) -> std::io::Result<Vec<u8>> {
    let mut f = std::fs::File::from(fd);
    f.rewind()?;
    let mut v = Vec::new();
    f.read_to_end(&mut v)?;
    Ok(v)
}

pub fn memfd_with(contents: &[u8]) -> OwnedFd {
    let mut f = memfd::MemfdOptions::new()
        .create("tracebox-test")
        .unwrap()
        .into_file();
    f.write_all(contents).unwrap();
    f.into()
}

impl Services for TestService {
    fn invoke(&mut self, call: Call<'_>, out: &mut dyn ReplySink) {
        let to = call.reply_to;
        match call.method_name {
            "Echo" => {
                out.reply(&to, Reply::ok(call.args));
            }
            "Stream" => {
                let n: usize = String::from_utf8_lossy(&call.args).parse().unwrap_or(0);
                for i in 0..n {
                    let body = i.to_string().into_bytes();
                    out.reply(
                        &to,
                        if i + 1 == n {
                            Reply::ok(body)
                        } else {
                            Reply::more(body)
                        },
                    );
                }
            }
            "ReadFd" => match call.fd.map(read_fd_contents) {
                Some(Ok(v)) => {
                    out.reply(&to, Reply::ok(v));
                }
                _ => {
                    out.reply(&to, Reply::fail());
                }
            },
            "SendFd" => {
                out.reply(&to, Reply::ok(vec![]).with_fd(memfd_with(&call.args)));
            }
            "Record" => {
                self.log
                    .push(String::from_utf8_lossy(&call.args).into_owned());
                out.reply(&to, Reply::ok(b"recorded".to_vec())); // dropped if drop_reply
            }
            "GetLog" => {
                out.reply(&to, Reply::ok(self.log.join(",").into_bytes()));
            }
            "WhoAmI" => {
                out.reply(&to, Reply::ok(call.peer.pid.to_string().into_bytes()));
            }
            "Park" => self.parked.push(to),
            "Release" => {
                for p in self.parked.drain(..) {
                    out.reply(&p, Reply::ok(b"released".to_vec()));
                }
                out.reply(&to, Reply::ok(vec![]));
            }
            "Flood" => {
                let n: usize = String::from_utf8_lossy(&call.args).parse().unwrap_or(0);
                self.floods_handled += 1;
                for i in 0..n {
                    // Stop once the host dropped the client.
                    if !out.reply(&to, Reply::more(vec![i as u8; FLOOD_CHUNK])) {
                        return;
                    }
                }
                out.reply(&to, Reply::ok(vec![]));
            }
            "FloodsHandled" => {
                out.reply(&to, Reply::ok(self.floods_handled.to_string().into_bytes()));
            }
            "Disconnects" => {
                out.reply(&to, Reply::ok(self.disconnects.to_string().into_bytes()));
            }
            // Methods of "OtherPort" (random garbage can reach them).
            _ => {
                out.reply(&to, Reply::fail());
            }
        }
    }

    fn on_client_disconnected(&mut self, client: ClientId, _out: &mut dyn ReplySink) {
        self.disconnects += 1;
        self.parked.retain(|p| p.client != client);
    }
}

/// Per-client queue bound used by test hosts: small, so a stuck client
/// overflows quickly.
pub const TEST_MAX_QUEUED: usize = 1024 * 1024;

/// Runs a host on `addrs` in this thread until `()` is posted.
pub fn run_host(
    addrs: &[String],
    ready: impl FnOnce(tracebox::base::event_loop::RemoteHandle<()>),
) {
    let mut el = EventLoop::<()>::new().unwrap();
    let mut host = Host::new();
    host.set_max_queued_bytes(TEST_MAX_QUEUED);
    host.expose_service("OtherPort", &["Nothing"]);
    host.expose_service(SERVICE, METHODS);
    for a in addrs {
        host.listen(&mut el.ctl(), &SockAddr::parse(a).unwrap())
            .unwrap();
    }
    ready(el.remote());
    el.run(&mut HostApp {
        host,
        services: TestService::default(),
    })
    .unwrap();
}

/// A host in a background thread; quits when dropped.
pub struct ThreadHost {
    quit: tracebox::base::event_loop::RemoteHandle<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ThreadHost {
    pub fn start(addrs: Vec<String>) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || run_host(&addrs, |r| tx.send(r).unwrap()));
        ThreadHost {
            quit: rx.recv().unwrap(),
            thread: Some(thread),
        }
    }
}

impl Drop for ThreadHost {
    fn drop(&mut self) {
        let _ = self.quit.post(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A child process running a role; killed when dropped.
pub struct ChildPeer {
    pub child: Child,
    pub stdout: BufReader<std::process::ChildStdout>,
}

impl ChildPeer {
    /// Re-runs this test binary as `role` with `arg` and waits for its
    /// "READY" line (roles print it once they are listening/connected).
    pub fn spawn(role: &str, arg: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "support::ipc_peer::child_role_entry",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env("TRACEBOX_TEST_ROLE", role)
            .env("TRACEBOX_TEST_ARG", arg)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        ChildPeer { child, stdout }
    }

    /// Reads stdout lines until one starts with `prefix`; returns the rest.
    pub fn read_line_with(&mut self, prefix: &str) -> String {
        loop {
            let mut line = String::new();
            if self.stdout.read_line(&mut line).unwrap() == 0 {
                panic!("child exited before printing {prefix:?}");
            }
            if let Some(rest) = line.trim_end().strip_prefix(prefix) {
                return rest.to_string();
            }
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ChildPeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns a host child listening on `addrs` (comma-separated).
pub fn spawn_host_child(addrs: &str) -> ChildPeer {
    let mut c = ChildPeer::spawn("host", addrs);
    c.read_line_with("READY");
    c
}

/// Entry point of child processes: does nothing unless this process was
/// spawned as a child (every test binary that includes the support module
/// has it, so any of them can spawn peers).
#[test]
fn child_role_entry() {
    let Ok(role) = std::env::var("TRACEBOX_TEST_ROLE") else {
        return;
    };
    let arg = std::env::var("TRACEBOX_TEST_ARG").unwrap_or_default();
    match role.as_str() {
        "host" => {
            let addrs: Vec<String> = arg.split(',').map(String::from).collect();
            run_host(&addrs, |_| {
                println!("READY");
                std::io::stdout().flush().unwrap();
            });
        }
        "whoami-client" => {
            let (mut c, svc) = connect_bound(&arg);
            let r = c.invoke(&svc, "WhoAmI", b"", None).unwrap();
            println!("PID {}", String::from_utf8(r[0].payload.clone()).unwrap());
            // An fd from the child: the host reads it back in ReadFd.
            let r = c
                .invoke(&svc, "ReadFd", b"", Some(memfd_with(b"from-child")))
                .unwrap();
            println!("FD {}", String::from_utf8(r[0].payload.clone()).unwrap());
        }
        other => panic!("unknown role {other}"),
    }
    std::process::exit(0);
}

/// Connects a blocking client (with a generous safety timeout, never
/// asserted on) and binds the test service.
pub fn connect_bound(addr: &str) -> (BlockingClient, BoundService) {
    let mut c = BlockingClient::connect(&SockAddr::parse(addr).unwrap()).unwrap();
    c.set_timeout(Some(std::time::Duration::from_secs(60)));
    let svc = c.bind_service(SERVICE).unwrap();
    (c, svc)
}

pub fn unique_abstract(tag: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "@tracebox-test-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}
