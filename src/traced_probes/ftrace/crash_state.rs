//! A small state file noting which tracefs instances we changed, so that a
//! run that died while tracing (SIGKILL, panic with abort) can be cleaned up
//! by the next start or by `--cleanup-after-crash`.
//!
//! Format, one entry per line: `root` (the top-level tracefs) or
//! `instance NAME created|existing`. The file exists only while some
//! instance is in use, and is rewritten whole (write + rename) on change.

use std::io;
use std::path::{Path, PathBuf};

use crate::traced_probes::ftrace::Tracefs;

/// Overrides the state file path (tests use private paths).
pub const STATE_FILE_ENV: &str = "TRACED_PROBES_STATE_FILE";

/// One tracefs directory we touched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touched {
    Root,
    /// An instance, and whether we created (and must remove) it.
    Instance {
        name: String,
        created: bool,
    },
}

/// Where the state file lives: `$TRACED_PROBES_STATE_FILE`, else in /run
/// (cleared on reboot, like the kernel state it describes), else /tmp.
pub fn default_path() -> PathBuf {
    if let Some(p) = std::env::var_os(STATE_FILE_ENV) {
        return PathBuf::from(p);
    }
    if Path::new("/run").is_dir() {
        PathBuf::from("/run/tracebox-traced_probes.state")
    } else {
        PathBuf::from("/tmp/tracebox-traced_probes.state")
    }
}

pub fn format(entries: &[Touched]) -> String {
    let mut s = String::new();
    for e in entries {
        match e {
            Touched::Root => s.push_str("root\n"),
            Touched::Instance { name, created } => {
                let how = if *created { "created" } else { "existing" };
                s.push_str(&format!("instance {name} {how}\n"));
            }
        }
    }
    s
}

/// Parses the state file; unknown or malformed lines are skipped (it may be
/// from another version, or truncated by the crash).
pub fn parse(text: &str) -> Vec<Touched> {
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            match (w.next(), w.next(), w.next(), w.next()) {
                (Some("root"), None, _, _) => Some(Touched::Root),
                (Some("instance"), Some(name), Some(how), None) => Some(Touched::Instance {
                    name: name.to_string(),
                    created: how == "created",
                }),
                _ => None,
            }
        })
        .collect()
}

/// Records `entries` (or removes the file when empty).
pub fn store(path: &Path, entries: &[Touched]) -> io::Result<()> {
    if entries.is_empty() {
        return match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format(entries))?;
    std::fs::rename(&tmp, path)
}

/// If a state file exists, resets everything it lists (removing instances
/// we had created) and deletes it. Returns what was cleaned.
pub fn cleanup(path: &Path, root: &Tracefs) -> Vec<Touched> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let entries = parse(&text);
    for e in &entries {
        let r = match e {
            Touched::Root => root.reset(4),
            Touched::Instance { name, created } => root.instance(name).and_then(|t| {
                if !t.root().is_dir() {
                    return Ok(());
                }
                t.reset(4)?;
                if *created {
                    root.remove_instance(name)?;
                }
                Ok(())
            }),
        };
        if let Err(err) = r {
            crate::log_error!("crash cleanup of {e:?} failed: {err}");
        }
    }
    let _ = std::fs::remove_file(path);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let e = vec![
            Touched::Root,
            Touched::Instance {
                name: "a".into(),
                created: true,
            },
            Touched::Instance {
                name: "b".into(),
                created: false,
            },
        ];
        assert_eq!(parse(&format(&e)), e);
        assert_eq!(
            parse("junk\ninstance x\nroot extra\ninstance y created\n"),
            vec![Touched::Instance {
                name: "y".into(),
                created: true
            }]
        );
    }

    #[test]
    fn store_and_cleanup_on_a_fake_root() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        let root = Tracefs::new(dir.path().join("tracefs"));
        std::fs::create_dir_all(root.path("instances/x")).unwrap();
        store(
            &path,
            &[Touched::Instance {
                name: "x".into(),
                created: true,
            }],
        )
        .unwrap();
        assert!(path.exists());
        // The fake instance cannot be "reset" (no control files): the error
        // is logged, the state file still goes away.
        let cleaned = cleanup(&path, &root);
        assert_eq!(cleaned.len(), 1);
        assert!(!path.exists());
        store(&path, &[]).unwrap();
        assert!(cleanup(&path, &root).is_empty());
    }
}
