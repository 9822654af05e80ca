//! Socket address strings as Perfetto spells them.
//!
//! * `@name` — abstract AF_UNIX. The kernel address is a NUL followed by
//!   `name`, and its length is `offsetof(sun_path) + 1 + len(name)`: the
//!   leading NUL counts, there is no trailing NUL. Any other length names a
//!   different socket.
//! * `host:port` / `[v6]:port` (no `/`, digits after the last colon) — TCP,
//!   as upstream's multi-machine setups spell it; the host is resolved when
//!   binding or connecting.
//! * `vsock://CID:PORT` — AF_VSOCK (a VM and its host), as upstream.
//! * anything else — a filesystem path (at most 107 bytes).

use std::fmt;
use std::path::PathBuf;

use nix::sys::socket::UnixAddr;

/// Longest `sun_path` payload: 108 bytes minus one (a leading NUL for
/// abstract names, a trailing NUL for paths).
pub const MAX_SUN_PATH: usize = 107;

/// A parsed socket address we can listen on or connect to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SockAddr {
    /// Filesystem AF_UNIX socket.
    Path(PathBuf),
    /// Abstract AF_UNIX socket; holds the name without `@` or NUL.
    Abstract(Vec<u8>),
    /// TCP `host:port` (brackets kept around an IPv6 host), as written.
    Tcp(String),
    /// AF_VSOCK context id and port.
    Vsock { cid: u32, port: u32 },
}

/// Why an address string was rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SockAddrError {
    /// The string was empty.
    Empty,
    /// Longer than [`MAX_SUN_PATH`].
    TooLong(String),
    /// A `vsock://` address that is not `vsock://CID:PORT`.
    BadVsock(String),
    /// A TCP address whose host did not resolve.
    TcpUnresolved(String),
}

impl fmt::Display for SockAddrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SockAddrError::Empty => f.write_str("empty socket address"),
            SockAddrError::TooLong(s) => {
                write!(f, "socket address too long (max {MAX_SUN_PATH} bytes): {s}")
            }
            SockAddrError::BadVsock(s) => write!(f, "{s}: want vsock://CID:PORT"),
            SockAddrError::TcpUnresolved(s) => write!(f, "cannot resolve TCP address {s}"),
        }
    }
}

impl std::error::Error for SockAddrError {}

impl From<SockAddrError> for std::io::Error {
    fn from(e: SockAddrError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// True for `host:1234` or `[::1]:1234`: a colon followed only by digits.
fn looks_like_tcp(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

impl SockAddr {
    /// Parses Perfetto's address syntax (see module docs).
    pub fn parse(s: &str) -> Result<Self, SockAddrError> {
        if s.is_empty() {
            return Err(SockAddrError::Empty);
        }
        let addr = if let Some(name) = s.strip_prefix('@') {
            SockAddr::Abstract(name.as_bytes().to_vec())
        } else if let Some(rest) = s.strip_prefix("vsock://") {
            let bad = || SockAddrError::BadVsock(s.to_string());
            let (cid, port) = rest.split_once(':').ok_or_else(bad)?;
            return Ok(SockAddr::Vsock {
                cid: cid.parse().map_err(|_| bad())?,
                port: port.parse().map_err(|_| bad())?,
            });
        } else if !s.contains('/') && looks_like_tcp(s) {
            return Ok(SockAddr::Tcp(s.to_string()));
        } else {
            SockAddr::Path(PathBuf::from(s))
        };
        let len = match &addr {
            SockAddr::Abstract(n) => n.len(),
            SockAddr::Path(p) => p.as_os_str().len(),
            SockAddr::Tcp(_) | SockAddr::Vsock { .. } => 0,
        };
        if len > MAX_SUN_PATH {
            return Err(SockAddrError::TooLong(s.to_string()));
        }
        Ok(addr)
    }

    /// True for TCP and vsock: no credentials, no fd passing.
    pub fn is_network(&self) -> bool {
        matches!(self, SockAddr::Tcp(_) | SockAddr::Vsock { .. })
    }

    /// The kernel address (see module docs for the abstract length rule).
    pub fn to_unix_addr(&self) -> std::io::Result<UnixAddr> {
        let r = match self {
            SockAddr::Path(p) => UnixAddr::new(p.as_path()),
            SockAddr::Abstract(n) => UnixAddr::new_abstract(n),
            SockAddr::Tcp(s) => return Err(SockAddrError::TcpUnresolved(s.clone()).into()),
            SockAddr::Vsock { .. } => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("not a UNIX socket: {self}"),
                ))
            }
        };
        r.map_err(std::io::Error::from)
    }

