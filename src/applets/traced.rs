//! `traced`: the tracing service daemon.

use super::background::go_background;
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
    /// exit once no consumer is connected and no session is left (tracebox
    /// autostart)
    #[argh(switch)]
    exit_when_idle: bool,
    /// chgrp/chmod the sockets: PRODUCER_GROUP:PRODUCER_MODE:CONSUMER_GROUP:CONSUMER_MODE
    /// (default: producer 0666, any user; consumer 0600, this user only)
    #[argh(option)]
    set_socket_permissions: Option<String>,
    /// serve RelayPort (traced_relay's system info and clock sync) on the
    /// producer sockets; relayed producers work without it
    #[argh(switch)]
    enable_relay_endpoint: bool,
    /// like --enable-relay-endpoint, naming one of the producer sockets
    /// (repeatable)
    #[argh(option)]
    enable_relay_endpoint_on: Vec<String>,
    /// ask relayed producers to commit what they wrote every MS
    /// milliseconds (50..60000, default 1000): a dying relay link loses at
    /// most that much of their data
    #[argh(option, arg_name = "MS")]
    relay_commit_period_ms: Option<u32>,
}

pub fn main(args: &[String], _via: Via) -> i32 {
    crate::base::log::set_tag("traced");
    // getopt spelling, as upstream's docs write it.
    let args: Vec<String> = args
        .iter()
        .flat_map(|a| match a.split_once('=') {
            Some((k @ ("--enable-relay-endpoint-on" | "--relay-commit-period-ms"), v)) => {
                vec![k.to_string(), v.to_string()]
            }
            _ => vec![a.clone()],
        })
        .collect();
    let args: TracedArgs = match parse_args("traced", &args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args.version {
        println!("{}", crate::VERSION);
        return 0;
    }
    let mut opts = crate::traced::TracedOptions {
        exit_when_idle: args.exit_when_idle,
        enable_relay_endpoint: args.enable_relay_endpoint,
        relay_endpoint_on: args.enable_relay_endpoint_on.clone(),
        ..Default::default()
    };
    opts.relay_commit_period_ms = args.relay_commit_period_ms;
    if let Some(p) = &args.set_socket_permissions {
        match crate::traced::SocketPermissions::parse(p) {
            Ok(p) => opts.socket_permissions = Some(p),
            Err(e) => {
                eprintln!("traced: {e}");
                return 1;
            }
        }
    }
    let mut readiness = match go_background("traced", args.background) {
        Ok(r) => r,
        Err(code) => return code,
    };
    // Reported once both sockets listen.
    let ready = || readiness.report();
    match crate::traced::run(&opts, ready) {
        Ok(()) => 0,
        Err(e) => {
            // In the background only the log sees it.
            crate::log_error!("{e}");
            1
        }
    }
}
