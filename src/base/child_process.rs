//! Spawning our own applets as daemons (tracebox autostart).
//!
//! A child is this same executable started under an applet name (argv[0]),
//! in a chosen process group (not the caller's, so a Ctrl-C meant for the
//! caller does not reach it), with stdout on /dev/null, and handed the
//! write end of a pipe in an environment variable. It writes "1" there
//! when ready. It outlives us: daemons decide themselves when to exit.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::unix_socket::wait_ready;

/// A daemon we started and must stop.
#[derive(Debug)]
pub struct Daemon {
    pub name: &'static str,
    pub child: Child,
}

/// Starts `applet` from this executable with `args`, in process group
/// `pgid` (0 = a new group led by the child), passing a ready pipe in
/// `notify_env`. Returns once the child reported ready, or errs after
/// `timeout` or if it exits first.
pub fn spawn_applet(
    applet: &'static str,
    args: &[&str],
    pgid: i32,
    notify_env: &str,
    timeout: Duration,
) -> io::Result<Daemon> {
    let exe = std::env::current_exe()?;
    let (read_end, write_end) = nix::unistd::pipe()?;
    // The read end stays here; the write end must survive exec.
    fcntl(read_end.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC))?;
    let mut cmd = Command::new(&exe);
    cmd.arg0(applet)
        .args(args)
        .env(notify_env, write_end.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .process_group(pgid);
    // The client blocks SIGINT/SIGTERM (it reads them from a signalfd) and
    // a blocked mask survives exec: the daemon starts with none blocked.
    // The hook then execs itself with execve: std's own exec is execvp,
    // which glibc retries through /bin/sh on ENOEXEC (a foreign binary
    // under qemu-user without binfmt_misc), hiding the Exec format error.
    let notify = (notify_env, write_end.as_raw_fd().to_string());
    let exec = ExecArgs::new(&exe, applet, args, notify)?;
    // SAFETY: between fork and exec only async-signal-safe calls happen:
    // sigprocmask and execve on pointers built before the fork.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::signal::sigprocmask(
                nix::sys::signal::SigmaskHow::SIG_SETMASK,
                Some(&nix::sys::signal::SigSet::empty()),
                None,
            )
            .map_err(io::Error::from)?;
            Err(exec.execv())
        });
    }
    let mut child = cmd.spawn()?;
    drop(write_end);
    match wait_for_ready(read_end, timeout) {
        Ok(()) => Ok(Daemon {
            name: applet,
            child,
        }),
        Err(e) => {
            let _ = child.kill();
            if child
                .wait()
                .is_ok_and(|s| s.code() == Some(EXEC_FAILED_STATUS))
            {
                return Err(io::Error::other(ExecFailed(applet)));
            }
            Err(io::Error::new(
                e.kind(),
                format!("{applet} did not start: {e}"),
            ))
        }
    }
}

/// The path and argv of a child's execv, built before the fork.
struct ExecArgs {
    path: std::ffi::CString,
    _args: Vec<std::ffi::CString>,
    /// Pointers into `_args`, null-terminated.
    argv: Vec<*const libc::c_char>,
    _env: Vec<std::ffi::CString>,
    /// Pointers into `_env` (ours plus the ready pipe's variable).
    envp: Vec<*const libc::c_char>,
}

// SAFETY: the pointers point into `_args`, which the struct owns and never
// changes; they are read only by the child after the fork.
unsafe impl Send for ExecArgs {}
// SAFETY: as above: never written after construction.
unsafe impl Sync for ExecArgs {}

