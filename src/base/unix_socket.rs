//! Non-blocking AF_UNIX stream sockets with fd passing and peer credentials.
//!
//! * Every socket is `SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK` (a
//!   connecting socket turns non-blocking once connected).
//! * [`UnixStream::send`] attaches at most one fd (`SCM_RIGHTS`); callers
//!   pass it only with the first chunk of a frame.
//! * [`UnixStream::recv`] has room for one fd. Extra fds in the same message
//!   are closed; a truncated control or data message (`MSG_CTRUNC`,
//!   `MSG_TRUNC`) closes everything received and is an error. Received fds
//!   carry `FD_CLOEXEC` (`MSG_CMSG_CLOEXEC`).
//! * [`UnixListener::accept`] reads `SO_PEERCRED` at accept time.
//! * The same types also carry TCP and vsock ([`SockAddr::Tcp`],
//!   [`SockAddr::Vsock`], for multi-machine links): no fds cross, and the
//!   peer's credentials are
//!   [`PeerCred::REMOTE`] until it names itself (SetPeerIdentity).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessage, MsgFlags, SockFlag, SockType,
    SockaddrLike,
};

use super::sock_addr::SockAddr;

/// Identity of the process at the other end, as the kernel saw it at
/// connect time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    /// Peer pid (in our pid namespace; 0 if not visible).
    pub pid: i32,
    /// Peer effective uid.
    pub uid: u32,
    /// Peer effective gid.
    pub gid: u32,
}

impl PeerCred {
    /// A TCP or vsock peer: the kernel vouches for no pid or uid.
    pub const REMOTE: PeerCred = PeerCred {
        pid: 0,
        uid: u32::MAX,
        gid: u32::MAX,
    };
}

fn new_socket(family: AddressFamily, nonblocking: bool) -> io::Result<OwnedFd> {
    let mut flags = SockFlag::SOCK_CLOEXEC;
    if nonblocking {
        flags |= SockFlag::SOCK_NONBLOCK;
    }
    Ok(socket::socket(family, SockType::Stream, flags, None)?)
}

/// Socket and kernel address for `addr` (TCP hosts are resolved here).
fn socket_for(
    addr: &SockAddr,
    nonblocking: bool,
) -> io::Result<(OwnedFd, socket::SockaddrStorage)> {
    if let SockAddr::Vsock { cid, port } = *addr {
        let fd = new_socket(AddressFamily::Vsock, nonblocking)?;
        let vsock = socket::VsockAddr::new(cid, port);
        // SAFETY:
        // - `vsock` is a valid sockaddr_vm of length `vsock.len()`.
        let storage =
            unsafe { socket::SockaddrStorage::from_raw(vsock.as_ptr().cast(), Some(vsock.len())) }
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("bad address {addr}"))
                })?;
        Ok((fd, storage))
    } else if addr.is_network() {
        let inet = addr.to_inet_addr()?;
        let family = if inet.is_ipv4() {
            AddressFamily::Inet
        } else {
            AddressFamily::Inet6
        };
        let fd = new_socket(family, nonblocking)?;
        // Frames are small and latency matters more than packet count.
        socket::setsockopt(&fd, sockopt::TcpNoDelay, &true)?;
        Ok((fd, socket::SockaddrStorage::from(inet)))
    } else {
        let unix = addr.to_unix_addr()?;
        let fd = new_socket(AddressFamily::Unix, nonblocking)?;
        // SAFETY:
        // - `unix` is a valid sockaddr_un of length `unix.len()`.
        let storage =
            unsafe { socket::SockaddrStorage::from_raw(unix.as_ptr().cast(), Some(unix.len())) }
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, format!("bad address {addr}"))
                })?;
        Ok((fd, storage))
    }
}

fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_NONBLOCK
    } else {
        flags - OFlag::O_NONBLOCK
    };
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags))?;
    Ok(())
}

fn set_cloexec(fd: BorrowedFd<'_>) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    fcntl(fd.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    Ok(())
}

