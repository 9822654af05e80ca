//! scripts/install.sh under BusyBox sh (a board has no bash), staged with
//! DESTDIR for each init system; and its refusal to replace a build
//! host's own perfetto (in a private mount namespace whose /usr/bin holds
//! a foreign `perfetto`).

use std::path::Path;
use std::process::{Command, Output};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

fn shell() -> &'static str {
    if Path::new("/usr/bin/busybox").exists() || Path::new("/bin/busybox").exists() {
        "busybox"
    } else {
        "sh"
    }
}

fn install(destdir: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(shell());
    if shell() == "busybox" {
        c.arg("sh");
    }
    c.arg(format!("{REPO}/scripts/install.sh"))
        .args(args)
        .env_remove("DESTDIR");
    if let Some(d) = destdir {
        c.env("DESTDIR", d);
    }
    c.output().unwrap()
}

fn ok(o: &Output) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    text
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

const BIN: &str = env!("CARGO_BIN_EXE_tracebox");

#[test]
fn busybox_image_with_a_consumer_group() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:999:\n").unwrap();
    let out = ok(&install(
        Some(root),
        &[
            "--init",
            "busybox",
            "--create-group",
            "tracing",
            "/usr",
            BIN,
        ],
    ));
    assert!(out.contains("created group tracing"), "{out}");
    let bin = root.join("usr/bin");
    assert!(bin.join("tracebox").is_file());
    for a in ["traced", "traced_probes", "perfetto", "trigger_perfetto"] {
        assert_eq!(
            std::fs::read_link(bin.join(a)).unwrap(),
            Path::new("tracebox")
        );
    }
    // BusyBox's rcS runs /etc/init.d/S??* only.
    let script = root.join("etc/init.d/S60tracebox");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&script).unwrap().permissions().mode() & 0o111,
        0o111
    );
    // The boot trace's config, as in the repository.
    assert_eq!(
        read(&root.join("etc/tracebox/boot.pbtx")),
        read(Path::new(&format!("{REPO}/scripts/init/boot.pbtx")))
    );
    let defaults = read(&root.join("etc/default/tracebox"));
    assert!(
        defaults.contains("\nTRACEBOX_BIN_DIR=/usr/bin\n"),
        "{defaults}"
    );
    assert!(
        defaults.contains("\nTRACEBOX_GROUP=tracing\n"),
        "{defaults}"
    );
    assert_eq!(
        read(&root.join("etc/group")),
        "root:x:0:\nnogroup:x:999:\ntracing:x:998:\n"
    );
    // Again: the defaults a user edited are kept, the group not added twice.
    std::fs::write(root.join("etc/default/tracebox"), "TRACED_ARGS=mine\n").unwrap();
    let out = ok(&install(
        Some(root),
        &[
            "--init=busybox",
            "--init-name",
            "S99tb",
            "--create-group",
            "tracing",
            "/usr",
            BIN,
        ],
    ));
    assert!(out.contains("kept existing"), "{out}");
    assert!(out.contains("group tracing already exists"), "{out}");
    assert!(root.join("etc/init.d/S99tb").exists());
    assert!(read(&root.join("etc/default/tracebox")).starts_with("TRACED_ARGS=mine\n"));
    assert_eq!(read(&root.join("etc/group")).matches("tracing:").count(), 1);
}

#[test]
fn systemd_and_android_layouts() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path();
    let out = ok(&install(Some(root), &["--init", "systemd", "/opt/tb", BIN]));
    assert!(
        out.contains("enable with: systemctl enable --now traced traced-probes traced-perf"),
        "{out}"
    );
    let unit = read(&root.join("lib/systemd/system/traced.service"));
    assert!(unit.contains("Type=notify"), "{unit}");
    assert!(
        unit.contains("exec /opt/tb/bin/traced $$TRACED_ARGS "),
        "{unit}"
    );
    let probes = read(&root.join("lib/systemd/system/traced-probes.service"));
    assert!(probes.contains("ExecStopPost=/opt/tb/bin/traced_probes --cleanup-after-crash"));
    // A remote board's unit: the relay in traced's place, never beside it.
    let relay = read(&root.join("lib/systemd/system/traced-relay.service"));
    assert!(
        relay.contains("ExecStart=/opt/tb/bin/traced_relay "),
        "{relay}"
    );
    assert!(relay.contains("Conflicts=traced.service"), "{relay}");
    assert!(!probes.contains("Requires=traced.service"), "{probes}");
    assert!(read(&root.join("etc/default/tracebox")).contains("TRACEBOX_BIN_DIR=/opt/tb/bin"));

    let a = tempfile::tempdir().unwrap();
    ok(&install(
        Some(a.path()),
        &["--init", "android-replace", "/system", BIN],
    ));
    // Real files at the platform's paths (SELinux labels them), not links.
    for applet in ["traced", "traced_probes"] {
        let p = a.path().join("system/bin").join(applet);
        assert!(std::fs::symlink_metadata(&p).unwrap().is_file(), "{applet}");
    }
    let rc = read(&a.path().join("system/etc/init/tracebox.rc"));
    assert!(
        !rc.contains("\n    socket "),
        "the platform declares the sockets: {rc}"
    );
    let b = tempfile::tempdir().unwrap();
    ok(&install(
        Some(b.path()),
        &["--init", "android-beside", "/system", BIN],
    ));
    let rc = read(&b.path().join("system/etc/init/tracebox.rc"));
    assert!(rc.contains("/dev/socket/tracebox_producer"), "{rc}");
    assert!(!rc.contains("socket traced_"), "{rc}");
    assert!(rc.contains("seclabel"), "{rc}");

    let bad = install(Some(root), &["--init", "upstart", "/usr", BIN]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown --init upstart"));
}

