//! `traced_probes`: the ftrace and /proc, /sys producer.

use super::background::go_background;
use super::{parse_args, Via};
use crate::ipc::default_sockets::producer_socket_name;
use crate::traced_probes::{self, ftrace::crash_state, ProducerOptions};
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
    /// undo what a killed traced_probes left in ftrace (per its state file), then exit
    #[argh(switch)]
    cleanup_after_crash: bool,
    /// exit (ftrace restored) when the connection to traced closes
    /// (tracebox autostart)
    #[argh(switch)]
    exit_with_traced: bool,
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
        println!("{}", crate::VERSION);
        return 0;
    }
    crate::base::log::set_tag("traced_probes");
    if let Err(e) = traced_probes::stop_signals::block() {
        crate::log_error!("signals: {e}");
        return 1;
    }
    let socket = producer_socket_name();
    let state_file = crash_state::default_path(&socket);
    if args.cleanup_after_crash {
        // Only what our state file says we touched: init systems run this
        // at every stop, and ftrace may be in use by others. Best effort,
        // always exit 0, like upstream.
        if let Ok(root) = crate::traced_probes::ftrace::Tracefs::discover() {
            crash_state::cleanup(&state_file, &root);
        }
        return 0;
    }
    if args.reset_ftrace {
        if let Err(e) = traced_probes::hard_reset(&state_file) {
            crate::log_error!("ftrace reset failed: {e}");
        }
    }
    // Ready at once: it connects to traced (and reconnects) on its own.
    match go_background("traced_probes", args.background) {
        Ok(mut r) => r.report(),
        Err(code) => return code,
    }
    traced_probes::run(ProducerOptions {
        socket,
        state_file,
        exit_with_traced: args.exit_with_traced,
    })
}
