//! Socket permissions as a board runs them: any local user may produce
//! into root's sessions (the real Perfetto SDK producer runs as `nobody`,
//! into a session root autostarted);
//! only root consumes unless a group is configured, and then other users
//! still neither see nor stop root's sessions. Private socket paths in a
//! tempdir that `nobody` can reach.

use crate::support::cli as cli_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use cli_support::{python, sdk_bin, summary, wait_exit, Killed};

const NOBODY: u32 = 65534;

struct Board {
    dir: tempfile::TempDir,
    /// Writable by nobody (the SDK producer's done-file).
    nobody_dir: PathBuf,
    tracebox: PathBuf,
}

/// A world-readable, executable copy of `bin` in `dir` (a binary that a
/// private build tree holds is out of another user's reach).
fn reachable_copy(dir: &Path, bin: &Path) -> PathBuf {
    let to = dir.join(bin.file_name().unwrap());
    crate::support::exec_file::copy_executable(bin, &to);
    to
}

impl Board {
    fn new() -> Board {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let nobody_dir = dir.path().join("nobody");
        std::fs::create_dir(&nobody_dir).unwrap();
        nix::unistd::chown(&nobody_dir, Some(NOBODY.into()), Some(NOBODY.into())).unwrap();
        // nobody runs copies of what it runs, in this 0755 directory: the
        // checkout may sit in a directory only its owner can enter (0700,
        // as /root and `mktemp -d` are).
        let tracebox = reachable_copy(dir.path(), Path::new(env!("CARGO_BIN_EXE_tracebox")));
        Board {
            dir,
            nobody_dir,
            tracebox,
        }
    }

    fn sock(&self, which: &str) -> PathBuf {
        self.dir.path().join(format!("{which}.sock"))
    }

    fn cmd(&self, applet: &str, as_nobody: bool) -> Command {
        let mut c = Command::new(&self.tracebox);
        c.arg(applet)
            .env("PERFETTO_PRODUCER_SOCK_NAME", self.sock("producer"))
            .env("PERFETTO_CONSUMER_SOCK_NAME", self.sock("consumer"))
            .current_dir(self.dir.path());
        if as_nobody {
            c.uid(NOBODY).gid(NOBODY);
        }
        c
    }

