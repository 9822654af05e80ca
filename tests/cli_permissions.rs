//! Permission problems read as permission problems, for a non-root user
//! (`setpriv` to nobody): a root-only consumer socket, and tracefs.

mod traced_probes_common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use traced_probes_common::*;

/// `tracebox ARGS` as uid/gid nobody.
fn as_nobody(args: &[&str]) -> Command {
    let mut c = Command::new("setpriv");
    c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(env!("CARGO_BIN_EXE_tracebox"))
        .args(args);
    c
}

#[test]
fn a_root_only_socket_says_permission_denied() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // nobody may reach the socket node, but not connect (mode 0755, root).
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let socks = Sockets::in_dir(dir);
    let _traced = start_our_traced(&socks, &dir.join("traced.log"));
    let o = as_nobody(&["perfetto", "--query"])
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("Permission denied (EACCES)") && err.contains(&socks.consumer),
        "{err}"
    );
    assert!(!err.contains("Ensure traced is running"), "{err}");
}

#[test]
fn reset_ftrace_as_non_root_says_permission_denied() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let log = tmp.path().join("probes.log");
    let mut c = as_nobody(&["traced_probes", "--reset-ftrace"])
        .env("PERFETTO_PRODUCER_SOCK_NAME", tmp.path().join("none.sock"))
        .env("TRACED_PROBES_STATE_FILE", tmp.path().join("state"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(10), "the reset's verdict", || {
        read_trim(&log).contains("ftrace reset failed")
    });
    let _ = c.kill();
    let _ = c.wait();
    let text = read_trim(&log);
    assert!(
        text.contains("ftrace reset failed: /sys/kernel/tracing: permission denied"),
        "{text}"
    );
    assert!(!text.contains("No such file or directory"), "{text}");
}
