use super::*;
use crate::cmd::flags::{normalize, RawFlags};
use argh::FromArgs;

fn flags(args: &[&str]) -> RawFlags {
    let owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let norm = normalize(&owned);
    let refs: Vec<&str> = norm.iter().map(String::as_str).collect();
    RawFlags::from_args(&["perfetto"], &refs).unwrap()
}

fn no_text(_: &str, _: &[u8]) -> Result<Vec<u8>, String> {
    Err("text parser not wanted here".into())
}

fn run(args: &[&str], config: Option<Vec<u8>>) -> Result<Action, String> {
    let input = config.map(|bytes| ConfigInput {
        name: "cfg".into(),
        bytes,
    });
    plan(&flags(args), input, &no_text, (0x1234, 0x5678))
}

fn trace(args: &[&str], config: Option<Vec<u8>>) -> TracePlan {
    match run(args, config) {
        Ok(Action::Trace(p)) => p,
        other => panic!("expected a trace plan, got {other:?}"),
    }
}

fn binary(cfg: &TraceConfig) -> Vec<u8> {
    encode(cfg)
}

#[test]
fn light_mode_plan_has_uuid_and_output() {
    let p = trace(&["-t", "2s", "sched", "-o", "/tmp/x"], None);
    assert_eq!(p.config.duration_ms, Some(2000));
    assert_eq!(p.config.trace_uuid_msb, Some(0x1234));
    assert_eq!(
        p.output,
        Some(Output::File {
            path: "/tmp/x".into(),
            no_clobber: false
        })
    );
    // The appended uuid is what the service will decode.
    let sent = decode(&p.config_bytes).unwrap();
    assert_eq!(
        (sent.trace_uuid_msb, sent.trace_uuid_lsb),
        (Some(0x1234), Some(0x5678))
    );
    assert_eq!(p.uuid, "00000000-0000-1234-0000-000000005678");
}

#[test]
fn config_uuid_is_kept() {
    let cfg = TraceConfig {
        trace_uuid_msb: Some(7),
        trace_uuid_lsb: Some(9),
        duration_ms: Some(1),
        ..Default::default()
    };
    let p = trace(&["-c", "f", "-o", "-"], Some(binary(&cfg)));
    assert_eq!(
        (p.config.trace_uuid_msb, p.config.trace_uuid_lsb),
        (Some(7), Some(9))
    );
    assert_eq!(p.output, Some(Output::Stdout));
}

#[test]
fn unknown_config_fields_pass_through() {
    let cfg = TraceConfig {
        duration_ms: Some(5),
        ..Default::default()
    };
    let mut bytes = binary(&cfg);
    // Field 999, varint 1: unknown to this build.
    bytes.extend_from_slice(&[0xb8, 0x3e, 0x01]);
    let p = trace(&["-c", "f", "-o", "x"], Some(bytes.clone()));
    assert!(p.config_bytes.starts_with(&bytes));
}

#[test]
fn config_and_light_flags_conflict() {
    let err = run(&["-c", "f", "-t", "1s", "-o", "x"], Some(vec![])).unwrap_err();
    assert!(err.contains("Cannot specify both -c/--config"), "{err}");
}

#[test]
fn text_config_without_txt_gets_a_hint() {
    let err = run(
        &["-c", "f", "-o", "x"],
        Some(b"duration_ms: 100\n".to_vec()),
    )
    .unwrap_err();
    assert!(err.contains("Try adding --txt"), "{err}");
    let err = run(&["-c", "f", "-o", "x"], Some(vec![0xff, 0xff, 0x00])).unwrap_err();
    assert!(!err.contains("--txt"), "{err}");
}

#[test]
fn output_is_required() {
    assert_eq!(
        run(&["-t", "1s"], None).unwrap_err(),
        "--out is required (-o FILE, or -o - for stdout)"
    );
}

