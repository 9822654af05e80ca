//! The one binary dispatches applets by symlink name and by first argument.

use std::os::unix::fs::symlink;
use std::process::{Command, Output};

const APPLETS: [&str; 8] = [
    "traced",
    "traced_probes",
    "traced_perf",
    "perfetto",
    "report",
    "trigger_perfetto",
    "websocket_bridge",
    "traced_relay",
];

fn tracebox() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tracebox"))
}

fn run(mut cmd: Command) -> Output {
    cmd.output().expect("spawn tracebox")
}

#[test]
fn list_names_every_applet() {
    let out = run({
        let mut c = tracebox();
        c.arg("--list");
        c
    });
    assert!(out.status.success());
    let listed: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(listed, APPLETS);
}

#[test]
fn no_arguments_prints_usage_and_fails() {
    let out = run(tracebox());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    for applet in APPLETS {
        assert!(err.contains(applet), "usage lacks {applet}: {err}");
    }
}

#[test]
fn unknown_applet_is_a_clear_error() {
    let mut c = tracebox();
    c.arg("tracedd");
    let out = run(c);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr)
        .unwrap()
        .contains("unknown applet 'tracedd'"));
}

#[test]
fn version_is_printed() {
    let mut c = tracebox();
    c.arg("--version");
    let out = run(c);
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .starts_with("tracebox "));
}

#[test]
fn every_applet_has_help_by_argument_and_by_symlink() {
    let dir = tempfile::tempdir().unwrap();
    for applet in APPLETS {
        let mut by_arg = tracebox();
        by_arg.args([applet, "--help"]);
        let a = run(by_arg);

        let link = dir.path().join(applet);
        symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
        let mut by_link = Command::new(&link);
        by_link.arg("--help");
        let b = run(by_link);

        let text = |o: &Output| {
            String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr)
        };
        assert!(text(&a).contains("Usage"), "{applet} --help: {}", text(&a));
        assert_eq!(
            text(&a),
            text(&b),
            "{applet}: argument and symlink dispatch differ"
        );
        assert_eq!(a.status.code(), b.status.code());
        // Upstream's perfetto and trigger_perfetto print usage and exit 1
        // on --help (their PrintUsage returns 1); ours keep that, the
        // rest exit 0 (README, Applets).
        let want = match applet {
            "perfetto" | "trigger_perfetto" => 1,
            _ => 0,
        };
        assert_eq!(a.status.code(), Some(want), "{applet} --help");
    }
}

#[test]
fn symlinked_applet_sees_its_own_flags() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("traced");
    symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
    let out = run({
        let mut c = Command::new(&link);
        c.arg("--version");
        c
    });
    assert!(out.status.success());
    let out = run({
        let mut c = Command::new(&link);
        c.arg("--no-such-flag");
        c
    });
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn closed_stdout_is_success() {
    // `tracebox --list | grep -q traced`: the reader is gone before we write.
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let out = tracebox()
        .arg("--list")
        .stdout(std::process::Stdio::from(write_end))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
