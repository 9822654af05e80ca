//! A small state file noting which tracefs instances we changed, so that a
//! run that died while tracing (SIGKILL, panic with abort) can be cleaned up
//! by the next start or by `--cleanup-after-crash`.
//!
//! One file per traced_probes, named after its producer socket: its
//! successor on the same socket cleans up after it, an unrelated
//! traced_probes never reads it. Cleanup claims each instance first
//! ([`ownership`](super::ownership)) and skips those a live process owns.
//!
//! Format, one entry per line: `root` (the top-level tracefs),
//! `instance NAME created|existing`, or `kprobe GROUP EVENT` (a kprobe
//! event we made, see [`kprobes`](super::kprobes)). The file exists only while some
//! instance is in use, and is rewritten whole (write + rename) on change.

use std::io;
use std::path::{Path, PathBuf};

use crate::traced_probes::ftrace::parse::kprobes::{group_tag, valid_function_untrusted};
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
    /// A kprobe event we made (removed after the instances are reset: the
    /// kernel refuses to remove one still enabled).
    Kprobe {
        group: String,
        event: String,
    },
}

/// Where the state file of the traced_probes producing into
/// `producer_socket` lives: `$TRACED_PROBES_STATE_FILE`, else next to the
/// ftrace lock files (in /run: cleared on reboot, like the kernel state
/// it describes), named after the socket.
pub fn default_path(producer_socket: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(STATE_FILE_ENV) {
        return PathBuf::from(p);
    }
    let name: String = producer_socket
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    super::ownership::lock_dir().join(format!("state.{name}"))
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
            Touched::Kprobe { group, event } => s.push_str(&format!("kprobe {group} {event}\n")),
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
                // Only names we could have written: the line goes back to
                // kprobe_events.
                (Some("kprobe"), Some(group), Some(event), None)
                    if group_tag(group).is_some() && valid_function_untrusted(event) =>
                {
                    Some(Touched::Kprobe {
                        group: group.to_string(),
                        event: event.to_string(),
                    })
                }
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
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format(entries))?;
    std::fs::rename(&tmp, path)
}

/// If a state file exists, resets everything it lists that no live
/// process owns (removing instances we had created) and deletes it.
/// Returns what was cleaned.
pub fn cleanup(path: &Path, root: &Tracefs) -> Vec<Touched> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    // Instances first: a probe still enabled in one cannot be removed.
    // (Each group keeps its file order.)
    let (mut cleaned, kprobes): (Vec<_>, Vec<_>) = parse(&text)
        .into_iter()
        .partition(|e| !matches!(e, Touched::Kprobe { .. }));
    cleaned.extend(kprobes);
    let mut kept = Vec::new();
    cleaned.retain(|e| {
        let key = match e {
            Touched::Root => "",
            Touched::Instance { name, .. } => name,
            Touched::Kprobe { group, event } => {
                return cleanup_kprobe(root, group, event, &mut kept, e);
            }
        };
        // Held until this entry is reset.
        let _claim = match super::ownership::claim(key) {
            Ok(c) => c,
            Err(why) => {
                crate::log_warn!("crash cleanup: leaving it alone: {why}");
                kept.push(e.clone());
                return false;
            }
        };
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
            Touched::Kprobe { .. } => unreachable!("handled above"),
        };
        if let Err(err) = r {
            crate::log_error!(
                "crash cleanup of {} failed: {err}",
                super::ownership::describe(key)
            );
        }
        true
    });
    // What a live process owns stays recorded, for a later cleanup.
    if let Err(e) = store(path, &kept) {
        crate::log_warn!("cannot rewrite {}: {e}", path.display());
    }
    cleaned
}

/// Removes a kprobe a dead traced_probes made, unless its tag is claimed
/// by a live one (then it stays recorded in `kept`).
fn cleanup_kprobe(
    root: &Tracefs,
    group: &str,
    event: &str,
    kept: &mut Vec<Touched>,
    entry: &Touched,
) -> bool {
    let Some(tag) = group_tag(group) else {
        return true; // parse() keeps no other group
    };
    let _claim = match super::ownership::claim_kprobes(tag) {
        Ok(c) => c,
        Err(why) => {
            crate::log_warn!("crash cleanup: leaving kprobe {group}/{event} alone: {why}");
            kept.push(entry.clone());
            return false;
        }
    };
    if let Err(err) = super::kprobes::remove_probe(root, group, event) {
        crate::log_error!("crash cleanup of kprobe {group}/{event} failed: {err}");
    }
    true
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
            Touched::Kprobe {
                group: "perfetto_kretprobes_42".into(),
                event: "vfs_read".into(),
            },
        ];
        assert_eq!(parse(&format(&e)), e);
        // Nothing but our groups and plain names goes back to tracefs.
        assert!(parse(
            "kprobe sched vfs_read\nkprobe perfetto_kprobes_1 a+4\nkprobe perfetto_kprobes_../x f\n"
        )
        .is_empty());
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
        std::env::set_var(
            super::super::ownership::LOCK_DIR_ENV,
            dir.path().join("locks"),
        );
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

        // A dead daemon's kprobe: removed through kprobe_events (a plain
        // file here, so the line the kernel would get is visible), after
        // the instances.
        std::fs::write(root.path("kprobe_events"), "").unwrap();
        let probe = Touched::Kprobe {
            group: "perfetto_kretprobes_4000000".into(),
            event: "vfs_read".into(),
        };
        store(&path, &[probe.clone(), Touched::Root]).unwrap();
        let cleaned = cleanup(&path, &root);
        assert_eq!(cleaned.last(), Some(&probe));
        assert_eq!(
            std::fs::read_to_string(root.path("kprobe_events")).unwrap(),
            "-:perfetto_kretprobes_4000000/vfs_read"
        );
        assert!(!path.exists());
    }
}