#[test]
fn activate_triggers_config_sends_triggers() {
    let cfg = TraceConfig {
        activate_triggers: vec!["t1".into(), "t2".into()],
        ..Default::default()
    };
    match run(&["-c", "f"], Some(binary(&cfg))).unwrap() {
        Action::Triggers(t) => assert_eq!(t, ["t1", "t2"]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn flag_conflicts() {
    let cases: &[(&[&str], &str)] = &[
        (&["--query", "-d"], "--query cannot be combined"),
        (
            &["--long", "-t", "1s", "-o", "x"],
            "--long can only be used with --query",
        ),
        (&["--attach=k", "--detach=k"], "mutually exclusive"),
        (
            &["--detach=k", "-d", "-o", "x", "-t", "1s"],
            "--detach and --background",
        ),
        (
            &["--stop", "-t", "1s", "-o", "x"],
            "--stop is supported only",
        ),
        (
            &["--clone", "1", "--clone-by-name", "n", "-o", "x"],
            "mutually exclusive",
        ),
        (
            &["--clone-for-bugreport", "-o", "x", "-t", "1s"],
            "requires --clone",
        ),
        (
            &["--add-attribute", "=v", "-t", "1s", "-o", "x"],
            "key must be non-empty",
        ),
        (&["--attach=k", "-t", "1s"], "Cannot specify a trace config"),
        (&["--query", "-o", "x"], "Can't pass an --out"),
        (
            &["--detach=k", "-t", "1s", "-o", "x"],
            "write_into_file must be true",
        ),
        (
            &[
                "--system-sockets",
                "--private-sockets",
                "-t",
                "1s",
                "-o",
                "x",
            ],
            "mutually exclusive",
        ),
    ];
    for (args, want) in cases {
        let err = run(args, None).expect_err(&format!("{args:?} should fail"));
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn other_actions() {
    assert!(matches!(
        run(&["--query"], None),
        Ok(Action::Query {
            raw: false,
            long: false
        })
    ));
    assert!(matches!(
        run(&["--query", "--long"], None),
        Ok(Action::Query { long: true, .. })
    ));
    assert!(matches!(
        run(&["--is_detached=k"], None),
        Ok(Action::IsDetached { .. })
    ));
    assert!(matches!(
        run(&["--attach=k", "--stop"], None),
        Ok(Action::Attach { stop: true, .. })
    ));
    match run(&["--clone", "3", "-o", "x"], None).unwrap() {
        Action::Clone {
            target: CloneTarget::Id(3),
            output,
            ..
        } => {
            assert_eq!(
                output,
                Output::File {
                    path: "x".into(),
                    no_clobber: false
                }
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn attributes_are_appended() {
    let p = trace(
        &[
            "-t",
            "1s",
            "-o",
            "x",
            "--add-attribute",
            "board=rk3399",
            "--add-attribute",
            "flag",
        ],
        None,
    );
    let sent = decode(&p.config_bytes).unwrap();
    let attrs = sent.trace_attributes.unwrap().attribute;
    assert_eq!(attrs.len(), 2);
    assert_eq!(attrs[0].key.as_deref(), Some("board"));
    assert_eq!(attrs[0].value, OneOfvalue::string_value("rk3399".into()));
    assert_eq!(attrs[1].value, OneOfvalue::string_value(String::new()));
}

#[test]
fn background_modes() {
    assert_eq!(
        trace(&["-d", "-t", "1s", "-o", "x"], None).background,
        Background::Detach
    );
    assert_eq!(
        trace(&["-D", "-t", "1s", "-o", "x"], None).background,
        Background::Wait
    );
}

#[test]
fn start_delay_is_drawn_between_min_and_max() {
    use crate::pb::protos::mod_TraceConfig::CmdTraceStartDelay;
    let cfg = |min, max| TraceConfig {
        cmd_trace_start_delay: Some(CmdTraceStartDelay {
            min_delay_ms: min,
            max_delay_ms: max,
        }),
        ..Default::default()
    };
    let ms = |c: &TraceConfig, r| start_delay(c, r).map(|d| d.as_millis() as u64);
    assert_eq!(ms(&cfg(Some(100), Some(200)), 0), Some(100));
    assert_eq!(ms(&cfg(Some(100), Some(200)), 100), Some(200));
    assert_eq!(ms(&cfg(Some(100), Some(200)), 101), Some(100));
    assert_eq!(ms(&cfg(Some(5), Some(5)), 12345), Some(5));
    assert_eq!(ms(&TraceConfig::default(), 1), None);
}

#[test]
fn test_config_is_a_short_sched_trace() {
    let bytes = test_config();
    let cfg = decode(&bytes).unwrap();
    assert_eq!(cfg.duration_ms, Some(2000));
    assert!(cfg
        .data_sources
        .iter()
        .any(|d| { d.config.as_ref().and_then(|c| c.name.as_deref()) == Some("linux.ftrace") }));
}

#[test]
fn rotate_flags_reach_the_plan() {
    let p = trace(
        &[
            "-t",
            "1h",
            "-s",
            "1gb",
            "sched",
            "-o",
            "/tmp/x",
            "--rotate-size=256mb",
            "--rotate-time",
            "10m",
            "--rotate-keep",
            "4",
        ],
        None,
    );
    let r = p.rotate.unwrap();
    assert_eq!(r.max_bytes, Some(256 << 20));
    assert_eq!((r.period_ms, r.keep), (Some(600_000), Some(4)));
    // Without a streamed file there is nothing to rotate.
    let e = run(
        &["-t", "1h", "sched", "-o", "/tmp/x", "--rotate-time", "10m"],
        None,
    )
    .unwrap_err();
    assert!(e.contains("write_into_file"), "{e}");
    assert!(trace(&["-t", "2s", "sched", "-o", "/tmp/x"], None)
        .rotate
        .is_none());
}

/// --rotate-size makes traced flush producers before each periodic write
/// (data still in the kernel or a producer would otherwise make files
/// overshoot the size), unless the config chose a flush mode itself.
#[test]
fn rotate_size_flushes_before_each_write() {
    use crate::pb::protos::mod_TraceConfig::WriteFlushMode;
    let args = |extra: &'static str| {
        let mut a = vec!["-t", "1h", "-s", "1gb", "sched", "-o", "/tmp/x"];
        a.push(extra);
        a
    };
    let p = trace(&args("--rotate-size=1mb"), None);
    assert_eq!(
        p.config.write_flush_mode,
        Some(WriteFlushMode::WRITE_FLUSH_ENABLED)
    );
    let sent: TraceConfig = crate::protozero::decode::decode_message(&p.config_bytes).unwrap();
    assert_eq!(
        sent.write_flush_mode,
        Some(WriteFlushMode::WRITE_FLUSH_ENABLED)
    );
    let p = trace(&args("--rotate-time=1h"), None);
    assert_eq!(p.config.write_flush_mode, None);
}
