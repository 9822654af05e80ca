//! `traced_probes`: the ftrace and /proc, /sys producer.

use super::{parse_args, Via};
use argh::FromArgs;

/// Kernel ftrace plus /proc and /sys pollers, producing into traced.
#[derive(FromArgs, Debug)]
struct ProbesArgs {
    /// daemonize and print the pid
    #[argh(switch)]
    background: bool,
    /// reset ftrace to a clean state before starting
    #[argh(switch)]
    reset_ftrace: bool,
    /// reset ftrace after a crash, then exit
    #[argh(switch)]
    cleanup_after_crash: bool,
    /// print the version and exit
    #[argh(switch)]
    version: bool,
}

pub fn main(args: &[String], _via: Via) -> i32 {
    let args: ProbesArgs = match parse_args("traced_probes", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args.version {
        println!("{}", super::VERSION);
        return 0;
    }
    eprintln!("traced_probes: the probes are not in this build yet");
    1
}
