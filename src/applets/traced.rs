//! `traced`: the tracing service daemon.

use super::{parse_args, Via};
use argh::FromArgs;

/// The tracing service: producers and consumers connect to its sockets.
#[derive(FromArgs, Debug)]
struct TracedArgs {
    /// daemonize and print the pid
    #[argh(switch)]
    background: bool,
    /// print the version and exit
    #[argh(switch)]
    version: bool,
    /// chgrp/chmod the sockets: PRODUCER_GROUP:PRODUCER_MODE:CONSUMER_GROUP:CONSUMER_MODE
    #[argh(option)]
    set_socket_permissions: Option<String>,
}

pub fn main(args: &[String], _via: Via) -> i32 {
    let args: TracedArgs = match parse_args("traced", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args.version {
        println!("{}", super::VERSION);
        return 0;
    }
    eprintln!("traced: the service is not in this build yet");
    1
}
