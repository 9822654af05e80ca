//! Permission problems read as permission problems, for a non-root user
//! (`setpriv` to nobody): a root-only consumer socket, and tracefs.

use crate::support::probes as traced_probes_common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use traced_probes_common::*;

/// `tracebox ARGS` as uid/gid nobody, from a copy nobody can reach (the
/// checkout may sit in a directory only its owner enters, as /root).
fn as_nobody(args: &[&str]) -> Command {
    static COPY: std::sync::OnceLock<(tempfile::TempDir, std::path::PathBuf)> =
        std::sync::OnceLock::new();
    let (_, bin) = COPY.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.path().join("tracebox");
        crate::support::exec_file::copy_executable(
            std::path::Path::new(env!("CARGO_BIN_EXE_tracebox")),
            &bin,
        );
        (dir, bin)
    });
    let mut c = Command::new("setpriv");
    c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .arg(bin)
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
    // Autostart does not try to start a second traced over it.
    let o = as_nobody(&["-t", "1s", "sched", "-o", "/dev/null"])
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .env("PERFETTO_PRODUCER_SOCK_NAME", &socks.producer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("Permission denied (EACCES)") && err.contains(&socks.consumer),
        "{err}"
    );
    assert!(!err.contains("removing stale"), "{err}");
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

#[test]
fn a_data_source_whose_setup_failed_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socks = Sockets::in_dir(dir);
    let _traced = start_our_traced(&socks, &dir.join("traced.log"));
    std::fs::set_permissions(&socks.producer, std::fs::Permissions::from_mode(0o666)).unwrap();
    // traced_probes as nobody: process stats work, ftrace cannot.
    let log = dir.join("probes.log");
    let probes = as_nobody(&["traced_probes"])
        .env("PERFETTO_PRODUCER_SOCK_NAME", &socks.producer)
        .env("TRACED_PROBES_STATE_FILE", dir.join("state"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _probes = Proc {
        child: probes,
        name: "traced_probes",
    };
    wait_until(Duration::from_secs(10), "traced_probes registers", || {
        registered_data_sources(&socks.consumer)
            .iter()
            .any(|d| d == "linux.ftrace")
    });
    let cfg = dir.join("config.txt");
    std::fs::write(
        &cfg,
        "duration_ms: 500\ndata_source_stop_timeout_ms: 1000\nbuffers { size_kb: 1024 }\n\
         data_sources { config { name: \"linux.ftrace\" ftrace_config {\
         ftrace_events: \"sched/sched_switch\" instance_name: \"tbx_perm_setup\" } } }\n\
         data_sources { config { name: \"linux.process_stats\" process_stats_config {\
         scan_all_processes_on_start: true } } }\n",
    )
    .unwrap();
    let out = dir.join("trace.pb");
    let o = Command::new(env!("CARGO_BIN_EXE_tracebox"))
        .args(["perfetto", "--txt", "-c"])
        .arg(&cfg)
        .arg("-o")
        .arg(&out)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &socks.consumer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let bytes = std::fs::read(&out).unwrap();
    use quick_protobuf::{BytesReader, MessageRead};
    use tracebox::pb::protos::mod_TracePacket::OneOfdata;
    let trace =
        tracebox::pb::protos::Trace::from_reader(&mut BytesReader::from_bytes(&bytes), &bytes)
            .unwrap();
    let kinds: Vec<_> = trace.packet.iter().map(|p| &p.data).collect();
    assert!(kinds
        .iter()
        .any(|d| matches!(d, OneOfdata::process_tree(_))));
    assert!(!kinds
        .iter()
        .any(|d| matches!(d, OneOfdata::ftrace_events(_))));
    let line = err
        .lines()
        .find(|l| l.starts_with("Trace stats: "))
        .unwrap_or_default();
    // traced_probes reports its failed setup in the trace, with the reason.
    assert!(
        line.contains("linux.ftrace setup error: no tracefs: Operation not permitted"),
        "{err}"
    );
    assert!(!line.contains("nothing lost"), "{line}");
}