    fn start_traced(&self, args: &[&str]) -> Killed {
        let child = Killed(self.cmd("traced", false).args(args).spawn().unwrap());
        let consumer = self.sock("consumer");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tracebox::cmd::autostart::service_answers(consumer.to_str().unwrap()) {
            assert!(Instant::now() < deadline, "traced did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn perfetto(&self, args: &[&str], as_nobody: bool) -> Output {
        self.cmd("perfetto", as_nobody).args(args).output().unwrap()
    }

    /// The real SDK producer as nobody: registers `tbx.sdk_test`, writes
    /// `packets` packets once started.
    fn start_nobody_producer(&self, packets: u32) -> Killed {
        let mut c = Command::new(reachable_copy(self.dir.path(), &sdk_bin("sdk-producer")));
        c.args(["--threads", "1", "--size", "64", "--timeout-s", "60"])
            .args(["--packets", &packets.to_string()])
            .arg("--done-file")
            .arg(self.nobody_dir.join("done"))
            .env("PERFETTO_PRODUCER_SOCK_NAME", self.sock("producer"))
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(Stdio::null());
        let child = Killed(c.spawn().unwrap());
        self.wait_query("tbx.sdk_test");
        child
    }

    fn wait_query(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let q = self.perfetto(&["--query"], false);
            let text = String::from_utf8_lossy(&q.stdout).into_owned();
            if text.contains(needle) {
                return;
            }
            assert!(Instant::now() < deadline, "{needle} never listed:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn write_config(&self, name: &str, extra: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(
            &p,
            format!(
                "buffers {{ size_kb: 4096 }}\n\
                 data_sources {{ config {{ name: \"tbx.sdk_test\" }} }}\n{extra}"
            ),
        )
        .unwrap();
        p.to_string_lossy().into_owned()
    }
}

fn mode_of(p: &Path) -> (u32, u32) {
    let m = std::fs::metadata(p).unwrap();
    (m.mode() & 0o7777, m.gid())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every for_testing packet carries the producer's uid as stamped by the
/// service.
fn for_testing_uids(trace: &Path) -> String {
    let out = Command::new(python())
        .arg("-c")
        .arg(
            "import sys\n\
             from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb\n\
             t = pb.Trace(); t.ParseFromString(open(sys.argv[1], 'rb').read())\n\
             print(sorted({p.trusted_uid for p in t.packet if p.HasField('for_testing')}))",
        )
        .arg(trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// The pids an autostarting client names on its first line ("started
/// traced (pid N), traced_probes (pid N) and traced_perf (pid N) on ...").
fn started_pids(stderr: &str) -> Vec<i32> {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("tracebox: started traced (pid "))
        .unwrap_or_else(|| panic!("the client started no daemons: {stderr}"));
    line.split("(pid ")
        .skip(1)
        .map(|t| t.split(')').next().unwrap().parse().unwrap())
        .collect()
}

/// Root records with autostart (`tracebox --txt -c ... -o ...`, sockets
/// in a private directory): the real SDK producer, running as nobody,
/// joins the running session and its packets land in root's trace,
/// stamped with its uid; nobody can neither see nor stop root's session,
/// nor autostart a service of its own on those sockets.
#[test]
fn nobody_produces_into_an_autostarted_session_of_root_but_cannot_consume() {
    let b = Board::new();
    let consumer = b.sock("consumer");
    let cfg = b.write_config("sdk.pbtx", "duration_ms: 120000\n");
    let out = b.dir.path().join("sdk.pftrace");
    let err_path = b.dir.path().join("root.err");
    let mut rec = Killed(
        Command::new(&b.tracebox)
            .args(["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
            .env("PERFETTO_PRODUCER_SOCK_NAME", b.sock("producer"))
            .env("PERFETTO_CONSUMER_SOCK_NAME", &consumer)
            .env(
                "TRACED_PROBES_STATE_FILE",
                b.dir.path().join("probes.state"),
            )
            .current_dir(b.dir.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap(),
    );
    // The session runs once the service lists it.
    b.wait_query("Tracing sessions: 1 (started: 1)");
    let daemons = started_pids(&std::fs::read_to_string(&err_path).unwrap());
    assert_eq!(daemons.len(), 3, "{daemons:?}");
    assert_eq!(mode_of(&b.sock("producer")).0, 0o666);
    assert_eq!(mode_of(&consumer).0, 0o600);

    let _producer = b.start_nobody_producer(40);
    let done = b.nobody_dir.join("done");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the SDK producer never wrote");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The consumer socket refuses nobody, and says so and which socket:
    // nobody neither lists root's session nor stops it.
    let q = b.perfetto(&["--query"], true);
    assert!(!q.status.success());
    let err = stderr(&q);
    assert!(err.to_lowercase().contains("permission denied"), "{err}");
    assert!(err.contains(consumer.to_str().unwrap()), "{err}");
    assert!(!String::from_utf8_lossy(&q.stdout).contains("Tracing sessions"));
    // Autostart as nobody does not try to start a second service.
    let t = Command::new(&b.tracebox)
        .args(["-t", "1s", "sched", "-o", "/dev/null"])
        .env("PERFETTO_PRODUCER_SOCK_NAME", b.sock("producer"))
        .env("PERFETTO_CONSUMER_SOCK_NAME", &consumer)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    assert!(!t.status.success());
    let err = stderr(&t);
    assert!(err.to_lowercase().contains("permission denied"), "{err}");
    assert!(err.contains(consumer.to_str().unwrap()), "{err}");
    assert!(!err.contains("tracebox: started"), "{err}");
    b.wait_query("Tracing sessions: 1 (started: 1)");

    // Root ends its session: nobody's packets are in it, stamped with its uid.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rec.0.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let code = wait_exit(&mut rec.0, Duration::from_secs(60));
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert_eq!(code, 0, "{err}");
    let s = summary(&out);
    assert_eq!(s.num("for_testing"), 40, "{s:?}");
    assert_eq!(for_testing_uids(&out), format!("[{NOBODY}]"));
    // The autostarted daemons go once idle.
    let deadline = Instant::now() + Duration::from_secs(60);
    while daemons
        .iter()
        .any(|p| Path::new(&format!("/proc/{p}/exe")).exists())
    {
        assert!(
            Instant::now() < deadline,
            "autostarted daemons left: {daemons:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn consumer_group_lets_nobody_in_but_not_into_roots_sessions() {
    let b = Board::new();
    let _traced = b.start_traced(&["--set-socket-permissions", "nogroup:0660:nogroup:0660"]);
    assert_eq!(mode_of(&b.sock("producer")), (0o660, NOBODY));
    assert_eq!(mode_of(&b.sock("consumer")), (0o660, NOBODY));

    let _producer = b.start_nobody_producer(10);
    let cfg = b.write_config(
        "detached.pbtx",
        "duration_ms: 120000\nwrite_into_file: true\nunique_session_name: \"roots_sess\"\n",
    );
    let out = b.dir.path().join("detached.pftrace");
    let d = b.perfetto(
        &[
            "--txt",
            "-c",
            &cfg,
            "-o",
            out.to_str().unwrap(),
            "--detach=rootkey",
        ],
        false,
    );
    assert!(d.status.success(), "{}", stderr(&d));
    b.wait_query("roots_sess");

    // nobody connects now, but root's session is neither listed nor
    // reachable by its key.
    let q = b.perfetto(&["--query"], true);
    assert!(q.status.success(), "{}", stderr(&q));
    let text = String::from_utf8_lossy(&q.stdout);
    assert!(text.contains("tbx.sdk_test"), "{text}");
    assert!(!text.contains("roots_sess"), "{text}");
    let stop = b.perfetto(&["--attach=rootkey", "--stop"], true);
    assert!(!stop.status.success(), "nobody stopped root's session");
    b.wait_query("roots_sess");

    // Root still can.
    let stop = b.perfetto(&["--attach=rootkey", "--stop"], false);
    assert!(stop.status.success(), "{}", stderr(&stop));
    assert_eq!(summary(&out).num("for_testing"), 10);
}
