//! trace-check: verifies a trace file written after an sdk-producer run.
//! Exit 0 when it passes, 1 when it does not, 2 on usage errors.

use tracebox_sdk_interop::args::{parse_size, Args};
use tracebox_sdk_interop::trace_check::{check, Expect, Params};

const USAGE: &str = "trace-check --trace FILE --threads T --packets N --size S
    [--mode all|ring|discard] [--fixed-payload] [--expect-loss] [--producer-pid PID]";

fn main() {
    let mut a = Args::from_env(USAGE);
    let trace = a.opt_str("--trace");
    let threads = a.opt_parse("--threads").unwrap_or(1);
    let packets = a.opt_parse("--packets").unwrap_or(1000);
    let size = a.opt_str("--size").map_or(100, |s| {
        parse_size(&s).unwrap_or_else(|| a.usage_error(&format!("bad --size {s:?}")))
    });
    let expect: Expect = a
        .opt_str("--mode")
        .map_or(Ok(Expect::All), |m| m.parse())
        .unwrap_or_else(|e| a.usage_error(&e));
    let fixed_payload = a.flag("--fixed-payload");
    let expect_loss = a.flag("--expect-loss");
    let producer_pid = a.opt_parse("--producer-pid");
    a.finish();
    let Some(trace) = trace else {
        a.usage_error("--trace is required");
    };
    let bytes = std::fs::read(&trace).unwrap_or_else(|e| {
        eprintln!("trace-check: cannot read {trace}: {e}");
        std::process::exit(2)
    });
    let report = check(
        &bytes,
        &Params {
            threads,
            packets_per_thread: packets,
            payload_size: size,
            expect,
            fixed_payload,
            expect_loss,
            producer_pid,
        },
    );
    print!("{}", report.text);
    std::process::exit(if report.pass { 0 } else { 1 });
}