impl ExecArgs {
    fn new(
        exe: &std::path::Path,
        applet: &str,
        args: &[&str],
        notify: (&str, String),
    ) -> io::Result<ExecArgs> {
        use std::os::unix::ffi::OsStrExt;
        let c = |b: &[u8]| std::ffi::CString::new(b).map_err(io::Error::other);
        let path = c(exe.as_os_str().as_bytes())?;
        let mut all = vec![c(applet.as_bytes())?];
        for a in args {
            all.push(c(a.as_bytes())?);
        }
        let mut env = Vec::new();
        for (k, v) in std::env::vars_os() {
            if k.as_bytes() != notify.0.as_bytes() {
                env.push(c(&[k.as_bytes(), b"=", v.as_bytes()].concat())?);
            }
        }
        env.push(c(format!("{}={}", notify.0, notify.1).as_bytes())?);
        let pointers = |v: &[std::ffi::CString]| {
            let mut p: Vec<*const libc::c_char> = v.iter().map(|a| a.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        Ok(ExecArgs {
            path,
            argv: pointers(&all),
            _args: all,
            envp: pointers(&env),
            _env: env,
        })
    }

    /// Replaces this process (in the child, after the fork); returns only
    /// on failure.
    fn execv(&self) -> io::Error {
        // SAFETY: `path` is a valid C string, `argv` and `envp`
        // null-terminated arrays of them, all owned by `self`.
        unsafe { libc::execve(self.path.as_ptr(), self.argv.as_ptr(), self.envp.as_ptr()) };
        io::Error::last_os_error()
    }
}

/// What a spawned child exits with when its exec fails after the spawn
/// has returned (glibc's posix_spawn; our applets never exit with it).
const EXEC_FAILED_STATUS: i32 = 127;

/// A daemon that exited with status 127 before it was ready: its exec
/// failed. Under qemu-user, glibc's posix_spawn cannot hand the exec's
/// errno back (the emulator runs its CLONE_VM child as a fork), so this is
/// how an ENOEXEC shows there.
#[derive(Debug)]
pub struct ExecFailed(pub &'static str);

impl std::fmt::Display for ExecFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} did not start: it could not be executed (exit status {EXEC_FAILED_STATUS})",
            self.0
        )
    }
}

impl std::error::Error for ExecFailed {}

/// Whether `e` says the kernel would not execute this binary: ENOEXEC
/// from the spawn, or [`ExecFailed`].
pub fn exec_failed(e: &io::Error) -> bool {
    e.raw_os_error() == Some(nix::errno::Errno::ENOEXEC as i32)
        || e.get_ref().is_some_and(|i| i.is::<ExecFailed>())
}

/// Reads the readiness byte: "1" means ready; EOF means the child died.
fn wait_for_ready(read_end: OwnedFd, timeout: Duration) -> io::Result<()> {
    if !wait_ready(read_end.as_fd(), true, false, Some(timeout))? {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no ready notification in time",
        ));
    }
    let mut buf = [0u8; 1];
    match File::from(read_end).read(&mut buf)? {
        1 if buf[0] == b'1' => Ok(()),
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "it exited before it was ready",
        )),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected ready notification",
        )),
    }
}

/// Stops the daemons in reverse start order (SIGTERM, up to `grace`
/// each, then SIGKILL), so a producer leaves before the service it talks
/// to and can clean up (e.g. reset ftrace) without reconnect noise.
pub fn stop_daemons(daemons: &mut [Daemon], grace: Duration) {
    for d in daemons.iter_mut().rev() {
        let _ = nix::sys::signal::kill(Pid::from_raw(d.child.id() as i32), Signal::SIGTERM);
        let deadline = std::time::Instant::now() + grace;
        loop {
            match d.child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if std::time::Instant::now() >= deadline => {
                    let _ = d.child.kill();
                    let _ = d.child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    }
}

/// systemd's readiness protocol (`Type=notify`): one `READY=1` datagram
/// to `$NOTIFY_SOCKET` (a path, or `@name` for an abstract socket). The
/// variable is removed so that children do not report for us.
fn notify_systemd() {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    std::env::remove_var("NOTIFY_SOCKET");
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
    let sent = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|a| sock.send_to_addr(b"READY=1", &a))
        }
        None => sock.send_to(b"READY=1", &target),
    };
    if let Err(e) = sent {
        crate::log_warn!("NOTIFY_SOCKET {}: {e}", target.to_string_lossy());
    }
}

/// Writes "1" to the fd named by `env` (if set) and closes it: the
/// readiness protocol of the daemon side. Also tells systemd when it
/// started us (`NOTIFY_SOCKET`).
pub fn notify_ready(env: &str) {
    notify_systemd();
    let Some(fd) = std::env::var(env).ok().and_then(|v| v.parse::<i32>().ok()) else {
        return;
    };
    // Only an fd number handed to us by our parent; refuse stdio.
    if fd <= 2 {
        return;
    }
    // SAFETY: the parent passed this fd for our exclusive use; we take
    // ownership exactly once (the variable is removed below).
    let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    std::env::remove_var(env);
    let mut f = File::from(owned);
    let _ = std::io::Write::write_all(&mut f, b"1");
}
