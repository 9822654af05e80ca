//! Who owns a tracefs instance (or the top-level one): the traced_probes
//! holding an exclusive `flock` on its lock file. The kernel drops the
//! lock when the owner dies, however it dies (SIGKILL included), and a
//! reused pid cannot inherit it, so "locked" means "a live owner".
//!
//! Lock files live in one directory per machine, named after the
//! instance (`top-level.lock`, `instance.NAME.lock`); they hold the
//! owner's pid, for messages only. The owner removes its file before it
//! unlocks, so a claim checks that the file it locked is still the one at
//! that path. Whoever takes over, resets or cleans
//! up an instance claims it first, and leaves it alone if it cannot.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// Overrides the lock directory. Every traced_probes of a machine must
/// use the same one, or their locks do not see each other.
pub const LOCK_DIR_ENV: &str = "TRACED_PROBES_LOCK_DIR";

pub fn lock_dir() -> PathBuf {
    pick_lock_dir(std::env::var_os(LOCK_DIR_ENV), |p| p.is_dir())
}

/// `$TRACED_PROBES_LOCK_DIR`, else `tracebox-ftrace` in the first of
/// /run, /tmp and Android's /data/local/tmp that exists (Android has
/// neither of the first two), else in /tmp (whose failure names it).
fn pick_lock_dir(env: Option<std::ffi::OsString>, is_dir: impl Fn(&Path) -> bool) -> PathBuf {
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let base = ["/run", "/tmp", "/data/local/tmp"]
        .into_iter()
        .map(Path::new)
        .find(|p| is_dir(p))
        .unwrap_or(Path::new("/tmp"));
    base.join("tracebox-ftrace")
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
    path: PathBuf,
    _lock: Flock<File>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Unlinked while still locked; the lock goes with the field.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Claims instance `key` for this process. Fails, naming the owner, if a
/// live process holds it.
/// An instance name that could leave the lock directory (`../../x`) is
/// refused before any path is built from it.
pub fn claim(key: &str) -> Result<Claim, String> {
    if !key.is_empty() {
        super::tracefs::check_instance_name(key).map_err(|e| e.to_string())?;
    }
    claim_at(lock_path(key), describe(key))
}

/// Claims the kprobe groups tagged `tag` (`perfetto_kprobes_TAG`...): held
/// while this process has probes in them, so a successor removes a dead
/// one's probes and never a live one's.
pub fn claim_kprobes(tag: &str) -> Result<Claim, String> {
    claim_at(
        lock_dir().join(format!("kprobes.{tag}.lock")),
        format!("kprobe groups {tag}"),
    )
}

fn claim_at(path: PathBuf, what: String) -> Result<Claim, String> {
    let open = || -> io::Result<File> {
        std::fs::create_dir_all(lock_dir())?;
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
    };
    for _ in 0..8 {
        let file = open().map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(mut lock) => {
                // The previous owner may have removed the file between our
                // open and our lock: then this lock guards nothing.
                let same = match (lock.metadata(), std::fs::metadata(&path)) {
                    (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
                    _ => false,
                };
                if !same {
                    continue;
                }
                // Informational: who holds it, for the next one's message.
                let _ = lock.set_len(0);
                let _ = lock.write_all(format!("{}\n", std::process::id()).as_bytes());
                return Ok(Claim { path, _lock: lock });
            }
            Err((file, Errno::EWOULDBLOCK)) => return Err(held_by(file, &what)),
            Err((_, e)) => return Err(format!("cannot lock {}: {e}", path.display())),
        }
    }
    Err(format!(
        "cannot lock {}: it keeps being replaced",
        path.display()
    ))
}

fn held_by(mut file: File, what: &str) -> String {
    let mut pid = String::new();
    let _ = file.read_to_string(&mut pid);
    let pid = pid.trim();
    let mut msg = if pid.is_empty() {
        format!("{what} is in use by another traced_probes")
    } else {
        format!("{what} is in use by another traced_probes (pid {pid})")
    };
    if what == describe("") {
        msg.push_str(TOP_LEVEL_FIX);
    }
    msg
}

/// What a user can do when another traced_probes owns the top level.
const TOP_LEVEL_FIX: &str = "; stop that recording, or record into a private instance (light mode: --ftrace-instance NAME; a config: ftrace_config { instance_name: \"NAME\" })";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_leaves_the_lock_dir_is_refused_before_any_path_is_built() {
        for bad in ["../../x", "..", ".", "a/b", "x\0y"] {
            let e = claim(bad).unwrap_err();
            assert_eq!(e, format!("bad instance name {bad:?}"));
        }
    }

    #[test]
    fn the_lock_dir_is_the_override_else_the_first_existing_base() {
        let only = |d: &'static str| move |p: &Path| p == Path::new(d);
        assert_eq!(
            pick_lock_dir(Some("/x/locks".into()), only("/run")),
            Path::new("/x/locks")
        );
        assert_eq!(
            pick_lock_dir(Some("".into()), only("/run")),
            Path::new("/run/tracebox-ftrace")
        );
        assert_eq!(
            pick_lock_dir(None, |p: &Path| p != Path::new("/run")),
            Path::new("/tmp/tracebox-ftrace")
        );
        assert_eq!(
            pick_lock_dir(None, only("/data/local/tmp")),
            Path::new("/data/local/tmp/tracebox-ftrace")
        );
        assert_eq!(
            pick_lock_dir(None, |_: &Path| false),
            Path::new("/tmp/tracebox-ftrace")
        );
    }
}
