//! The perfetto applet's flag handling, through the real binary: rejected
//! combinations exit 1 with upstream's message, before any connection.

use std::process::Command;

/// Runs the plain client through a `perfetto` symlink (no autostart).
fn perfetto(args: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("perfetto");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_tracebox"), &link).unwrap();
    let out = Command::new(&link)
        .args(args)
        // Nothing listens here: a test that wrongly got past validation
        // fails fast with "Could not connect" instead of tracing.
        .env("PERFETTO_CONSUMER_SOCK_NAME", "@tbx-cli-flags-nobody")
        .env("PERFETTO_PRODUCER_SOCK_NAME", "@tbx-cli-flags-nobody-p")
        .output()
        .expect("run tracebox");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn rejected_combinations_exit_1_with_a_reason() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["-t", "10", "-o", "/dev/null"],
            "--time argument is invalid",
        ),
        (
            &["-b", "32", "-o", "/dev/null"],
            "--buffer argument is invalid",
        ),
        (
            &["-s", "1x", "-o", "/dev/null"],
            "--size argument is invalid",
        ),
        (&["-t", "1s"], "--out is required"),
        (
            &["-t", "10000h", "-o", "/dev/null"],
            "--time argument is too large",
        ),
        (&["--query", "--background"], "--query cannot be combined"),
        (&["--long"], "--long can only be used with --query"),
        (&["--attach=a", "--detach=b"], "mutually exclusive"),
        (
            &["--stop", "-t", "1s", "-o", "/dev/null"],
            "--stop is supported only",
        ),
        (
            &["--clone", "1", "--clone-by-name", "x", "-o", "/dev/null"],
            "mutually exclusive",
        ),
        (
            &["--add-attribute", "=v", "-t", "1s", "-o", "/dev/null"],
            "key must be non-empty",
        ),
        (&["--no-such-flag"], "Unrecognized argument"),
        (
            &["-c", "/nonexistent/config", "-o", "/dev/null"],
            "Could not open /nonexistent/config",
        ),
    ];
    for (args, want) in cases {
        let (code, _, err) = perfetto(args);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: expected {want:?} in {err:?}");
        assert!(
            !err.contains("--upload"),
            "{args:?}: no --upload here: {err}"
        );
    }
}

/// Configs that parse get as far as connecting (nothing listens here).
fn parses(args: &[&str]) {
    let (code, _, err) = perfetto(args);
    assert_eq!(code, 1, "{args:?}: {err}");
    assert!(err.contains("Could not connect"), "{args:?}: {err}");
}

#[test]
fn upstream_config_flags() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.pbtx");
    std::fs::write(
        &cfg,
        "duration_ms: 1000\nbuffers { size_kb: 1024 }\nfield_from_the_future: 3\n\
         data_sources { config { name: \"x\" future_block { a: 1 } } }\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let (code, _, err) = perfetto(&["--txt", "-c", cfg, "-o", "/dev/null"]);
    assert_eq!(code, 1);
    assert!(err.contains("field_from_the_future"), "{err}");
    parses(&["--txt-lossy", "-c", cfg, "-o", "/dev/null"]);
    // upstream's built-in test config, with or without --txt
    parses(&["-c", ":test", "-o", "/dev/null"]);
    parses(&["--txt", "-c", ":test", "-o", "/dev/null"]);
    parses(&["--no-guardrails", "-t", "1s", "-o", "/dev/null"]);
}

#[test]
fn config_and_light_flags_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.pbtx");
    std::fs::write(&cfg, "duration_ms: 1000\n").unwrap();
    let (code, _, err) = perfetto(&["-c", cfg.to_str().unwrap(), "-t", "1s", "-o", "/dev/null"]);
    assert_eq!(code, 1);
    assert!(err.contains("Cannot specify both -c/--config"), "{err}");
}

#[test]
fn text_config_without_txt_gets_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.pbtx");
    std::fs::write(&cfg, "duration_ms: 1000\nbuffers { size_kb: 1024 }\n").unwrap();
    let (code, _, err) = perfetto(&["-c", cfg.to_str().unwrap(), "-o", "/dev/null"]);
    assert_eq!(code, 1);
    assert!(err.contains("Try adding --txt"), "{err}");
}

#[test]
fn bad_text_config_points_at_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.pbtx");
    std::fs::write(&cfg, "duration_ms: 1000\nbufers { size_kb: 1024 }\n").unwrap();
    let (code, _, err) = perfetto(&["--txt", "-c", cfg.to_str().unwrap(), "-o", "/dev/null"]);
    assert_eq!(code, 1);
    assert!(err.contains(":2:"), "no line number: {err}");
    assert!(err.contains("buffers"), "no suggestion: {err}");
}

#[test]
fn unreachable_service_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("t.pftrace");
    let (code, _, err) = perfetto(&["-t", "1s", "sched", "-o", out.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Could not connect to the traced socket"),
        "{err}"
    );
    assert!(err.contains("use tracebox"), "{err}");
    assert!(!out.exists(), "empty output file left behind");
    let (code, _, err) = perfetto(&["--query"]);
    assert_eq!(code, 1, "{err}");
}

#[test]
fn help_and_version() {
    let (code, _, err) = perfetto(&["--help"]);
    assert_eq!(code, 1, "upstream exits 1 on --help");
    assert!(err.contains("--config") && err.contains("--txt"), "{err}");
    let (code, out, _) = perfetto(&["--version"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("tracebox "));
}

#[test]
fn trigger_perfetto_needs_names_and_ignores_unknown_flags() {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_tracebox"))
            .arg("trigger_perfetto")
            .args(args)
            .env("PERFETTO_PRODUCER_SOCK_NAME", "@tbx-cli-flags-nobody-p")
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, err) = run(&[]);
    assert_eq!(code, 1);
    assert!(err.contains("at least one trigger"), "{err}");
    let (code, err) = run(&["--future-flag", "t1"]);
    assert!(
        err.contains("ignoring unknown arguments: --future-flag"),
        "{err}"
    );
    // Nobody listens: it gives up with status 1 (after its connect timeout).
    assert_eq!(code, 1, "{err}");
}

#[test]
fn lists_events_and_categories_from_the_live_tracefs() {
    let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .map(std::path::Path::new)
        .find(|p| p.join("events").is_dir())
        .expect("tracefs mounted (scripts/ensure-tracefs.sh)");
    let (code, out, err) = perfetto(&["--list-events"]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<&str> = out.lines().collect();
    // Exactly the kernel's events, in the form light mode takes.
    let mut kernel = Vec::new();
    for g in std::fs::read_dir(tracefs.join("events")).unwrap().flatten() {
        if !g.path().is_dir() {
            continue;
        }
        for e in std::fs::read_dir(g.path()).unwrap().flatten() {
            if e.path().is_dir() {
                kernel.push(format!(
                    "{}/{}",
                    g.file_name().to_string_lossy(),
                    e.file_name().to_string_lossy()
                ));
            }
        }
    }
    kernel.sort();
    assert_eq!(listed, kernel);
    assert!(listed.contains(&"sched/sched_switch"));

    let (code, out, err) = perfetto(&["--list-categories"]);
    assert_eq!(code, 0, "{err}");
    let sched = out.lines().find(|l| l.starts_with("sched ")).unwrap();
    assert!(sched.contains("sched/sched_switch"), "{sched}");
    assert!(out.lines().any(|l| l.starts_with("freq ")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("hyp ")), "{out}");
}
