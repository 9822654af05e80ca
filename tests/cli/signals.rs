//! Ctrl-C semantics of the client: the first SIGTERM/SIGINT starts a
//! graceful stop (flush, disable, write); a second one kills at once, even
//! while the flush is still waiting on a producer that never answers.

use crate::support::cli as cli_support;
use crate::support::traced as traced_support;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;

use cli_support::Env;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use traced_support::TestProducer;

#[test]
fn second_signal_kills_a_client_stuck_in_its_final_flush() {
    let env = Env::new("sig2");
    let _traced = env.start_traced();
    // Registers a data source, then never reads its commands: flushes to it
    // are never acknowledged.
    let _stuck = TestProducer::connect(&env.producer, "stuck", "tbx.stuck", 64);
    let cfg = env.write(
        "c.pbtx",
        "buffers { size_kb: 1024 }\ndata_sources { config { name: \"tbx.stuck\" } }\n\
         duration_ms: 120000\nflush_timeout_ms: 60000\n",
    );
    let out = env.path("t.pftrace");
    let mut client = env
        .perfetto_cmd(&["--txt", "-c", &cfg, "-o", out.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    env.wait_query("STARTED", true);
    let pid = Pid::from_raw(client.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    // Wait until the client acknowledged the first signal (it is now
    // flushing), then send the second one.
    let mut lines = BufReader::new(client.stderr.take().unwrap()).lines();
    loop {
        let line = lines.next().expect("client stderr closed early").unwrap();
        if line.contains("SIGINT/SIGTERM received") {
            break;
        }
    }
    kill(pid, Signal::SIGTERM).unwrap();
    let status = client.wait().unwrap();
    assert_eq!(status.signal(), Some(Signal::SIGTERM as i32), "{status:?}");
}
