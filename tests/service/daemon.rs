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
