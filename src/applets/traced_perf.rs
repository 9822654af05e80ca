//! `traced_perf`: CPU profiling with call stacks (`linux.perf`).

use super::background::go_background;
use super::{parse_args, Via};
use crate::ipc::default_sockets::producer_socket_name;
use argh::FromArgs;

/// perf_event sampling with call stacks, producing into traced.
#[derive(FromArgs, Debug)]
struct PerfArgs {
    /// daemonize and print the pid
    #[argh(switch)]
    background: bool,
    /// print the version and exit
    #[argh(switch)]
    version: bool,
    /// exit when the connection to traced ends instead of reconnecting
    /// (used by autostart)
    #[argh(switch)]
    exit_with_traced: bool,
}

pub fn main(args: &[String], _via: Via) -> i32 {
    let args: PerfArgs = match parse_args("traced_perf", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args.version {
        println!("{}", crate::VERSION);
        return 0;
    }
    crate::base::log::set_tag("traced_perf");
    if let Err(e) = crate::traced_probes::stop_signals::block() {
        crate::log_error!("signals: {e}");
        return 1;
    }
    // Ready at once: it connects to traced (and reconnects) on its own.
    match go_background("traced_perf", args.background) {
        Ok(mut r) => r.report(),
        Err(code) => return code,
    }
    crate::traced_perf::run(producer_socket_name(), args.exit_with_traced)
}
