//! `websocket_bridge`: the Perfetto UI's websocket to traced (and adb).

use std::time::Duration;

use super::{parse_args, Via};
use crate::ipc::default_sockets::consumer_socket_name;
use crate::websocket_bridge::bridge::{self, Endpoint, Options, DEFAULT_ORIGINS};
use crate::websocket_bridge::upstream::{tcp_addr, Target};
use argh::FromArgs;

/// Bridges the Perfetto UI's websocket (ws://127.0.0.1:8037/traced) to
/// traced's consumer socket, and /adb to the local adb server
/// (ADB_SERVER_SOCKET=tcp:IP:PORT or tcp:localhost:PORT, else 127.0.0.1:5037). Allowed
/// origins: https://ui.perfetto.dev, http://localhost:10000,
/// http://127.0.0.1:10000 and those added by flag.
#[derive(FromArgs, Debug)]
struct BridgeArgs {
    /// more allowed origins, comma-separated (repeatable)
    #[argh(option)]
    http_additional_cors_origins: Vec<String>,
    /// address to listen on (default 127.0.0.1:8037; loopback keeps the
    /// board's tracing to local users, reach it with ssh -L)
    #[argh(option, default = "String::from(\"127.0.0.1:8037\")")]
    listen: String,
    /// seconds a client may leave data unread before it is dropped (default 30)
    #[argh(option, default = "30")]
    client_stall_timeout: u64,
    /// seconds a websocket may go without traffic either way before it is
    /// closed; a ping goes out at half of it (default 60)
    #[argh(option, default = "60")]
    idle_timeout: u64,
}

/// Clients at once, in all and from one address.
const MAX_CONNS: usize = 32;
const MAX_CONNS_PER_ADDR: usize = 16;

pub fn main(args: &[String], _via: Via) -> i32 {
    crate::base::log::set_tag("websocket_bridge");
    let args: BridgeArgs = match parse_args("websocket_bridge", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let listen = match args.listen.parse() {
        Ok(a) => a,
        Err(_) => {
            eprintln!(
                "websocket_bridge: --listen wants IP:PORT, got {:?}",
                args.listen
            );
            return 1;
        }
    };
    let adb = match std::env::var("ADB_SERVER_SOCKET") {
        Ok(v) => match v.strip_prefix("tcp:").map(|h| (h, tcp_addr(h))) {
            Some((hostport, Ok(_))) => hostport.to_string(),
            _ => {
                eprintln!("websocket_bridge: ADB_SERVER_SOCKET must be tcp:IP:PORT, got {v:?}");
                return 1;
            }
        },
        Err(_) => "127.0.0.1:5037".to_string(),
    };
    let mut origins: Vec<String> = DEFAULT_ORIGINS.iter().map(|s| s.to_string()).collect();
    for list in &args.http_additional_cors_origins {
        origins.extend(
            list.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from),
        );
    }
    let opts = Options {
        listen,
        origins,
        endpoints: vec![
            Endpoint {
                path: "/traced",
                target: Target::Unix(consumer_socket_name()),
            },
            Endpoint {
                path: "/adb",
                target: Target::Tcp(adb),
            },
        ],
        max_conns: MAX_CONNS,
        max_conns_per_addr: MAX_CONNS_PER_ADDR,
        stall_timeout: Duration::from_secs(args.client_stall_timeout.max(1)),
        idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
    };
    match bridge::run(opts) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("websocket_bridge: {e}");
            1
        }
    }
}
