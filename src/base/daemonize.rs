//! Going to the background (`perfetto -d/-D`, `traced --background`).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use nix::unistd::{fork, setsid, ForkResult};

use super::unix_socket::wait_ready;

/// What `background` returns in each process.
#[derive(Debug)]
pub enum Side {
    /// The original process; holds the read end of the status pipe.
    Parent { child_pid: i32, status: OwnedFd },
    /// The daemon; holds the write end of the status pipe.
    Child { status: OwnedFd },
}

/// Forks; the child starts a new session (no controlling terminal) with
/// stdin, stdout and stderr on /dev/null, so whoever captured our output
/// sees EOF when the parent exits. The parent returns only after the child
/// has detached, so closing the terminal right away cannot SIGHUP it.
/// Must be called before any thread is started.
pub fn background() -> io::Result<Side> {
    let (read_end, write_end) = nix::unistd::pipe()?;
    let (detached_rd, detached_wr) = nix::unistd::pipe()?;
    // SAFETY: callers guarantee the process is single-threaded here, so the
    // child may run arbitrary code after fork.
    match unsafe { fork() }? {
        ForkResult::Parent { child } => {
            drop(write_end);
            drop(detached_wr);
            // EOF (child died) or its byte: either way it is not ours anymore.
            let _ = File::from(detached_rd).read(&mut [0u8; 1]);
            Ok(Side::Parent {
                child_pid: child.as_raw(),
                status: read_end,
            })
        }
        ForkResult::Child => {
            drop(read_end);
            drop(detached_rd);
            setsid()?;
            let null = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")?;
            for fd in 0..=2 {
                nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd)?;
            }
            let _ = File::from(detached_wr).write_all(b"1");
            Ok(Side::Child { status: write_end })
        }
    }
}

/// Child side: reports one status byte to the waiting parent.
pub fn report_status(status: OwnedFd, byte: u8) {
    let _ = File::from(status).write_all(&[byte]);
}

/// Parent side: waits up to `timeout` for the child's status byte.
/// Returns None on timeout, Some(1) if the child died without reporting.
pub fn wait_status(status: OwnedFd, timeout: Duration) -> io::Result<Option<u8>> {
    if !wait_ready(status.as_fd(), true, false, Some(timeout))? {
        return Ok(None);
    }
    let mut b = [0u8; 1];
    Ok(Some(if File::from(status).read(&mut b)? == 1 {
        b[0]
    } else {
        1
    }))
}
