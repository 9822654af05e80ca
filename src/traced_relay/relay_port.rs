//! The relay's own connection to the central traced, beside the forwarded
//! producers (upstream's RelayClient): SetPeerIdentity, bind `RelayPort`,
//! `InitRelay` with this machine's SystemInfo, then clock-sync rounds
//! (`SyncClock` PING and UPDATE, every 30 s). A lost or refused connection
//! is retried after 100 ms, doubling to 30 s, back to 100 ms once bound.
//! A failure is logged as a warning when it first happens and at debug
//! level while it repeats, so a traced that does not serve RelayPort
//! (upstream's default, without `--enable-relay-endpoint`) costs one line:
//! producers are forwarded all the same, only the machine's SystemInfo and
//! clock sync are missing from the trace.

use std::time::Duration;

use super::forward::Machine;
use super::machine::{clock_snapshot, system_info};
use super::wire::{init_relay_args, sync_clock_args, ClockSync, PeerIdentity, SyncStep};
use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::wait_ready;
use crate::ipc::client::{BlockingClient, ClientError};
use crate::{log_debug, log_info, log_warn};

const FIRST_RETRY: Duration = Duration::from_millis(100);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// An answer slower than this means the link is gone.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// Keeps the RelayPort connection up, forever.
pub fn run(central: &SockAddr, machine: &Machine) {
    let mut delay = FIRST_RETRY;
    let mut last_failure: Option<String> = None;
    loop {
        let mut bound = false;
        match connect_and_sync(central, machine, &mut bound) {
            Ok(()) => log_info!("RelayPort connection to {central} closed"),
            Err(e) => {
                let what = e.to_string();
                if bound || last_failure.as_deref() != Some(what.as_str()) {
                    log_warn!("RelayPort connection to {central}: {what}{}", hint(&e));
                } else {
                    log_debug!("RelayPort connection to {central}: {what} (again)");
                }
                last_failure = Some(what);
            }
        }
        if bound {
            last_failure = None;
        }
        delay = if bound {
            FIRST_RETRY
        } else {
            (delay * 2).min(MAX_RETRY)
        };
        std::thread::sleep(delay);
    }
}

fn hint(e: &ClientError) -> &'static str {
    match e {
        ClientError::UnknownService(_) => {
            "; producers are still forwarded, but this machine's system info and clock \
             sync will be missing from traces (start traced with --enable-relay-endpoint)"
        }
        _ => "",
    }
}

fn connect_and_sync(
    central: &SockAddr,
    machine: &Machine,
    bound: &mut bool,
) -> Result<(), ClientError> {
    let mut c = BlockingClient::connect(central)?;
    c.set_timeout(Some(ANSWER_TIMEOUT));
    let identity = PeerIdentity {
        pid: std::process::id() as i32,
        uid: nix::unistd::geteuid().as_raw() as i32,
        machine_id_hint: machine.hint.clone(),
        machine_name: machine.name.clone(),
    };
    let frame = identity
        .to_frame()
        .map_err(|e| ClientError::Io(std::io::Error::other(format!("{e:?}"))))?;
    let mut rest = &frame[..];
    while !rest.is_empty() {
        match c.socket().send(rest, None) {
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_ready(std::os::fd::AsFd::as_fd(c.socket()), false, true, None)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    let port = c.bind_service("RelayPort")?;
    *bound = true;
    let call = |c: &mut BlockingClient, method: &str, args: &[u8]| {
        let replies = c.invoke(&port, method, args, None)?;
        match replies.first() {
            Some(r) if r.success => Ok(()),
            _ => Err(ClientError::Io(std::io::Error::other(format!(
                "{method} refused"
            )))),
        }
    };
    call(&mut c, "InitRelay", &init_relay_args(&system_info()))?;
    log_info!("RelayPort bound on {central}: system info sent, syncing clocks");
    let mut sync = ClockSync::default();
    let mut step = sync.on_connected();
    let mut first_round = true;
    loop {
        step = match step {
            SyncStep::Send(phase) => {
                call(
                    &mut c,
                    "SyncClock",
                    &sync_clock_args(phase, &clock_snapshot()),
                )?;
                let next = sync.on_response();
                if first_round && matches!(next, SyncStep::WaitThen(_)) {
                    first_round = false;
                    log_info!("clocks synced with {central}");
                }
                next
            }
            SyncStep::WaitThen(pause) => {
                // Nothing is due from the host: readable means it hung up.
                let fd = std::os::fd::AsFd::as_fd(c.socket());
                if wait_ready(fd, true, false, Some(pause))? {
                    return Ok(());
                }
                sync.on_timer()
            }
        };
    }
}