/// Waits until `fd` is readable (if `readable`) or writable (if
/// `writable`), or `timeout` passes (`None` waits forever). Returns false
/// on timeout. Hang-up and error count as ready: the next read/write
/// reports them.
pub fn wait_ready(
    fd: BorrowedFd<'_>,
    readable: bool,
    writable: bool,
    timeout: Option<Duration>,
) -> io::Result<bool> {
    use nix::poll::{PollFd, PollFlags};
    let mut events = PollFlags::empty();
    if readable {
        events |= PollFlags::POLLIN;
    }
    if writable {
        events |= PollFlags::POLLOUT;
    }
    poll_until(&mut [PollFd::new(fd, events)], timeout)
}

/// Waits until any of `fds` is readable (or hung up), or `timeout` passes
/// (`None` waits forever). Returns false on timeout.
pub fn wait_readable_any(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<bool> {
    use nix::poll::{PollFd, PollFlags};
    let mut polled: Vec<PollFd> = fds
        .iter()
        .map(|&fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
    poll_until(&mut polled, timeout)
}

/// poll(2) until something is ready (true) or the timeout passes (false).
fn poll_until(fds: &mut [nix::poll::PollFd<'_>], timeout: Option<Duration>) -> io::Result<bool> {
    use nix::poll::{poll, PollTimeout};
    let timeout = match timeout {
        None => PollTimeout::NONE,
        // Round up so a sub-millisecond wait does not spin.
        Some(d) => {
            PollTimeout::try_from(d.as_millis().saturating_add(1).min(i32::MAX as u128) as i32)
                .unwrap_or(PollTimeout::MAX)
        }
    };
    loop {
        match poll(fds, timeout) {
            Ok(0) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A listening socket.
#[derive(Debug)]
pub struct UnixListener {
    fd: OwnedFd,
    addr: Option<SockAddr>,
    network: bool,
}

impl UnixListener {
    /// Binds and listens on `addr`. A stale filesystem socket at that path
    /// is removed first (abstract names need no cleanup).
    pub fn bind(addr: &SockAddr) -> io::Result<Self> {
        let (fd, kernel_addr) = socket_for(addr, true)?;
        if matches!(addr, SockAddr::Tcp(_)) {
            // A restarted traced must not wait out TIME_WAIT to rebind.
            socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
        }
        if let SockAddr::Path(p) = addr {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("removing stale {}: {e}", p.display()),
                    ))
                }
            }
        }
        socket::bind(fd.as_raw_fd(), &kernel_addr)
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("bind {addr}: {e}")))?;
        socket::listen(&fd, Backlog::MAXCONN)?;
        Ok(UnixListener {
            fd,
            addr: Some(addr.clone()),
            network: addr.is_network(),
        })
    }

    /// Adopts an already listening socket (e.g. inherited from Android
    /// init); makes it non-blocking and close-on-exec.
    pub fn from_fd(fd: OwnedFd) -> io::Result<Self> {
        set_nonblocking(fd.as_fd(), true)?;
        set_cloexec(fd.as_fd())?;
        let network = socket::getsockname::<socket::SockaddrStorage>(fd.as_raw_fd())
            .ok()
            .and_then(|a| a.family())
            .is_some_and(|f| f != AddressFamily::Unix);
        Ok(UnixListener {
            fd,
            addr: None,
            network,
        })
    }

    /// Adopts a listening socket inherited by fd number (e.g. Android
    /// init's `ANDROID_SOCKET_<name>`). Fails unless `fd_untrusted` is an
    /// open socket in listening state.
    ///
    /// Takes ownership: the caller must not use or adopt this fd again.
    pub fn adopt_inherited(fd_untrusted: RawFd) -> io::Result<Self> {
        use nix::fcntl::{fcntl, FcntlArg};
        if fd_untrusted < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("bad fd {fd_untrusted}"),
            ));
        }
        fcntl(fd_untrusted, FcntlArg::F_GETFD).map_err(|e| {
            io::Error::new(io::Error::from(e).kind(), format!("fd {fd_untrusted}: {e}"))
        })?;
        // SAFETY:
        // - F_GETFD just confirmed `fd_untrusted` is open, and it stays open
        //   for the borrow's short life (only this function touches it).
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd_untrusted) };
        let listening = socket::getsockopt(&borrowed, sockopt::AcceptConn).map_err(|e| {
            io::Error::new(io::Error::from(e).kind(), format!("fd {fd_untrusted}: {e}"))
        })?;
        if !listening {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("fd {fd_untrusted} is not a listening socket"),
            ));
        }
        // SAFETY:
        // - The fd is open (checked above); it was inherited for this socket
        //   and, per this function's contract, nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd_untrusted) };
        Self::from_fd(fd)
    }

    /// The address given to [`bind`](Self::bind), if any.
    pub fn addr(&self) -> Option<&SockAddr> {
        self.addr.as_ref()
    }

    /// Accepts one pending connection; `Ok(None)` when there is none
    /// (`EAGAIN`). The new stream is non-blocking and close-on-exec.
    pub fn accept(&self) -> io::Result<Option<(UnixStream, PeerCred)>> {
        loop {
            match socket::accept4(
                self.fd.as_raw_fd(),
                SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            ) {
                Ok(raw) => {
                    // SAFETY:
                    // - accept4 just returned `raw` as a new descriptor that
                    //   nothing else owns; OwnedFd takes sole ownership.
                    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
                    let stream = UnixStream {
                        fd,
                        network: self.network,
                    };
                    let cred = stream.peer_cred()?;
                    return Ok(Some((stream, cred)));
                }
                Err(Errno::EINTR) => continue,
                Err(Errno::EAGAIN) => return Ok(None),
                // The peer gave up before we accepted: try the next one.
                Err(Errno::ECONNABORTED) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
}

impl AsFd for UnixListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
impl AsRawFd for UnixListener {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A connected stream socket (non-blocking).
#[derive(Debug)]
pub struct UnixStream {
    fd: OwnedFd,
    network: bool,
}

impl UnixStream {
    /// Connects to `addr` (the connect itself blocks only while the
    /// listener's backlog is full), then switches to non-blocking mode.
    pub fn connect(addr: &SockAddr) -> io::Result<Self> {
        let (fd, kernel_addr) = socket_for(addr, false)?;
        loop {
            match socket::connect(fd.as_raw_fd(), &kernel_addr) {
                Ok(()) => break,
                Err(Errno::EINTR) => continue,
                Err(Errno::EACCES) => {
                    return Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "permission denied connecting to {addr}: its owner, group and \
                             mode do not admit uid {}",
                            nix::unistd::geteuid()
                        ),
                    ))
                }
                Err(e) => {
                    return Err(io::Error::new(
                        io::Error::from(e).kind(),
                        format!("connect {addr}: {e}"),
                    ))
                }
            }
        }
        set_nonblocking(fd.as_fd(), true)?;
        Ok(UnixStream {
            fd,
            network: addr.is_network(),
        })
    }

    /// A connected pair (socketpair), both non-blocking.
    pub fn pair() -> io::Result<(Self, Self)> {
        let (a, b) = socket::socketpair(
            AddressFamily::Unix,
            SockType::Stream,
            None,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )?;
        Ok((
            UnixStream {
                fd: a,
                network: false,
            },
            UnixStream {
                fd: b,
                network: false,
            },
        ))
    }

    /// Sends bytes from `data`, with `fd` as `SCM_RIGHTS` if given. Returns
    /// how many bytes went out (the fd went with them if > 0).
    /// `WouldBlock` when the send buffer is full. Never raises SIGPIPE.
    /// Over TCP or vsock an fd is refused (`InvalidInput`): the kernel would drop it
    /// without a word.
    pub fn send(&self, data: &[u8], fd: Option<BorrowedFd<'_>>) -> io::Result<usize> {
        if self.network && fd.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot pass an fd over TCP or vsock",
            ));
        }
        let iov = [io::IoSlice::new(data)];
        let raw_fds;
        let cmsgs: &[ControlMessage<'_>] = match fd {
            Some(f) => {
                raw_fds = [f.as_raw_fd()];
                &[ControlMessage::ScmRights(&raw_fds)]
            }
            None => &[],
        };
        loop {
            match socket::sendmsg::<()>(
                self.fd.as_raw_fd(),
                &iov,
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            ) {
                Ok(n) => return Ok(n),
                Err(Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Receives into `buf`; also returns the fd that came with these bytes,
    /// if any. `Ok((0, None))` means EOF. `WouldBlock` when nothing is queued.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
        loop {
            match sys::recv_with_fd(self.fd.as_fd(), buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    /// True for a TCP or vsock connection (see the module docs).
    pub fn is_network(&self) -> bool {
        self.network
    }

    /// `SO_PEERCRED` of the connected peer ([`PeerCred::REMOTE`] over TCP and vsock).
    pub fn peer_cred(&self) -> io::Result<PeerCred> {
        if self.network {
            return Ok(PeerCred::REMOTE);
        }
        let c = socket::getsockopt(&self.fd, sockopt::PeerCredentials)?;
        Ok(PeerCred {
            pid: c.pid(),
            uid: c.uid(),
            gid: c.gid(),
        })
    }

    /// A network peer's address without its port (`10.0.0.2`, `::1`,
    /// `vsock:3`): what a per-address connection budget keys on. `None` on
    /// a UNIX socket or if the kernel no longer knows the peer.
    pub fn peer_host(&self) -> Option<String> {
        if !self.network {
            return None;
        }
        let a: socket::SockaddrStorage = socket::getpeername(self.fd.as_raw_fd()).ok()?;
        if let Some(v4) = a.as_sockaddr_in() {
            return Some(v4.ip().to_string());
        }
        if let Some(v6) = a.as_sockaddr_in6() {
            return Some(v6.ip().to_string());
        }
        a.as_vsock_addr().map(|v| format!("vsock:{}", v.cid()))
    }

    /// TCP keepalive on a network connection, so a peer that vanished
    /// without a FIN or RST (power cut, cable pulled, a guest killed) is
    /// noticed: probes after `idle` of silence, every `interval`, and the
    /// link closes after `count` unanswered ones. A no-op on UNIX sockets
    /// and vsock (which has no keepalive).
    pub fn set_keepalive(&self, idle: Duration, interval: Duration, count: u32) -> io::Result<()> {
        let tcp = matches!(
            socket::getsockname::<socket::SockaddrStorage>(self.fd.as_raw_fd())
                .ok()
                .and_then(|a| a.family()),
            Some(AddressFamily::Inet | AddressFamily::Inet6)
        );
        if !tcp {
            return Ok(());
        }
        let secs = |d: Duration| d.as_secs().clamp(1, u32::MAX as u64) as u32;
        socket::setsockopt(&self.fd, sockopt::KeepAlive, &true)?;
        socket::setsockopt(&self.fd, sockopt::TcpKeepIdle, &secs(idle))?;
        socket::setsockopt(&self.fd, sockopt::TcpKeepInterval, &secs(interval))?;
        socket::setsockopt(&self.fd, sockopt::TcpKeepCount, &count)?;
        Ok(())
    }

    /// Shuts down both directions; the peer sees EOF, and our own poller
    /// gets a hang-up event.
    pub fn shutdown(&self) -> io::Result<()> {
        match socket::shutdown(self.fd.as_raw_fd(), socket::Shutdown::Both) {
            Ok(()) | Err(Errno::ENOTCONN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Switches `O_NONBLOCK`.
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        set_nonblocking(self.fd.as_fd(), on)
    }
}

impl AsFd for UnixStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
impl AsRawFd for UnixStream {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Raw `recvmsg`: nix cannot hand back the fds of a message whose control
/// data was truncated, and those must be closed, not leaked.
mod sys {
    use super::*;

    /// Room for exactly one `int` of SCM_RIGHTS (CMSG_SPACE rounds it up,
    /// so the kernel may still fit two; extras are closed below).
    const CMSG_BUF_LEN: usize = 64;

    #[repr(C, align(8))]
    struct CmsgBuf([u8; CMSG_BUF_LEN]);

    pub(super) fn recv_with_fd(
        sock: BorrowedFd<'_>,
        buf: &mut [u8],
    ) -> io::Result<(usize, Option<OwnedFd>)> {
        let mut cbuf = CmsgBuf([0; CMSG_BUF_LEN]);
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY:
        // - msghdr is plain old data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        // SAFETY:
        // - CMSG_SPACE only computes a size.
        msg.msg_controllen =
            unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as _;
        debug_assert!(msg.msg_controllen as usize <= CMSG_BUF_LEN);

        // SAFETY:
        // - `msg` points at `iov` (valid for buf.len() writable bytes) and at
        //   `cbuf` (valid for msg_controllen bytes); all outlive the call.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }

        let mut fds: Vec<OwnedFd> = Vec::new();
        // SAFETY:
        // - `msg` was filled by recvmsg: msg_control/msg_controllen describe
        //   initialised control data inside `cbuf`, so the CMSG_* walk stays
        //   in bounds; CMSG_NXTHDR returns null past the end.
        // - Each SCM_RIGHTS int is a descriptor the kernel just installed in
        //   this process for us alone, so OwnedFd may take ownership.
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                let hdr = &*cmsg;
                if hdr.cmsg_level == libc::SOL_SOCKET && hdr.cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let payload = hdr.cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                    for i in 0..payload / std::mem::size_of::<libc::c_int>() {
                        let raw = std::ptr::read_unaligned(data.cast::<libc::c_int>().add(i));
                        fds.push(OwnedFd::from_raw_fd(raw));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
        if msg.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
            // `fds` drops here, closing whatever did arrive.
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "truncated message or control data on socket",
            ));
        }
        // Keep the first fd; any extra ones close when `fds` drops.
        let first = if fds.is_empty() {
            None
        } else {
            Some(fds.swap_remove(0))
        };
        Ok((n as usize, first))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    fn recv_all(s: &UnixStream, want: usize) -> (Vec<u8>, Vec<OwnedFd>) {
        let mut out = Vec::new();
        let mut fds = Vec::new();
        while out.len() < want {
            wait_ready(s.as_fd(), true, false, None).unwrap();
            let mut buf = [0u8; 4096];
            match s.recv(&mut buf) {
                Ok((0, _)) => break,
                Ok((n, fd)) => {
                    out.extend_from_slice(&buf[..n]);
                    fds.extend(fd);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        (out, fds)
    }

    /// A loopback port nobody listens on right now.
    pub(crate) fn free_tcp_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn tcp_listen_connect_and_remote_creds() {
        let addr = SockAddr::parse(&format!("127.0.0.1:{}", free_tcp_port())).unwrap();
        let l = UnixListener::bind(&addr).unwrap();
        let c = UnixStream::connect(&addr).unwrap();
        assert!(c.is_network());
        wait_ready(l.as_fd(), true, false, None).unwrap();
        let (s, cred) = l.accept().unwrap().unwrap();
        assert!(s.is_network());
        assert_eq!(cred, PeerCred::REMOTE);
        assert_eq!(s.peer_host().as_deref(), Some("127.0.0.1"));
        s.set_keepalive(Duration::from_secs(30), Duration::from_secs(10), 3)
            .unwrap();
        assert!(socket::getsockopt(&s.fd, sockopt::KeepAlive).unwrap());
        assert_eq!(socket::getsockopt(&s.fd, sockopt::TcpKeepIdle).unwrap(), 30);
        assert_eq!(
            socket::getsockopt(&s.fd, sockopt::TcpKeepInterval).unwrap(),
            10
        );
        assert_eq!(socket::getsockopt(&s.fd, sockopt::TcpKeepCount).unwrap(), 3);
        c.send(b"hello", None).unwrap();
        assert_eq!(recv_all(&s, 5).0, b"hello");
        // No fd crosses TCP: the send fails instead of the kernel dropping it.
        let f = std::fs::File::open("/dev/null").unwrap();
        assert!(s.send(b"x", Some(f.as_fd())).is_err());
        // An adopted TCP listener knows it is TCP.
        let dup = l.fd.try_clone().unwrap();
        assert!(UnixListener::from_fd(dup).unwrap().network);
    }

    #[test]
    fn passes_an_fd_with_cloexec() {
        let (a, b) = UnixStream::pair().unwrap();
        let mut mfd = memfd::MemfdOptions::new().create("t").unwrap().into_file();
        mfd.write_all(b"payload").unwrap();
        assert_eq!(a.send(b"x", Some(mfd.as_fd())).unwrap(), 1);
        let (data, mut fds) = recv_all(&b, 1);
        assert_eq!(data, b"x");
        assert_eq!(fds.len(), 1);
        let got = fds.pop().unwrap();
        let flags = nix::fcntl::fcntl(got.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(flags & libc::FD_CLOEXEC, 0);
        let mut f = std::fs::File::from(got);
        f.rewind().unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "payload");
    }

    #[test]
    fn extra_fds_are_closed_and_excess_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        let files: Vec<_> = (0..4)
            .map(|_| std::fs::File::open("/dev/null").unwrap())
            .collect();
        let raws: Vec<RawFd> = files.iter().map(|f| f.as_raw_fd()).collect();
        // Two fds fit in the rounded-up control buffer: first kept, second closed.
        let cm = [ControlMessage::ScmRights(&raws[..2])];
        socket::sendmsg::<()>(
            a.as_raw_fd(),
            &[io::IoSlice::new(b"a")],
            &cm,
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let (_, fds) = recv_all(&b, 1);
        assert_eq!(fds.len(), 1);
        // Four do not fit: MSG_CTRUNC, reported as an error.
        let cm = [ControlMessage::ScmRights(&raws[..4])];
        socket::sendmsg::<()>(
            a.as_raw_fd(),
            &[io::IoSlice::new(b"b")],
            &cm,
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        wait_ready(b.as_fd(), true, false, None).unwrap();
        let err = b.recv(&mut [0u8; 16]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn listener_accepts_with_peer_credentials_on_both_address_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        std::fs::write(&path, b"stale").unwrap(); // stale file gets replaced
        let name = format!("@tracebox-test-{}", std::process::id());
        for addr in [
            SockAddr::Path(path.clone()),
            SockAddr::parse(&name).unwrap(),
        ] {
            let l = UnixListener::bind(&addr).unwrap();
            assert!(l.accept().unwrap().is_none());
            let c = UnixStream::connect(&addr).unwrap();
            wait_ready(l.as_fd(), true, false, None).unwrap();
            let (s, cred) = l.accept().unwrap().unwrap();
            assert_eq!(cred.pid, std::process::id() as i32);
            assert_eq!(cred.uid, nix::unistd::geteuid().as_raw());
            c.send(b"hi", None).unwrap();
            assert_eq!(recv_all(&s, 2).0, b"hi");
        }
    }

    #[test]
    fn abstract_name_matches_std_encoding() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("tracebox-std-{}", std::process::id());
        let l = UnixListener::bind(&SockAddr::Abstract(name.clone().into_bytes())).unwrap();
        let std_addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let _c = std::os::unix::net::UnixStream::connect_addr(&std_addr).unwrap();
        wait_ready(l.as_fd(), true, false, None).unwrap();
        assert!(l.accept().unwrap().is_some());
    }

    #[test]
    fn connect_to_missing_socket_fails_clearly() {
        let err =
            UnixStream::connect(&SockAddr::Path("/nonexistent/dir/x.sock".into())).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/dir/x.sock"), "{err}");
    }
}
