//! `traced_relay` as init starts it: `--background` prints the pid only
//! once the producer socket listens (0666 by default, or the
//! `--set-socket-permissions GROUP:MODE` asked), logs to the file the
//! defaults name, and refuses to start without a central address.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::traced_relay_wire_real::free_tcp_port;

const BIN: &str = env!("CARGO_BIN_EXE_tracebox");

struct Killed(i32);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn relay(dir: &std::path::Path, socket: &str, extra: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("traced_relay")
        .arg("--background")
        .args(extra)
        .env("PERFETTO_PRODUCER_SOCK_NAME", dir.join(socket))
        // Nobody listens there: the relay still serves its producers and
        // retries the central traced.
        .env(
            "PERFETTO_RELAY_SOCK_NAME",
            format!("127.0.0.1:{}", free_tcp_port()),
        )
        .env("TRACEBOX_SYSLOG_SOCKET", dir.join("no-syslog"))
        .env("TRACEBOX_LOG_FILE", dir.join("relay.log"))
        .output()
        .unwrap()
}

fn daemon_pid(out: &std::process::Output) -> Killed {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Killed(String::from_utf8_lossy(&out.stdout).trim().parse().unwrap())
}

#[test]
fn background_relay_listens_before_it_prints_its_pid() {
    let dir = tempfile::tempdir().unwrap();
    let _daemon = daemon_pid(&relay(dir.path(), "p.sock", &[]));
    let sock = dir.path().join("p.sock");
    // Already listening, open to every local producer as traced's socket.
    std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o666);

    let _other = daemon_pid(&relay(
        dir.path(),
        "q.sock",
        &["--set-socket-permissions", "root:0640"],
    ));
    let mode = std::fs::metadata(dir.path().join("q.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o640);

    let log = dir.path().join("relay.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&format!("relaying {}", sock.display())) {
            assert!(
                text.contains("[traced_relay] I: started in the background"),
                "{text}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "no relay log line: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn relay_without_a_central_address_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["traced_relay", "--background"])
        .env("PERFETTO_PRODUCER_SOCK_NAME", dir.path().join("p.sock"))
        .env_remove("PERFETTO_RELAY_SOCK_NAME")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("PERFETTO_RELAY_SOCK_NAME is not set"), "{err}");
    assert!(!dir.path().join("p.sock").exists());
}
