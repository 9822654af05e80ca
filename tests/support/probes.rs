//! Helpers for the traced_probes integration tests: real Perfetto peers
//! from tests/sdk-interop (real-traced, sdk-consumer), our binary, tracefs
//! instances and the Python checker.
#![allow(dead_code)]

use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tracebox::base::sock_addr::SockAddr;
use tracebox::ipc::client::BlockingClient;

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
pub const TRACEFS: &str = "/sys/kernel/tracing";

/// A child process killed (SIGKILL) when dropped, unless already waited.
pub struct Proc {
    pub child: Child,
    pub name: &'static str,
}

impl Proc {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), sig);
    }

    /// Waits up to `timeout` for the exit status.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The sdk-interop binaries; a missing build fails the test (it is not a
/// reason to skip: scripts/test.sh builds them first).
pub fn interop_bin(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("TRACEBOX_SDK_INTEROP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("tests/sdk-interop/target/release"));
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is not built: run `scripts/sdk-interop.sh build` (scripts/test.sh does)",
        p.display()
    );
    Some(p)
}

pub fn wait_until(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Private socket names and a state file in `dir`.
pub struct Sockets {
    pub producer: String,
    pub consumer: String,
}

impl Sockets {
    pub fn in_dir(dir: &Path) -> Sockets {
        Sockets {
            producer: dir.join("p.sock").to_str().unwrap().into(),
            consumer: dir.join("c.sock").to_str().unwrap().into(),
        }
    }
}

/// Starts the real Perfetto service and waits for its sockets.
pub fn start_real_traced(bin: &Path, s: &Sockets, log: &Path) -> Proc {
    let child = Command::new(bin)
        .args([
            "--producer-socket",
            &s.producer,
            "--consumer-socket",
            &s.consumer,
        ])
        .env_remove("TRACED_NOTIFY_FD")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let p = Proc {
        child,
        name: "real-traced",
    };
    wait_until(Duration::from_secs(20), "real-traced sockets", || {
        Path::new(&s.producer).exists() && Path::new(&s.consumer).exists()
    });
    p
}

/// Starts our own service (`tracebox traced`) and waits for its sockets.
pub fn start_our_traced(s: &Sockets, log: &Path) -> Proc {
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced")
        .env("PERFETTO_PRODUCER_SOCK_NAME", &s.producer)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &s.consumer)
        .env_remove("TRACED_NOTIFY_FD")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let p = Proc {
        child,
        name: "traced",
    };
    wait_until(Duration::from_secs(20), "traced sockets", || {
        Path::new(s.producer.split(',').next().unwrap()).exists() && Path::new(&s.consumer).exists()
    });
    p
}

