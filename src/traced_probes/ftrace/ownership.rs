//! Who owns a tracefs instance (or the top-level one): the traced_probes
//! holding an exclusive `flock` on its lock file. The kernel drops the
//! lock when the owner dies, however it dies (SIGKILL included), and a
//! reused pid cannot inherit it, so "locked" means "a live owner".
//!
//! Lock files live in one directory per machine, named after the
//! instance (`top-level.lock`, `instance.NAME.lock`); they hold the
//! owner's pid, for messages only. Whoever takes over, resets or cleans
//! up an instance claims it first, and leaves it alone if it cannot.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Overrides the lock directory (default: /run/tracebox-ftrace, else
/// /tmp/tracebox-ftrace).
pub const LOCK_DIR_ENV: &str = "TRACED_PROBES_LOCK_DIR";

pub fn lock_dir() -> PathBuf {
    if let Some(p) = std::env::var_os(LOCK_DIR_ENV) {
        return PathBuf::from(p);
    }
    if Path::new("/run").is_dir() {
        PathBuf::from("/run/tracebox-ftrace")
    } else {
        PathBuf::from("/tmp/tracebox-ftrace")
    }
}

/// How an instance is named in messages (`""` is the top-level one).
pub fn describe(key: &str) -> String {
    if key.is_empty() {
        "the top-level ftrace instance".into()
    } else {
        format!("ftrace instance {key}")
    }
}

fn lock_path(key: &str) -> PathBuf {
    let name = if key.is_empty() {
        "top-level.lock".to_string()
    } else {
        format!("instance.{key}.lock")
    };
    lock_dir().join(name)
}

/// A held claim on one instance; dropping it (or dying) releases it.
#[derive(Debug)]
pub struct Claim {
    _lock: Flock<File>,
}

/// Claims instance `key` for this process. Fails, naming the owner, if a
/// live process holds it.
pub fn claim(key: &str) -> Result<Claim, String> {
    let path = lock_path(key);
    let what = describe(key);
    let open = || -> io::Result<File> {
        std::fs::create_dir_all(lock_dir())?;
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
    };
    let file = open().map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(mut lock) => {
            // Informational: who holds it, for the next one's message.
            let _ = lock.set_len(0);
            let _ = lock.write_all(format!("{}\n", std::process::id()).as_bytes());
            Ok(Claim { _lock: lock })
        }
        Err((mut file, Errno::EWOULDBLOCK)) => {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            let pid = pid.trim();
            let who = if pid.is_empty() {
                "another traced_probes".to_string()
            } else {
                format!("another traced_probes (pid {pid})")
            };
            Err(format!("{what} is in use by {who}"))
        }
        Err((_, e)) => Err(format!("cannot lock {}: {e}", path.display())),
    }
}
