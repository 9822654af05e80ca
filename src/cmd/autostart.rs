//! `tracebox [perfetto args]`: start traced and traced_probes when no
//! service answers, run the client, then stop what we started.
//!
//! Unlike upstream, the default is the system sockets, so Perfetto SDK apps
//! on the board find this service and join the trace. `--private-sockets`
//! restores upstream's isolated `@traced-{c,p}-<pid>` names.

use std::time::Duration;

use crate::base::child_process::{spawn_applet, stop_daemons, Daemon};
use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::UnixStream;

pub const CONSUMER_ENV: &str = "PERFETTO_CONSUMER_SOCK_NAME";
pub const PRODUCER_ENV: &str = "PERFETTO_PRODUCER_SOCK_NAME";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Daemons started for one client run; stopped on drop.
#[derive(Debug)]
pub struct Autostarted {
    pgid: i32,
    daemons: Vec<Daemon>,
}

impl Drop for Autostarted {
    fn drop(&mut self) {
        if !self.daemons.is_empty() {
            stop_daemons(&mut self.daemons, STOP_GRACE);
        }
    }
}

/// Autostart re-executes this binary. Under qemu-user without binfmt_misc
/// the kernel cannot run it (ENOEXEC): say what to do instead.
fn explain(e: std::io::Error) -> String {
    if e.raw_os_error() == Some(nix::errno::Errno::ENOEXEC as i32) {
        return format!(
            "{e}: this binary cannot start itself again, as happens under an emulator \
             (qemu-user) without binfmt_misc. Register the emulator with binfmt_misc, or \
             start the daemons by hand under it (`tracebox traced --background` and \
             `tracebox traced_probes --background`) and run the client with `tracebox \
             perfetto ...`"
        );
    }
    e.to_string()
}

/// True if something accepts connections on `name`.
pub fn service_answers(name: &str) -> bool {
    SockAddr::parse(name).is_ok_and(|a| UnixStream::connect(&a).is_ok())
}

/// Picks private socket names (unless the environment already names some)
/// and exports them, so the client and the daemons agree.
pub fn use_private_sockets() {
    let pid = std::process::id();
    if std::env::var_os(CONSUMER_ENV).is_none() {
        std::env::set_var(CONSUMER_ENV, format!("@traced-c-{pid}"));
    }
    if std::env::var_os(PRODUCER_ENV).is_none() {
        std::env::set_var(PRODUCER_ENV, format!("@traced-p-{pid}"));
    }
}

/// Starts traced, then `traced_probes --reset-ftrace`, unless a service
/// already answers on `consumer_socket`. traced removes a stale socket file
/// nobody answers on before it binds.
pub fn ensure_daemons(consumer_socket: &str) -> Result<Autostarted, String> {
    let mut started = Autostarted {
        pgid: 0,
        daemons: Vec::new(),
    };
    match SockAddr::parse(consumer_socket).map(|a| UnixStream::connect(&a)) {
        Ok(Ok(_)) => return Ok(started),
        // A service runs but does not admit this user: starting another
        // would only fail to take over its socket.
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::PermissionDenied => return Err(e.to_string()),
        _ => {}
    }
    // The client reports what matters; daemons we start for it only speak
    // up about problems unless the user asked for more.
    if std::env::var_os("TRACEBOX_LOG").is_none() {
        std::env::set_var("TRACEBOX_LOG", "warn");
    }
    let traced =
        spawn_applet("traced", &[], 0, "TRACED_NOTIFY_FD", READY_TIMEOUT).map_err(explain)?;
    started.pgid = traced.child.id() as i32;
    started.daemons.push(traced);
    let probes = spawn_applet(
        "traced_probes",
        &["--reset-ftrace"],
        started.pgid,
        "TRACED_PROBES_NOTIFY_FD",
        READY_TIMEOUT,
    )
    .map_err(explain)?;
    started.daemons.push(probes);
    Ok(started)
}

#[cfg(test)]
mod tests {
    #[test]
    fn exec_format_error_is_explained() {
        let e = std::io::Error::from_raw_os_error(nix::errno::Errno::ENOEXEC as i32);
        let text = super::explain(e);
        assert!(text.contains("Exec format error"), "{text}");
        assert!(text.contains("binfmt_misc") && text.contains("traced --background"));
        let other = super::explain(std::io::Error::other("boom"));
        assert_eq!(other, "boom");
    }
}