/// Starts `tracebox traced_probes ARGS` on `producer_sock`; if `wait_ready`,
/// waits for the "1" on TRACED_PROBES_NOTIFY_FD.
pub fn start_probes(
    producer_sock: &str,
    state_file: &Path,
    args: &[&str],
    log: &Path,
    wait_ready: bool,
) -> Proc {
    let (r, w) = nix::unistd::pipe().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .arg("traced_probes")
        .args(args)
        .env("PERFETTO_PRODUCER_SOCK_NAME", producer_sock)
        .env("TRACED_PROBES_NOTIFY_FD", w.as_raw_fd().to_string())
        .env("TRACED_PROBES_STATE_FILE", state_file)
        .env("TRACEBOX_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    drop(w);
    let p = Proc {
        child,
        name: "traced_probes",
    };
    if wait_ready {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut f = std::fs::File::from(r);
            let mut b = [0u8; 1];
            let n = f.read(&mut b).unwrap_or(0);
            let _ = tx.send((n, b[0]));
        });
        let got = rx.recv_timeout(Duration::from_secs(30));
        assert_eq!(
            got.ok(),
            Some((1, b'1')),
            "traced_probes never reported ready; log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    p
}

/// Our traced and a ready traced_probes on private sockets in `dir` (logs
/// traced.log and probes.log, state file `state`); killed when dropped.
pub struct Daemons {
    pub socks: Sockets,
    pub traced: Proc,
    pub probes: Proc,
}

pub fn start_our_daemons(dir: &Path) -> Daemons {
    let socks = Sockets::in_dir(dir);
    let traced = start_our_traced(&socks, &dir.join("traced.log"));
    let probes = start_probes(
        &socks.producer,
        &dir.join("state"),
        &[],
        &dir.join("probes.log"),
        true,
    );
    Daemons {
        socks,
        traced,
        probes,
    }
}

/// Writes a binary TraceConfig from text.
pub fn write_config(path: &Path, text: &str) {
    let bytes = tracebox::cmd::pbtx::trace_config_txt_to_pb("test", text).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// Our client recording the text config `cfg` into `out` through the
/// consumer socket `consumer`, its stderr in `dir/consumer.log`.
pub fn start_our_client(dir: &Path, cfg: &Path, out: &Path, consumer: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(cfg)
        .arg("-o")
        .arg(out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", consumer)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("consumer.log")).unwrap())
        .spawn()
        .unwrap()
}

/// sdk-consumer running `config` until `stop_file` appears.
pub fn start_consumer(
    bin: &Path,
    s: &Sockets,
    config: &Path,
    out: &Path,
    stop: &Path,
    log: &Path,
) -> Proc {
    let child = Command::new(bin)
        .arg("--out")
        .arg(out)
        .arg("--config")
        .arg(config)
        .arg("--stop-file")
        .arg(stop)
        .args(["--timeout-s", "60"])
        .env("PERFETTO_CONSUMER_SOCK_NAME", &s.consumer)
        .stdout(std::fs::File::create(log).unwrap())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    Proc {
        child,
        name: "sdk-consumer",
    }
}

/// Waits until the sdk-consumer logging to `log` has started its session:
/// its `start_blocking` returned, so the service saw every data source of
/// the session ack its start.
pub fn wait_consumer_started(log: &Path) {
    wait_until(Duration::from_secs(60), "sdk-consumer start", || {
        read_trim(log).contains("sdk-consumer: started")
    });
}

/// Data source names traced knows, via ConsumerPort.QueryServiceState.
pub fn registered_data_sources(consumer_sock: &str) -> Vec<String> {
    use tracebox::pb::protos::{QueryServiceStateRequest, QueryServiceStateResponse};
    let Ok(addr) = SockAddr::parse(consumer_sock) else {
        return vec![];
    };
    let Ok(mut c) = BlockingClient::connect(&addr) else {
        return vec![];
    };
    c.set_timeout(Some(Duration::from_secs(5)));
    let Ok(svc) = c.bind_service("ConsumerPort") else {
        return vec![];
    };
    let req = tracebox::traced_probes::wire::encode(&QueryServiceStateRequest::default());
    let Ok(replies) = c.invoke(&svc, "QueryServiceState", &req, None) else {
        return vec![];
    };
    let bytes: Vec<u8> = replies.into_iter().flat_map(|r| r.payload).collect();
    let Some(resp) = tracebox::traced_probes::wire::decode::<QueryServiceStateResponse>(&bytes)
    else {
        return vec![];
    };
    let state = resp.service_state.unwrap_or_default();
    state
        .data_sources
        .into_iter()
        .filter_map(|d| d.ds_descriptor.and_then(|x| x.name))
        .collect()
}

pub fn python() -> Option<PathBuf> {
    if let Ok(p) = std::env::var("TRACEBOX_PYTHON") {
        return Some(PathBuf::from(p));
    }
    let venv = Path::new(ROOT).join(".venv/bin/python");
    venv.exists().then_some(venv)
}

/// Runs the checker `tests/py/NAME` with `args` under the venv's Python;
/// panics with its output on failure, else returns it (stdout + stderr).
pub fn run_py_check<S: AsRef<std::ffi::OsStr>>(name: &str, args: &[S]) -> String {
    let py = python().expect("no Python venv: run scripts/setup-python.sh");
    let out = Command::new(py)
        .arg(Path::new(ROOT).join("tests/py").join(name))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} failed:\n{text}");
    text
}

/// Runs tests/py/check_probes_trace.py; panics with its output on failure.
pub fn check_trace(trace: &Path, args: &[String]) {
    let mut all = vec![trace.as_os_str().to_owned()];
    all.extend(args.iter().map(Into::into));
    eprintln!("{}", run_py_check("check_probes_trace.py", &all));
}

pub fn read_trim(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub fn instance_dir(name: &str) -> PathBuf {
    Path::new(TRACEFS).join("instances").join(name)
}

/// Waits until the traced_probes logging to `dir/probes.log` (at debug
/// level) started ftrace on `instance` and the instance is tracing.
pub fn wait_ftrace_started(dir: &Path, instance: &str) {
    let started = format!(
        "started on {}",
        tracebox::traced_probes::ftrace::ownership::describe(instance)
    );
    let idir = instance_dir(instance);
    wait_until(Duration::from_secs(30), "ftrace start", || {
        read_trim(dir.join("probes.log"))
            .lines()
            .any(|l| l.ends_with(&started))
            && read_trim(idir.join("tracing_on")) == "1"
    });
}

/// Dumps logs of a failed run.
pub fn dump(dir: &Path) {
    for name in ["traced.log", "probes.log", "consumer.log"] {
        let p = dir.join(name);
        if let Ok(t) = std::fs::read_to_string(&p) {
            eprintln!("---- {name}\n{t}");
        }
    }
}

/// Whether the end line in `stderr` says nothing was lost. Some kernels
/// never record some sched_switch events (this CI's VMs skip the switch out
/// of one cpu's idle task): the honest line then names those, and only
/// those.
pub fn says_nothing_lost(stderr: &str) -> bool {
    let Some(line) = stderr.lines().find(|l| l.starts_with("Trace stats: ")) else {
        return false;
    };
    line == "Trace stats: nothing lost"
        || line
            .strip_prefix("Trace stats: no data lost, but INCOMPLETE: the kernel never recorded ")
            .is_some_and(|rest| rest.contains(" sched_switch events (cpu") && !rest.contains("; "))
}
