//! `tracebox [perfetto args]`: use the running traced, or start traced,
//! traced_probes and traced_perf when none answers.
//!
//! Unlike upstream, the default is the system sockets, so Perfetto SDK apps
//! on the board find this service and join the trace. `--private-sockets`
//! restores upstream's isolated `@traced-{c,p}-<pid>` names.
//!
//! Lifetime: the daemons we start outlive us while anyone uses them.
//! traced runs with `--exit-when-idle` (it exits once no consumer is
//! connected and no session is left, attached or detached) and
//! traced_probes with `--exit-with-traced` (it restores ftrace and exits
//! when traced goes). The client holds a bound consumer connection (the
//! keepalive) from the moment it picks a service until it exits, so the
//! service it picked cannot go idle under it; a traced that is already
//! closing refuses the bind, and the client starts fresh daemons instead.

use std::time::Duration;

use super::rpc::Port;
use crate::base::child_process::{exec_failed, spawn_applet, stop_daemons};
use crate::base::sock_addr::SockAddr;
use crate::base::unix_socket::UnixStream;

pub const CONSUMER_ENV: &str = "PERFETTO_CONSUMER_SOCK_NAME";
pub const PRODUCER_ENV: &str = "PERFETTO_PRODUCER_SOCK_NAME";
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Attempts at finding or starting a service (a closing traced may hold
/// its socket name for a moment).
const ATTEMPTS: u32 = 5;

/// The service this client uses, held for the client's lifetime.
pub struct Autostarted {
    /// Keeps the service from going idle while this client runs.
    _keepalive: Port,
    /// What the client says first: who started the daemons, which pids.
    pub first_line: String,
}

/// Autostart re-executes this binary. Under qemu-user without binfmt_misc
/// the kernel cannot run it (ENOEXEC, or a glibc child's exit 127): say
/// what to do instead.
fn explain(e: std::io::Error) -> String {
    if exec_failed(&e) {
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

/// The pid of the process listening on `name` (0 if unknown).
fn service_pid(name: &str) -> i32 {
    SockAddr::parse(name)
        .ok()
        .and_then(|a| UnixStream::connect(&a).ok())
        .and_then(|s| s.peer_cred().ok())
        .map_or(0, |c| c.pid)
}

/// Binds a running service on `consumer_socket`, or starts traced, then
/// `traced_probes --reset-ftrace` and traced_perf, and binds that.
pub fn ensure_daemons(consumer_socket: &str) -> Result<Autostarted, String> {
    let mut last_err = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            std::thread::sleep(Duration::from_millis(100 << attempt.min(3)));
        }
        match Port::connect(consumer_socket, "ConsumerPort") {
            Ok(port) => {
                let pid = service_pid(consumer_socket);
                return Ok(Autostarted {
                    _keepalive: port,
                    first_line: format!(
                        "tracebox: using the running traced (pid {pid}) on {consumer_socket}"
                    ),
                });
            }
            // A service runs there, but not for this user: starting another
            // one cannot help.
            Err(e) if e.starts_with("Permission denied") => return Err(e),
            Err(_) => {}
        }
        match start_daemons(consumer_socket) {
            Ok(s) => return Ok(s),
            Err(e) => last_err = e,
        }
    }
    Err(last_err)
}

fn start_daemons(consumer_socket: &str) -> Result<Autostarted, String> {
    // The client reports what matters; daemons we start for it only speak
    // up about problems unless the user asked for more.
    if std::env::var_os("TRACEBOX_LOG").is_none() {
        std::env::set_var("TRACEBOX_LOG", "warn");
    }
    let mut traced = spawn_applet(
        "traced",
        &["--exit-when-idle"],
        0,
        "TRACED_NOTIFY_FD",
        READY_TIMEOUT,
    )
    .map_err(explain)?;
    let pgid = traced.child.id() as i32;
    // Bound before traced_probes starts: from here on traced waits for us.
    let port = match Port::connect(consumer_socket, "ConsumerPort") {
        Ok(p) => p,
        Err(e) => {
            stop_daemons(std::slice::from_mut(&mut traced), STOP_GRACE);
            return Err(e);
        }
    };
    let probes = spawn_applet(
        "traced_probes",
        &["--reset-ftrace", "--exit-with-traced"],
        pgid,
        "TRACED_PROBES_NOTIFY_FD",
        READY_TIMEOUT,
    )
    .map_err(explain)?;
    let perf = spawn_applet(
        "traced_perf",
        &["--exit-with-traced"],
        pgid,
        "TRACED_PERF_NOTIFY_FD",
        READY_TIMEOUT,
    )
    .map_err(explain)?;
    Ok(Autostarted {
        _keepalive: port,
        first_line: format!(
            "tracebox: started traced (pid {pgid}), traced_probes (pid {}) and traced_perf \
             (pid {}) on {consumer_socket}; they exit once no session or client is left",
            probes.child.id(),
            perf.child.id()
        ),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn exec_format_error_is_explained() {
        let e = std::io::Error::from_raw_os_error(nix::errno::Errno::ENOEXEC as i32);
        let text = super::explain(e);
        assert!(text.contains("Exec format error"), "{text}");
        assert!(text.contains("binfmt_misc") && text.contains("traced --background"));
        let spawned = std::io::Error::other(crate::base::child_process::ExecFailed("traced"));
        let text = super::explain(spawned);
        assert!(
            text.contains("traced did not start: it could not be executed (exit status 127)"),
            "{text}"
        );
        assert!(text.contains("binfmt_misc") && text.contains("traced --background"));
        let other = super::explain(std::io::Error::other("boom"));
        assert_eq!(other, "boom");
    }
}
