//! Where traced listens and clients connect by default (Perfetto's rules).
//!
//! | | producer | consumer |
//! |---|---|---|
//! | Linux, `/run/perfetto/` searchable | `/run/perfetto/traced-producer.sock` | `/run/perfetto/traced-consumer.sock` |
//! | Linux otherwise | `/tmp/perfetto-producer` | `/tmp/perfetto-consumer` |
//! | Android | `/dev/socket/traced_producer` | `/dev/socket/traced_consumer` |
//!
//! `PERFETTO_PRODUCER_SOCK_NAME` / `PERFETTO_CONSUMER_SOCK_NAME` override
//! them. For the producer socket the host side accepts a comma-separated
//! list and listens on each; clients use the variable as a whole.

use std::io;

use crate::base::unix_socket::UnixListener;

/// Env var overriding the producer socket(s).
pub const PRODUCER_SOCK_ENV: &str = "PERFETTO_PRODUCER_SOCK_NAME";
/// Env var overriding the consumer socket.
pub const CONSUMER_SOCK_ENV: &str = "PERFETTO_CONSUMER_SOCK_NAME";

#[cfg(not(target_os = "android"))]
fn use_run_perfetto() -> bool {
    use std::sync::OnceLock;
    // Decided once per process so client and host in one process agree.
    static USE_RUN: OnceLock<bool> = OnceLock::new();
    *USE_RUN.get_or_init(|| {
        nix::unistd::access("/run/perfetto/", nix::unistd::AccessFlags::X_OK).is_ok()
    })
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Built-in producer socket name (ignoring the env override).
pub fn default_producer_socket() -> &'static str {
    #[cfg(target_os = "android")]
    return "/dev/socket/traced_producer";
    #[cfg(not(target_os = "android"))]
    if use_run_perfetto() {
        "/run/perfetto/traced-producer.sock"
    } else {
        "/tmp/perfetto-producer"
    }
}

/// Built-in consumer socket name (ignoring the env override).
pub fn default_consumer_socket() -> &'static str {
    #[cfg(target_os = "android")]
    return "/dev/socket/traced_consumer";
    #[cfg(not(target_os = "android"))]
    if use_run_perfetto() {
        "/run/perfetto/traced-consumer.sock"
    } else {
        "/tmp/perfetto-consumer"
    }
}

/// Producer socket a client connects to: the env value as a whole, or the default.
pub fn producer_socket_name() -> String {
    env_nonempty(PRODUCER_SOCK_ENV).unwrap_or_else(|| default_producer_socket().to_string())
}

/// Producer sockets the host listens on: the env value split at commas
/// (empty items skipped), or the default.
pub fn producer_socket_names() -> Vec<String> {
    split_socket_list(&producer_socket_name())
}

/// Consumer socket name: env override or the default.
pub fn consumer_socket_name() -> String {
    env_nonempty(CONSUMER_SOCK_ENV).unwrap_or_else(|| default_consumer_socket().to_string())
}

fn split_socket_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Adopts a listening socket that Android init created for service
/// socket `name` (env `ANDROID_SOCKET_<name>` holds its fd number).
/// `None` if the variable is absent.
///
/// Call at most once per name, early in `main`: the fd is taken over and
/// closed when the listener drops.
pub fn adopt_android_socket(name: &str) -> Option<io::Result<UnixListener>> {
    let value = std::env::var(format!("ANDROID_SOCKET_{name}")).ok()?;
    let fd_untrusted: i32 = match value.trim().parse() {
        Ok(fd) => fd,
        Err(_) => {
            return Some(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("ANDROID_SOCKET_{name}={value:?} is not an fd number"),
            )))
        }
    };
    Some(
        UnixListener::adopt_inherited(fd_untrusted)
            .map_err(|e| io::Error::new(e.kind(), format!("ANDROID_SOCKET_{name}: {e}"))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_comma_lists() {
        assert_eq!(split_socket_list("/a,@b, ,/c"), vec!["/a", "@b", "/c"]);
        assert_eq!(split_socket_list("/only"), vec!["/only"]);
    }

    #[test]
    #[cfg(not(target_os = "android"))]
    fn default_follows_run_perfetto() {
        let run = std::path::Path::new("/run/perfetto").is_dir();
        assert_eq!(default_producer_socket().starts_with("/run/perfetto/"), run);
        assert_eq!(default_consumer_socket().starts_with("/run/perfetto/"), run);
    }

    #[test]
    fn adopts_an_inherited_listener() {
        use crate::base::sock_addr::SockAddr;
        use std::os::fd::AsRawFd;
        let name = format!("tracebox-adopt-{}", std::process::id());
        let l = UnixListener::bind(&SockAddr::Abstract(name.clone().into_bytes())).unwrap();
        let raw = nix::unistd::dup(l.as_raw_fd()).unwrap();
        drop(l);
        // Simulate init: only this test touches this variable name.
        let var = format!("tracebox_adopt_{}", std::process::id());
        std::env::set_var(format!("ANDROID_SOCKET_{var}"), raw.to_string());
        let adopted = adopt_android_socket(&var).unwrap().unwrap();
        let _c =
            crate::base::unix_socket::UnixStream::connect(&SockAddr::Abstract(name.into_bytes()))
                .unwrap();
        crate::base::unix_socket::wait_ready(std::os::fd::AsFd::as_fd(&adopted), true, false, None)
            .unwrap();
        assert!(adopted.accept().unwrap().is_some());
        assert!(adopt_android_socket("tracebox_never_set").is_none());
        std::env::set_var("ANDROID_SOCKET_tracebox_bad", "x");
        assert!(adopt_android_socket("tracebox_bad").unwrap().is_err());
        // An open fd that is not a listening socket is refused (and left open).
        let file = std::fs::File::open("/dev/null").unwrap();
        std::env::set_var("ANDROID_SOCKET_tracebox_file", file.as_raw_fd().to_string());
        assert!(adopt_android_socket("tracebox_file").unwrap().is_err());
        assert!(nix::fcntl::fcntl(file.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD).is_ok());
    }
}