    /// The first address a TCP `host:port` resolves to.
    pub fn to_inet_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        use std::net::ToSocketAddrs;
        let SockAddr::Tcp(s) = self else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not a TCP address: {self}"),
            ));
        };
        s.to_socket_addrs()
            .ok()
            .and_then(|mut it| it.next())
            .ok_or_else(|| SockAddrError::TcpUnresolved(s.clone()).into())
    }
}

impl fmt::Display for SockAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SockAddr::Path(p) => write!(f, "{}", p.display()),
            SockAddr::Abstract(n) => write!(f, "@{}", String::from_utf8_lossy(n)),
            SockAddr::Tcp(s) => f.write_str(s),
            SockAddr::Vsock { cid, port } => write!(f, "vsock://{cid}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_form() {
        assert_eq!(
            SockAddr::parse("/tmp/x.sock"),
            Ok(SockAddr::Path("/tmp/x.sock".into()))
        );
        assert_eq!(SockAddr::parse("rel/x"), Ok(SockAddr::Path("rel/x".into())));
        assert_eq!(
            SockAddr::parse("@traced-p-1"),
            Ok(SockAddr::Abstract(b"traced-p-1".to_vec()))
        );
        assert_eq!(SockAddr::parse(""), Err(SockAddrError::Empty));
        assert_eq!(
            SockAddr::parse("vsock://2:1234"),
            Ok(SockAddr::Vsock { cid: 2, port: 1234 })
        );
        assert_eq!(
            SockAddr::parse("vsock://2:1234").unwrap().to_string(),
            "vsock://2:1234"
        );
        for bad in ["vsock://2", "vsock://x:1", "vsock://1:99999999999"] {
            assert!(matches!(
                SockAddr::parse(bad),
                Err(SockAddrError::BadVsock(_))
            ));
        }
        assert_eq!(
            SockAddr::parse("127.0.0.1:32278"),
            Ok(SockAddr::Tcp("127.0.0.1:32278".into()))
        );
        assert_eq!(
            SockAddr::parse("[::1]:32278"),
            Ok(SockAddr::Tcp("[::1]:32278".into()))
        );
        assert_eq!(
            SockAddr::parse("[::1]:32278")
                .unwrap()
                .to_inet_addr()
                .unwrap(),
            "[::1]:32278".parse().unwrap()
        );
        assert!(SockAddr::parse("localhost:1").unwrap().is_network());
        // A path containing a colon is still a path.
        assert_eq!(
            SockAddr::parse("/tmp/a:1"),
            Ok(SockAddr::Path("/tmp/a:1".into()))
        );
        assert!(matches!(
            SockAddr::parse(&"x".repeat(108)),
            Err(SockAddrError::TooLong(_))
        ));
        assert!(SockAddr::parse(&format!("@{}", "x".repeat(107))).is_ok());
    }

    #[test]
    fn abstract_length_counts_leading_nul_only() {
        use nix::sys::socket::SockaddrLike;
        let a = SockAddr::parse("@abc").unwrap().to_unix_addr().unwrap();
        let sun_path_offset = std::mem::size_of::<libc::sa_family_t>();
        assert_eq!(a.len() as usize, sun_path_offset + 1 + 3);
        assert_eq!(a.as_abstract(), Some(&b"abc"[..]));
    }
}
