//! Shared by the CLI end-to-end tests: our traced on private sockets, the
//! real SDK producer from tests/sdk-interop, our perfetto client, and the
//! official-descriptor trace summary.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Socket names private to one test.
pub struct Env {
    pub producer: String,
    pub consumer: String,
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new(tag: &str) -> Env {
        let pid = std::process::id();
        Env {
            producer: format!("@tbx-cli-{tag}-{pid}-p"),
            consumer: format!("@tbx-cli-{tag}-{pid}-c"),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn apply(&self, c: &mut Command) {
        c.env("PERFETTO_PRODUCER_SOCK_NAME", &self.producer)
            .env("PERFETTO_CONSUMER_SOCK_NAME", &self.consumer);
    }

    /// Our traced, ready when this returns.
    pub fn start_traced(&self) -> Killed {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
        c.arg("traced");
        self.apply(&mut c);
        let child = Killed(c.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tracebox::cmd::autostart::service_answers(&self.consumer) {
            assert!(Instant::now() < deadline, "traced did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// Perfetto's real `traced` (tests/sdk-interop), ready when this returns.
    pub fn start_real_traced(&self) -> Killed {
        let mut c = Command::new(sdk_bin("real-traced"));
        c.args([
            "--producer-socket",
            &self.producer,
            "--consumer-socket",
            &self.consumer,
        ])
        .env_remove("TRACED_NOTIFY_FD")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(self.path("real-traced.log")).unwrap());
        let child = Killed(c.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while !tracebox::cmd::autostart::service_answers(&self.consumer) {
            assert!(Instant::now() < deadline, "real traced did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// Our traced_probes on the private producer socket, ready once the
    /// service lists its data sources.
    pub fn start_probes(&self) -> Killed {
        let child = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("traced_probes")
            .env("PERFETTO_PRODUCER_SOCK_NAME", &self.producer)
            .env("TRACED_PROBES_STATE_FILE", self.path("probes.state"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.path("probes.log")).unwrap())
            .spawn()
            .unwrap();
        let k = Killed(child);
        self.wait_query("linux.sys_stats", true);
        k
    }

    /// The real SDK producer: registers `tbx.sdk_test`, writes `packets`
    /// packets when started, then waits for the stop.
    pub fn start_sdk_producer(&self, packets: u32) -> Killed {
        let mut c = Command::new(sdk_bin("sdk-producer"));
        c.args([
            "--threads",
            "1",
            "--packets",
            &packets.to_string(),
            "--size",
            "64",
            "--timeout-s",
            "60",
            "--done-file",
            self.path("sdk-producer.done").to_str().unwrap(),
        ])
        .stdout(Stdio::null());
        self.apply(&mut c);
        let child = Killed(c.spawn().unwrap());
        // Registered once the service lists the data source.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let q = self.perfetto(&["--query"]);
            if String::from_utf8_lossy(&q.stdout).contains("tbx.sdk_test") {
                return child;
            }
            assert!(Instant::now() < deadline, "sdk-producer did not register");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the SDK producer has written (and flushed) all its
    /// packets, which happens once its data source was started.
    pub fn wait_producer_written(&self) {
        let done = self.path("sdk-producer.done");
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done.exists() {
            assert!(Instant::now() < deadline, "sdk-producer never wrote");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A `perfetto` command (plain client through a symlink, no autostart).
    pub fn perfetto_cmd(&self, args: &[&str]) -> Command {
        let link = self.dir.path().join("perfetto");
        if !link.exists() {
            std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
        }
        let mut c = Command::new(link);
        c.args(args);
        self.apply(&mut c);
        c
    }

    /// Writes `config` (text format) and starts `perfetto --txt -c` on it,
    /// writing into the returned path.
    pub fn spawn_session(&self, config: &str) -> (Child, PathBuf) {
        let cfg = self.write("session.pbtx", config);
        let out = self.path("session.pftrace");
        let child = self
            .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        (child, out)
    }

    pub fn perfetto(&self, args: &[&str]) -> Output {
        self.perfetto_cmd(args).output().unwrap()
    }

    pub fn trigger(&self, names: &[&str]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tracebox"));
        c.arg("trigger_perfetto").args(names);
        self.apply(&mut c);
        c.output().unwrap()
    }

    pub fn write(&self, name: &str, text: &str) -> String {
        let p = self.path(name);
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }

    /// Polls `--query` until `needle` shows up (or not, with `present`).
    pub fn wait_query(&self, needle: &str, present: bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let q = String::from_utf8_lossy(&self.perfetto(&["--query"]).stdout).into_owned();
            if q.contains(needle) == present {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "query never {} {needle:?}:\n{q}",
                if present { "showed" } else { "dropped" }
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Waits for `child` with a generous bound; the bound only guards against
/// a hung test, it is not what the test checks.
pub fn wait_exit(child: &mut Child, limit: Duration) -> i32 {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A binary of tests/sdk-interop (built by `scripts/sdk-interop.sh build`,
/// which scripts/test.sh runs first).
pub fn sdk_bin(name: &str) -> PathBuf {
    let dir = std::env::var_os("TRACEBOX_SDK_INTEROP_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("tests/sdk-interop/target/release"));
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} missing: run scripts/sdk-interop.sh build",
        p.display()
    );
    p
}

pub fn python() -> PathBuf {
    std::env::var_os("TRACEBOX_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv/bin/python"))
}

/// Summary of a trace file by the official descriptors (tests/py/trace_summary.py).
pub fn summary(trace: &Path) -> serde_like::Json {
    let out = Command::new(python())
        .arg(repo().join("tests/py/trace_summary.py"))
        .arg(trace)
        .output()
        .expect("run python (scripts/setup-python.sh)");
    assert!(
        out.status.success(),
        "trace does not parse: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_like::Json(String::from_utf8(out.stdout).unwrap())
}

/// Just enough JSON probing for assertions, without a JSON crate.
pub mod serde_like {
    #[derive(Debug)]
    pub struct Json(pub String);

    impl Json {
        /// Number after `"key": `.
        pub fn num(&self, key: &str) -> i64 {
            let pat = format!("\"{key}\": ");
            let mut at = self
                .0
                .find(&pat)
                .unwrap_or_else(|| panic!("no {key} in {}", self.0))
                + pat.len();
            if self.0[at..].starts_with('[') {
                at += 1;
            }
            let digits: String = self.0[at..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '-')
                .collect();
            digits
                .parse()
                .unwrap_or_else(|_| panic!("{key} is not a number in {}", self.0))
        }

        pub fn contains(&self, s: &str) -> bool {
            self.0.contains(s)
        }
    }
}
