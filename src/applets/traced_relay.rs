//! `traced_relay`: local producers' socket on a remote machine, forwarded
//! to the central traced at PERFETTO_RELAY_SOCK_NAME (`HOST:PORT` or
//! `vsock://CID:PORT`), plus its RelayPort connection (system info, clocks).

use super::{parse_args, Via};
use crate::base::sock_addr::SockAddr;
use crate::ipc::default_sockets::producer_socket_name;
use crate::traced_relay::{forward, machine, relay_port};
use argh::FromArgs;

/// Listens on the producer socket (PERFETTO_PRODUCER_SOCK_NAME or the
/// default) and forwards every producer to the central traced named by
/// PERFETTO_RELAY_SOCK_NAME (HOST:PORT or vsock://CID:PORT), and sends this
/// machine's system info and clock readings on its own connection (RelayPort).
/// The link has no authentication:
/// keep it on a private network (vsock, VPN, ssh tunnel).
#[derive(FromArgs, Debug)]
struct RelayArgs {}

pub fn main(args: &[String], _via: Via) -> i32 {
    crate::base::log::set_tag("traced_relay");
    let _: RelayArgs = match parse_args("traced_relay", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    let central = match std::env::var("PERFETTO_RELAY_SOCK_NAME")
        .map_err(|_| "PERFETTO_RELAY_SOCK_NAME is not set".to_string())
        .and_then(|v| SockAddr::parse(&v).map_err(|e| e.to_string()))
    {
        Ok(a) => a,
        Err(e) => {
            eprintln!("traced_relay: {e}");
            return 1;
        }
    };
    let listen = match SockAddr::parse(&producer_socket_name()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("traced_relay: producer socket: {e}");
            return 1;
        }
    };
    let Some(hint) = machine::machine_id_hint() else {
        eprintln!("traced_relay: no boot id to tell this machine apart");
        return 1;
    };
    let me = forward::Machine {
        hint,
        name: machine::machine_name(),
    };
    {
        let (central, me) = (central.clone(), me.clone());
        std::thread::spawn(move || relay_port::run(&central, &me));
    }
    match forward::run(&listen, &central, me) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("traced_relay: {e}");
            1
        }
    }
}