#[test]
fn refuses_to_replace_a_hosts_perfetto() {
    let d = tempfile::tempdir().unwrap();
    let top = d.path().join("top");
    std::fs::create_dir(&top).unwrap();
    std::fs::write(top.join("perfetto"), "#!/bin/sh\necho host perfetto\n").unwrap();
    // The default binary, found through CARGO_TARGET_DIR.
    let target = d.path().join("target");
    std::fs::create_dir_all(target.join("release")).unwrap();
    std::os::unix::fs::symlink(BIN, target.join("release/tracebox")).unwrap();
    // A mount namespace whose /usr/bin shows a foreign perfetto on top of
    // the real one; nothing leaves it.
    let script = format!(
        "mount -t overlay overlay -o lowerdir={}:/usr/bin /usr/bin && \
         sh {REPO}/scripts/install.sh; echo rc=$?; cat /usr/bin/perfetto",
        top.display()
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .env_remove("DESTDIR")
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(out.contains("rc=1"), "{out}{err}");
    assert!(out.contains("host perfetto"), "{out}{err}");
    assert!(
        err.contains("/usr/bin/perfetto exists and is not tracebox's"),
        "{err}"
    );
}

/// On the board itself: `scripts/` copied anywhere, the binary already at
/// its final place (copied there by hand first), installed over itself.
#[test]
fn runs_from_a_copy_of_scripts_over_the_binary_in_place() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    let copy = d.path().join("copied");
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    let o = Command::new("cp")
        .arg("-r")
        .arg(format!("{REPO}/scripts"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(o.success());
    let placed = root.join("usr/bin/tracebox");
    crate::support::exec_file::copy_executable(Path::new(BIN), &placed);
    let mut c = Command::new(shell());
    if shell() == "busybox" {
        c.arg("sh");
    }
    let o = c
        .arg(copy.join("install.sh"))
        .args(["--init", "busybox", "/usr"])
        .arg(&placed)
        .env("DESTDIR", &root)
        .output()
        .unwrap();
    ok(&o);
    assert_eq!(
        std::fs::metadata(&placed).unwrap().len(),
        std::fs::metadata(BIN).unwrap().len()
    );
    assert!(root.join("etc/init.d/S60tracebox").exists());
    assert!(root.join("etc/default/tracebox").exists());
    let v = Command::new(root.join("usr/bin/perfetto"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("tracebox "));
}

/// The shell files parse as POSIX sh (dash has no bash extensions), not
/// only under BusyBox.
#[test]
fn shell_files_are_posix_sh() {
    if Command::new("dash").arg("-c").arg(":").status().is_err() {
        eprintln!("no dash: skipped");
        return;
    }
    for f in [
        "scripts/install.sh",
        "scripts/init/tracebox.init",
        "scripts/init/tracebox.default",
    ] {
        let o = Command::new("dash")
            .arg("-n")
            .arg(format!("{REPO}/{f}"))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// scripts/build-static.sh with CARGO_TARGET_DIR set finds the binary
/// there. A copy of the script in a scratch tree (its dist/ lands there),
/// with stand-ins for cargo (links a static C program where cargo's
/// target dir would hold tracebox, and archives a libzstd.a that calls
/// memcpy where zstd-sys would leave it) and rustup (the target is
/// installed).
#[test]
fn build_static_honours_cargo_target_dir() {
    if Command::new("gcc").arg("--version").output().is_err() {
        eprintln!("no gcc: skipped");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let tree = d.path().join("tree");
    let fake = d.path().join("fake-bin");
    let targets = d.path().join("elsewhere");
    std::fs::create_dir_all(tree.join("scripts")).unwrap();
    std::fs::create_dir_all(&fake).unwrap();
    std::fs::copy(
        format!("{REPO}/scripts/build-static.sh"),
        tree.join("scripts/build-static.sh"),
    )
    .unwrap();
    let write_exe = |name: &str, body: &str| {
        crate::support::exec_file::write_executable(&fake.join(name), body);
    };
    write_exe(
        "rustup",
        "#!/bin/sh\n[ \"$1 $2\" = 'target list' ] && echo x86_64-unknown-linux-musl\nexit 0\n",
    );
    write_exe(
        "cargo",
        "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --target ] && t=$2; shift; done\n\
         out=\"$CARGO_TARGET_DIR/$t/release\"; mkdir -p \"$out\"\n\
         echo 'int main(void){return 0;}' | gcc -static -x c - -o \"$out/tracebox\"\n\
         z=\"$out/build/zstd-sys-0/out\"; mkdir -p \"$z\"\n\
         echo 'void *copy(void *d, const void *s, unsigned long n){return __builtin_memcpy(d, s, n);}' \
         | gcc -c -O0 -x c - -o \"$z/c.o\" && ar rc \"$z/libzstd.a\" \"$z/c.o\"\n",
    );
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap());
    let o = Command::new("bash")
        .arg(tree.join("scripts/build-static.sh"))
        .arg("x86_64-unknown-linux-musl")
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &targets)
        .output()
        .unwrap();
    let text = ok(&o);
    assert!(
        text.contains("built: dist/tracebox-x86_64-unknown-linux-musl"),
        "{text}"
    );
    assert!(tree
        .join("dist/tracebox-x86_64-unknown-linux-musl")
        .is_file());
}
