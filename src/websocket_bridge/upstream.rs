//! The far side of a websocket: traced's consumer socket (a Unix socket,
//! possibly abstract) or an adb server (TCP). Both non-blocking.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::UnixStream;

/// Where an endpoint's bytes go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A Unix socket name as `PERFETTO_CONSUMER_SOCK_NAME` spells it.
    Unix(String),
    /// `host:port` of a TCP server.
    Tcp(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Unix(s) => write!(f, "unix:{s}"),
            Target::Tcp(s) => write!(f, "tcp:{s}"),
        }
    }
}

/// How long a TCP connect may hold the loop (the adb server is local
/// unless `ADB_SERVER_SOCKET` says otherwise).
const TCP_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// `IP:PORT`, `[IPV6]:PORT` or `localhost:PORT` (as 127.0.0.1). No name
/// lookup: a resolver would cost the static binary more than it is worth.
pub fn tcp_addr(hostport: &str) -> io::Result<SocketAddr> {
    let literal = match hostport.strip_prefix("localhost:") {
        Some(port) => format!("127.0.0.1:{port}"),
        None => hostport.to_string(),
    };
    literal.parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{hostport:?} is not IP:PORT or localhost:PORT"),
        )
    })
}

/// A connected upstream socket.
#[derive(Debug)]
pub enum Upstream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Upstream {
    /// Connects (blocking, briefly) and switches to non-blocking.
    pub fn connect(target: &Target) -> io::Result<Upstream> {
        match target {
            Target::Unix(name) => {
                let addr = SockAddr::parse(name)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
                Ok(Upstream::Unix(UnixStream::connect(&addr)?))
            }
            Target::Tcp(hostport) => {
                let addr = tcp_addr(hostport)?;
                let s = TcpStream::connect_timeout(&addr, TCP_CONNECT_TIMEOUT)?;
                s.set_nonblocking(true)?;
                s.set_nodelay(true)?;
                Ok(Upstream::Tcp(s))
            }
        }
    }

    /// Reads bytes; `Ok(0)` is EOF. An fd traced might attach is closed.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Upstream::Unix(s) => s.recv(buf).map(|(n, _fd)| n),
            Upstream::Tcp(s) => s.read(buf),
        }
    }

    /// Writes bytes (never raises SIGPIPE).
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Upstream::Unix(s) => s.send(buf, None),
            Upstream::Tcp(s) => s.write(buf),
        }
    }

    /// Tells the peer we are gone.
    pub fn shutdown(&self) {
        let _ = match self {
            Upstream::Unix(s) => s.shutdown(),
            Upstream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl AsRawFd for Upstream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Upstream::Unix(s) => s.as_raw_fd(),
            Upstream::Tcp(s) => s.as_raw_fd(),
        }
    }
}

/// Bytes waiting for a non-blocking socket, written front first.
#[derive(Debug, Default)]
pub struct OutBuf {
    data: Vec<u8>,
    pos: usize,
}

impl OutBuf {
    /// Bytes still to write.
    pub fn len(&self) -> usize {
        self.data.len() - self.pos
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The tail to append to (frames are built in place).
    pub fn tail(&mut self) -> &mut Vec<u8> {
        if self.pos > 0 && self.pos * 2 >= self.data.len() {
            self.data.drain(..self.pos);
            self.pos = 0;
        }
        &mut self.data
    }

    /// Writes until empty or `WouldBlock`; returns the bytes written.
    pub fn flush(
        &mut self,
        mut write: impl FnMut(&[u8]) -> io::Result<usize>,
    ) -> io::Result<usize> {
        let mut total = 0;
        while self.pos < self.data.len() {
            match write(&self.data[self.pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.pos += n;
                    total += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.pos == self.data.len() {
            self.data.clear();
            self.pos = 0;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_targets_are_literal_addresses() {
        assert_eq!(
            tcp_addr("localhost:5037").unwrap().to_string(),
            "127.0.0.1:5037"
        );
        assert_eq!(
            tcp_addr("10.0.0.2:5037").unwrap().to_string(),
            "10.0.0.2:5037"
        );
        assert_eq!(tcp_addr("[::1]:5037").unwrap().to_string(), "[::1]:5037");
        assert!(tcp_addr("adb.example:5037").is_err());
        assert!(tcp_addr("127.0.0.1").is_err());
    }
}
