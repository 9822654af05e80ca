//! The relay daemon's data path: every local producer connection gets its
//! own connection to the central traced, opened with a SetPeerIdentity
//! frame (the local peer's `SO_PEERCRED` pid/uid, this machine's hint and
//! name), then bytes are copied both ways.
//!
//! * One thread per direction, blocking I/O, one 256 KiB buffer each: a
//!   side that stops reading stalls the other (bounded memory, no queue).
//! * No fd crosses: an fd a local producer sends (its own shared memory)
//!   is closed and logged; the central traced must then use shared-memory
//!   emulation for that producer.
//! * At most [`MAX_CONNECTIONS`] producers at once; more are closed at
//!   accept (logged).
//! * Connecting upstream retries with backoff (100 ms doubling to 3.2 s,
//!   six tries); after that the local connection is closed and the
//!   producer's own reconnect logic takes over.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::wire::PeerIdentity;
use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::{wait_ready, PeerCred, UnixListener, UnixStream};
use crate::log_warn;

const BUF: usize = 256 * 1024;
/// Producers forwarded at once (two threads and 512 KiB each).
pub const MAX_CONNECTIONS: usize = 64;
const CONNECT_TRIES: u32 = 6;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// What every forwarded connection says about this machine.
#[derive(Clone, Debug)]
pub struct Machine {
    pub hint: String,
    pub name: String,
}

/// Binds the local producer socket (a stale socket file is replaced).
pub fn bind(listen: &SockAddr) -> io::Result<UnixListener> {
    UnixListener::bind(listen)
}

/// Accepts local producers on `listener` forever, forwarding each to
/// `central`.
pub fn serve(listener: UnixListener, central: &SockAddr, machine: Machine) -> io::Result<()> {
    let live = Arc::new(AtomicUsize::new(0));
    loop {
        wait_ready(std::os::fd::AsFd::as_fd(&listener), true, false, None)?;
        while let Some((local, cred)) = listener.accept()? {
            if live.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                log_warn!(
                    "refusing pid {}: {MAX_CONNECTIONS} producers already relayed",
                    cred.pid
                );
                continue;
            }
            live.fetch_add(1, Ordering::Relaxed);
            let (central, machine, live) = (central.clone(), machine.clone(), Arc::clone(&live));
            std::thread::spawn(move || {
                if let Err(e) = forward(local, cred, &central, &machine) {
                    log_warn!("relay of pid {}: {e}", cred.pid);
                }
                live.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }
}

fn connect_with_backoff(central: &SockAddr) -> io::Result<UnixStream> {
    let mut delay = FIRST_BACKOFF;
    let mut tries = 0;
    loop {
        match UnixStream::connect(central) {
            Ok(s) => return Ok(s),
            Err(e) if tries + 1 >= CONNECT_TRIES => return Err(e),
            Err(e) => {
                log_warn!("{e}; retrying in {delay:?}");
                std::thread::sleep(delay);
                delay *= 2;
                tries += 1;
            }
        }
    }
}

/// Forwards one local connection until either side closes.
pub fn forward(
    local: UnixStream,
    cred: PeerCred,
    central: &SockAddr,
    machine: &Machine,
) -> io::Result<()> {
    let up = connect_with_backoff(central)?;
    let identity = PeerIdentity {
        pid: cred.pid,
        uid: cred.uid as i32,
        machine_id_hint: machine.hint.clone(),
        machine_name: machine.name.clone(),
    };
    let frame = identity
        .to_frame()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
    local.set_nonblocking(false)?;
    up.set_nonblocking(false)?;
    write_all(&up, &frame)?;
    let (local, up) = (Arc::new(local), Arc::new(up));
    let (l2, u2) = (Arc::clone(&local), Arc::clone(&up));
    let back = std::thread::spawn(move || pump(&u2, &l2));
    let r = pump(&local, &up);
    let _ = back.join();
    r
}

/// Copies `from` to `to` until EOF or an error, then shuts both down so
/// the other direction ends too.
fn pump(from: &UnixStream, to: &UnixStream) -> io::Result<()> {
    let mut buf = vec![0u8; BUF];
    let r = loop {
        match from.recv(&mut buf) {
            Ok((0, _)) => break Ok(()),
            Ok((n, fd)) => {
                if fd.is_some() {
                    log_warn!("dropping an fd from a relayed producer: fds cannot cross");
                }
                if let Err(e) = write_all(to, &buf[..n]) {
                    break Err(e);
                }
            }
            Err(e) => break Err(e),
        }
    };
    let _ = from.shutdown();
    let _ = to.shutdown();
    r
}

fn write_all(to: &UnixStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        let n = to.send(data, None)?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        data = &data[n..];
    }
    Ok(())
}
