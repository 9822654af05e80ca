//! The traced daemon's command line and sockets: --version, comma lists of
//! producer sockets, --set-socket-permissions, --background.

use crate::support::traced as traced_support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use traced_support::*;

const BIN: &str = env!("CARGO_BIN_EXE_tracebox");

#[test]
fn version_and_bad_flags() {
    let out = Command::new(BIN)
        .args(["traced", "--version"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("tracebox"));
    let out = Command::new(BIN)
        .args(["traced", "--set-socket-permissions", "a:0660"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--set-socket-permissions"));
}

#[test]
fn listens_on_every_producer_socket_with_permissions() {
    let dir = tempfile::tempdir().unwrap();
    let p1 = dir.path().join("p1.sock");
    let p2 = dir.path().join("p2.sock");
    let c = dir.path().join("c.sock");
    std::fs::write(&p1, b"stale").unwrap(); // stale files are replaced
    let list = format!("{},{}", p1.display(), p2.display());
    let daemon = start_traced_with(
        &list,
        c.to_str().unwrap(),
        &["--set-socket-permissions", "root:0660:root:0600"],
    );
    for p in [&p1, &p2] {
        let (_client, port) = connect(p.to_str().unwrap(), "ProducerPort");
        assert!(port.method_id("CommitData").is_some());
        assert_eq!(
            std::fs::metadata(p).unwrap().permissions().mode() & 0o777,
            0o660
        );
    }
    assert_eq!(
        std::fs::metadata(&c).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let (_client, port) = connect(c.to_str().unwrap(), "ConsumerPort");
    assert_eq!(port.method_id("EnableTracing"), Some(1));
    assert_eq!(port.method_id("CloneSession"), Some(15));
    drop(daemon);
}

#[test]
fn background_prints_the_pid_once_listening() {
    let pid = std::process::id();
    let psock = format!("@tracebox-test-bg-p-{pid}");
    let csock = format!("@tracebox-test-bg-c-{pid}");
    let out = Command::new(BIN)
        .args(["traced", "--background"])
        .env("PERFETTO_PRODUCER_SOCK_NAME", &psock)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &csock)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let daemon_pid: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    // Already listening when --background returned.
    let (_c, port) = connect(&csock, "ConsumerPort");
    assert!(port.method_id("ReadBuffers").is_some());
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// `--background` keeps the log: syslog when its socket answers (one
/// datagram per line, facility daemon), else the file of TRACEBOX_LOG_FILE.
#[test]
fn background_daemons_log_to_syslog_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let syslog = dir.path().join("dev-log");
    let rx = std::os::unix::net::UnixDatagram::bind(&syslog).unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let pid = std::process::id();
    let out = Command::new(BIN)
        .args(["traced", "--background"])
        .env(
            "PERFETTO_PRODUCER_SOCK_NAME",
            format!("@tbx-bg-log-p-{pid}"),
        )
        .env(
            "PERFETTO_CONSUMER_SOCK_NAME",
            format!("@tbx-bg-log-c-{pid}"),
        )
        .env("TRACEBOX_SYSLOG_SOCKET", &syslog)
        .output()
        .unwrap();
    assert!(out.status.success());
    let daemon: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let mut buf = [0u8; 512];
    let n = rx.recv(&mut buf).expect("no syslog message");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        msg.starts_with(&format!(
            "<30>traced[{daemon}]: I: started in the background"
        )),
        "{msg}"
    );
    let kill = |p: i32| {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p),
            nix::sys::signal::Signal::SIGKILL,
        );
    };
    kill(daemon);

    // No syslog: the file named by the defaults, with what the daemon says.
    let log = dir.path().join("probes.log");
    let out = Command::new(BIN)
        .args(["traced_probes", "--background"])
        .env(
            "PERFETTO_PRODUCER_SOCK_NAME",
            format!("@tbx-bg-log-none-{pid}"),
        )
        .env("TRACED_PROBES_STATE_FILE", dir.path().join("state"))
        .env("TRACEBOX_SYSLOG_SOCKET", dir.path().join("no-syslog"))
        .env("TRACEBOX_LOG_FILE", &log)
        .env("TRACEBOX_LOG", "debug")
        .output()
        .unwrap();
    assert!(out.status.success());
    let daemon: i32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("cannot connect") {
            assert!(text.contains("started in the background"), "{text}");
            // Each line is stamped (UTC): when a board's log says what.
            let line = text
                .lines()
                .find(|l| l.contains("started in the background"));
            let stamp = line
                .and_then(|l| l.split_once(" [traced_probes]"))
                .map(|x| x.0);
            assert!(
                stamp
                    .is_some_and(|s| s.len() == 24 && s.ends_with('Z') && s.as_bytes()[10] == b'T'),
                "{text}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "log: {text}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    kill(daemon);
}

/// systemd `Type=notify`: READY=1 arrives on NOTIFY_SOCKET once traced
/// listens (traced_probes reports the same way once connected).
#[test]
fn notify_socket_gets_ready_once_listening() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify");
    let rx = std::os::unix::net::UnixDatagram::bind(&notify).unwrap();
    rx.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let csock = format!("@tbx-notify-c-{}", std::process::id());
    let mut child = Command::new(BIN)
        .arg("traced")
        .env("PERFETTO_PRODUCER_SOCK_NAME", dir.path().join("p.sock"))
        .env("PERFETTO_CONSUMER_SOCK_NAME", &csock)
        .env("NOTIFY_SOCKET", &notify)
        .spawn()
        .unwrap();
    let mut buf = [0u8; 64];
    let n = rx.recv(&mut buf).expect("no READY=1");
    assert_eq!(&buf[..n], b"READY=1");
    assert!(tracebox::cmd::autostart::service_answers(&csock));

    let mut probes = Command::new(BIN)
        .arg("traced_probes")
        .env("PERFETTO_PRODUCER_SOCK_NAME", dir.path().join("p.sock"))
        .env("TRACED_PROBES_STATE_FILE", dir.path().join("state"))
        .env("NOTIFY_SOCKET", &notify)
        .spawn()
        .unwrap();
    let n = rx.recv(&mut buf).expect("no READY=1 from traced_probes");
    assert_eq!(&buf[..n], b"READY=1");
    let _ = probes.kill();
    let _ = probes.wait();
    let _ = child.kill();
    let _ = child.wait();
}
