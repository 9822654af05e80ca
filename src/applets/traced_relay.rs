//! `traced_relay`: local producers' socket on a remote machine, forwarded
//! to the central traced at PERFETTO_RELAY_SOCK_NAME (`HOST:PORT` or
//! `vsock://CID:PORT`), plus its RelayPort connection (system info, clocks).

use super::background::go_background;
use super::{parse_args, Via};
use crate::base::sock_addr::SockAddr;
use crate::ipc::default_sockets::producer_socket_name;
use crate::traced::{set_socket_file_permissions, DEFAULT_PRODUCER_MODE};
use crate::traced_relay::{forward, machine, relay_port};
use argh::FromArgs;

/// Listens on the producer socket (PERFETTO_PRODUCER_SOCK_NAME or the
/// default) and forwards every producer to the central traced named by
/// PERFETTO_RELAY_SOCK_NAME (HOST:PORT or vsock://CID:PORT), and sends this
/// machine's system info and clock readings on its own connection (RelayPort).
/// The link has no authentication:
/// keep it on a private network (vsock, VPN, ssh tunnel).
#[derive(FromArgs, Debug)]
struct RelayArgs {
    /// daemonize and print the pid once the producer socket listens
    #[argh(switch)]
    background: bool,
    /// print the version and exit
    #[argh(switch)]
    version: bool,
    /// chgrp/chmod the producer socket: GROUP:MODE (default: mode 0666,
    /// any local user may produce, as with traced)
    #[argh(option)]
    set_socket_permissions: Option<String>,
}

/// `GROUP:MODE` (octal mode), upstream's form for the relay.
fn parse_permissions(s: &str) -> Result<(String, u32), String> {
    let bad = || format!("--set-socket-permissions wants GROUP:MODE (octal), got {s:?}");
    let (group, mode) = s.split_once(':').ok_or_else(bad)?;
    let mode = u32::from_str_radix(mode, 8)
        .ok()
        .filter(|&m| m <= 0o7777)
        .ok_or_else(bad)?;
    if group.is_empty() {
        return Err(bad());
    }
    Ok((group.to_string(), mode))
}

pub fn main(args: &[String], _via: Via) -> i32 {
    crate::base::log::set_tag("traced_relay");
    let args: RelayArgs = match parse_args("traced_relay", args) {
        Ok(a) => a,
        Err(code) => return code,
    };
    if args.version {
        println!("{}", crate::VERSION);
        return 0;
    }
    // Everything checkable is checked before going to the background, so
    // the mistakes reach the terminal or init's output.
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
    let perms = match args
        .set_socket_permissions
        .as_deref()
        .map(parse_permissions)
    {
        None => (None, DEFAULT_PRODUCER_MODE),
        Some(Ok((group, mode))) => (Some(group), mode),
        Some(Err(e)) => {
            eprintln!("traced_relay: {e}");
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
    // No thread may run yet: going to the background forks.
    let mut readiness = match go_background("traced_relay", args.background) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let listener = match forward::bind(&listen) {
        Ok(l) => l,
        Err(e) => {
            crate::log_error!("{e}");
            return 1;
        }
    };
    if let SockAddr::Path(p) = &listen {
        if let Err(e) = set_socket_file_permissions(p, perms.0.as_deref(), perms.1) {
            crate::log_error!("{e}");
            return 1;
        }
    }
    crate::log_info!("relaying {listen} to {central} as {:?}", me.name);
    readiness.report();
    // Before any thread: it edits the environment.
    crate::base::child_process::notify_ready("TRACED_RELAY_NOTIFY_FD");
    {
        let (central, me) = (central.clone(), me.clone());
        std::thread::spawn(move || relay_port::run(&central, &me));
    }
    match forward::serve(listener, &central, me) {
        Ok(()) => 0,
        Err(e) => {
            crate::log_error!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_permissions;

    #[test]
    fn permissions_are_group_and_octal_mode() {
        assert_eq!(
            parse_permissions("tracing:0660"),
            Ok(("tracing".into(), 0o660))
        );
        assert!(parse_permissions("tracing").is_err());
        assert!(parse_permissions(":0660").is_err());
        assert!(parse_permissions("tracing:999").is_err());
        assert!(parse_permissions("tracing:0660:x").is_err());
    }
}
