//! The installed traced.service run the way systemd runs it (no systemd
//! here as pid 1): its ExecStart= split and expanded by systemd's rules
//! (`$VAR` alone is split at whitespace, `${VAR}` is one word, `$$` is a
//! literal `$`), the defaults file's variables in the environment and a
//! NOTIFY_SOCKET to receive `READY=1`. Checks the socket modes each
//! defaults file gives: producing open to all, consuming root's unless
//! TRACEBOX_GROUP or TRACED_ARGS says otherwise. `systemd-analyze verify`
//! checks every unit's syntax where it is installed; traced_probes, also
//! Type=notify, is checked for its READY=1 by hand.

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::cli::Killed;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_tracebox");
const NOGROUP: u32 = 65534;

/// Stages the systemd layout under `root` with prefix /tb.
fn stage(root: &Path) {
    let o = Command::new("sh")
        .arg(format!("{REPO}/scripts/install.sh"))
        .args(["--init", "systemd", "/tb", BIN])
        .env("DESTDIR", root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// systemd's command-line words: whitespace separates, quotes group (and
/// are removed); whether a word had no quotes at all.
fn words(line: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut quote, mut in_word, mut quoted) = (None, false, false);
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
                quoted = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push((std::mem::take(&mut cur), !quoted));
                }
                in_word = false;
                quoted = false;
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push((cur, !quoted));
    }
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// ExecStart= as the argv systemd would execute.
fn exec_start(unit: &str, env: &[(&str, &str)]) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart=");
    let value = |name: &str| {
        env.iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
            .unwrap_or_default()
    };
    let mut argv = Vec::new();
    for (w, unquoted) in words(line) {
        if let Some(name) = w.strip_prefix('$').filter(|n| unquoted && is_name(n)) {
            argv.extend(value(name).split_whitespace().map(str::to_owned));
            continue;
        }
        let mut s = String::new();
        let mut rest = w.as_str();
        while let Some(i) = rest.find('$') {
            s.push_str(&rest[..i]);
            rest = &rest[i + 1..];
            if let Some(r) = rest.strip_prefix('$') {
                s.push('$');
                rest = r;
            } else if let Some((name, r)) = rest
                .strip_prefix('{')
                .and_then(|r| r.split_once('}'))
                .filter(|(n, _)| is_name(n))
            {
                s.push_str(&value(name));
                rest = r;
            } else {
                s.push('$');
            }
        }
        s.push_str(rest);
        argv.push(s);
    }
    argv
}

/// Runs traced.service with `defaults`; returns the producer and consumer
/// sockets' (mode, gid) once traced said READY=1.
fn run_traced_unit(defaults: &[(&str, &str)]) -> [(u32, u32); 2] {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    stage(root);
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/traced.service")).unwrap();
    // The staged /tb/bin is under DESTDIR here.
    let unit = unit.replace("/tb/bin/", &format!("{}/tb/bin/", root.display()));
    let argv = exec_start(&unit, defaults);
    let notify = root.join("notify");
    let ready = UnixDatagram::bind(&notify).unwrap();
    ready
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (p, c) = (root.join("p.sock"), root.join("c.sock"));
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .envs(defaults.iter().copied())
        .env("NOTIFY_SOCKET", &notify)
        .env("PERFETTO_PRODUCER_SOCK_NAME", &p)
        .env("PERFETTO_CONSUMER_SOCK_NAME", &c);
    let child = Killed(cmd.spawn().unwrap());
    let mut buf = [0u8; 64];
    let n = ready
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no READY=1 from {argv:?}: {e}"));
    assert_eq!(&buf[..n], b"READY=1");
    // The shell exec'd traced: the main pid is the service's.
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", child.0.id())).unwrap();
    let first = cmdline.split(|b| *b == 0).next().unwrap();
    assert!(first.ends_with(b"/tb/bin/traced"), "{argv:?}");
    let mode = |s: &PathBuf| {
        let m = std::fs::metadata(s).unwrap();
        (m.mode() & 0o777, m.gid())
    };
    [mode(&p), mode(&c)]
}

#[test]
fn traced_unit_socket_modes_follow_the_defaults_file() {
    let [p, c] = run_traced_unit(&[("TRACED_ARGS", "")]);
    assert_eq!((p.0, c.0), (0o666, 0o600));
    let [p, c] = run_traced_unit(&[("TRACED_ARGS", ""), ("TRACEBOX_GROUP", "nogroup")]);
    assert_eq!((p, c), ((0o666, NOGROUP), (0o660, NOGROUP)));
    // TRACED_ARGS naming permissions wins over TRACEBOX_GROUP.
    let [p, c] = run_traced_unit(&[
        (
            "TRACED_ARGS",
            "--set-socket-permissions nogroup:0660:nogroup:0640",
        ),
        ("TRACEBOX_GROUP", "root"),
    ]);
    assert_eq!((p, c), ((0o660, NOGROUP), (0o640, NOGROUP)));
}

#[test]
fn systemd_accepts_every_unit() {
    let Ok(o) = Command::new("systemd-analyze").arg("--version").output() else {
        eprintln!("no systemd-analyze: skipped");
        return;
    };
    assert!(o.status.success());
    let d = tempfile::tempdir().unwrap();
    stage(d.path());
    // verify wants the ExecStart binaries where the units name them.
    let dir = d.path().join("lib/systemd/system");
    for name in ["traced", "traced-probes", "traced-perf", "traced-relay"] {
        let unit = std::fs::read_to_string(dir.join(format!("{name}.service"))).unwrap();
        let unit = unit.replace("/tb/bin/", &format!("{}/tb/bin/", d.path().display()));
        let path = d.path().join(format!("{name}.service"));
        std::fs::write(&path, unit).unwrap();
        let o = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success() && !err.contains(&*path.to_string_lossy()),
            "{name}: {err}"
        );
    }
}

/// traced-probes.service is Type=notify too: READY=1 once connected to
/// traced. Run by hand (its unit line resets the top-level ftrace, which
/// tests share), on private sockets.
#[test]
fn traced_probes_says_ready_once_connected() {
    let env = crate::support::cli::Env::new("notify-probes");
    let _traced = env.start_traced();
    let notify = env.path("notify");
    let ready = UnixDatagram::bind(&notify).unwrap();
    ready
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _probes = Killed(
        Command::new(BIN)
            .arg("traced_probes")
            .env("PERFETTO_PRODUCER_SOCK_NAME", &env.producer)
            .env("TRACED_PROBES_STATE_FILE", env.path("probes.state"))
            .env("NOTIFY_SOCKET", &notify)
            .spawn()
            .unwrap(),
    );
    let mut buf = [0u8; 64];
    let n = ready.recv(&mut buf).expect("no READY=1 from traced_probes");
    assert_eq!(&buf[..n], b"READY=1");
    env.wait_query("linux.ftrace", true);
}
