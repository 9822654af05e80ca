//! Ctrl-C semantics of the client: the first SIGTERM/SIGINT starts a
//! graceful stop (flush, disable, write); another one within a second is
//! the same interruption; a later one exits at once, even while the flush
//! is still waiting on a producer that never answers, and says the file is
//! incomplete. (The `timeout` stress runs are in tests/hostile.)

use crate::support::cli as cli_support;
use crate::support::traced as traced_support;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::time::Duration;

use cli_support::Env;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use traced_support::TestProducer;

/// A client recording from a producer that never acknowledges a flush,
/// after its first SIGTERM was taken (it is flushing now). Returns the
/// rest of its stderr reader.
fn client_stuck_in_its_final_flush(
    env: &Env,
    flush_timeout_ms: u32,
) -> (
    Child,
    std::path::PathBuf,
    BufReader<std::process::ChildStderr>,
) {
    let cfg = env.write(
        "c.pbtx",
        &format!(
            "buffers {{ size_kb: 1024 }}\ndata_sources {{ config {{ name: \"tbx.stuck\" }} }}\n\
             duration_ms: 120000\nflush_timeout_ms: {flush_timeout_ms}\n"
        ),
    );
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    env.wait_query("STARTED", true);
    kill(Pid::from_raw(client.id() as i32), Signal::SIGTERM).unwrap();
    let mut err = BufReader::new(client.stderr.take().unwrap());
    loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "stderr closed early");
        if line.contains("SIGINT/SIGTERM received") {
            break;
        }
    }
    (client, out, err)
}

#[test]
fn a_later_second_signal_exits_at_once_and_says_the_file_is_incomplete() {
    let env = Env::new("sig2");
    let _traced = env.start_traced();
    // Registers a data source, then never reads its commands: flushes to it
    // are never acknowledged.
    let _stuck = TestProducer::connect(&env.producer, "stuck", "tbx.stuck", 64);
    let (mut client, out, mut err) = client_stuck_in_its_final_flush(&env, 60_000);
    std::thread::sleep(Duration::from_millis(1300));
    kill(Pid::from_raw(client.id() as i32), Signal::SIGTERM).unwrap();
    let status = client.wait().unwrap();
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32), "{status:?}");
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(
        rest,
        format!(
            "second interrupt: exiting; {} is incomplete\n",
            out.display()
        )
    );
    // Nothing was read yet: an empty trace, which parses.
    assert_eq!(std::fs::metadata(&out).unwrap().len(), 0);
}

/// Two signals a moment apart (a terminal's Ctrl-C to the group, or
/// `timeout`) are one interruption: the stop completes with its end line.
#[test]
fn a_second_signal_within_a_second_is_the_same_interruption() {
    let env = Env::new("sig2same");
    let _traced = env.start_traced();
    let _stuck = TestProducer::connect(&env.producer, "stuck", "tbx.stuck", 64);
    let (mut client, out, mut err) = client_stuck_in_its_final_flush(&env, 2000);
    kill(Pid::from_raw(client.id() as i32), Signal::SIGINT).unwrap();
    let status = client.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert_eq!(status.code(), Some(0), "{rest}");
    assert!(!rest.contains("second interrupt"), "{rest}");
    assert!(
        rest.lines().any(|l| l.starts_with("Trace stats: ")),
        "no end line: {rest}"
    );
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(size > 0);
    assert!(
        rest.contains(&format!("Wrote {size} bytes into {}", out.display())),
        "{rest}"
    );
}
