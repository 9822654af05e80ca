//! Opening the trace file the way upstream's client does.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;

use super::options::Output;

/// Opens `-o PATH` (created 0600, truncated, or exclusive with
/// `--no-clobber`) or duplicates stdout for `-o -`.
pub fn open(output: &Output) -> Result<File, String> {
    match output {
        Output::Stdout => io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map(File::from)
            .map_err(|e| format!("Could not duplicate stdout: {e}")),
        Output::File { path, no_clobber } => {
            let mut o = OpenOptions::new();
            o.read(true).write(true).mode(0o600);
            if *no_clobber {
                o.create_new(true);
            } else {
                o.create(true).truncate(true);
            }
            o.open(path).map_err(|e| match e.kind() {
                io::ErrorKind::AlreadyExists => {
                    format!("Failed to open {path}: it already exists (--no-clobber)")
                }
                _ => format!("Failed to open {path}: {e}"),
            })
        }
    }
}

/// Checks `-o PATH` before anything starts (no daemon is autostarted for
/// a trace that could not be written): the directory must exist, and with
/// `--no-clobber` the file must not. [`open`] still decides for real.
pub fn precheck(output: &Output) -> Result<(), String> {
    let Output::File { path, no_clobber } = output else {
        return Ok(());
    };
    let p = std::path::Path::new(path);
    if *no_clobber && p.symlink_metadata().is_ok() {
        return Err(format!(
            "Failed to open {path}: it already exists (--no-clobber)"
        ));
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "Failed to open {path}: {} is not a directory",
            dir.display()
        )),
        Err(e) => Err(format!(
            "Failed to open {path}: its directory {} cannot be used: {e}",
            dir.display()
        )),
    }
}

/// Removes an output file that ended up empty (service error, nothing
/// written), as upstream does. Only regular files: `-o /dev/null` or a
/// FIFO is never removed.
pub fn remove_if_empty(output: &Output) {
    if let Output::File { path, .. } = output {
        // Only a regular file: `-o /dev/null` (or a FIFO) is empty too, and
        // root would unlink the device.
        if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_empty_regular_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let file = dir.path().join("empty");
        std::fs::write(&file, b"").unwrap();
        for p in [&fifo, &file] {
            remove_if_empty(&Output::File {
                path: p.to_string_lossy().into_owned(),
                no_clobber: false,
            });
        }
        assert!(fifo.exists(), "a FIFO is not a trace file");
        assert!(!file.exists());
    }

    #[test]
    fn no_clobber_refuses_existing_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t").to_string_lossy().into_owned();
        std::fs::write(&path, b"old").unwrap();
        let err = open(&Output::File {
            path: path.clone(),
            no_clobber: true,
        })
        .unwrap_err();
        assert!(err.contains("already exists"), "{err}");
        open(&Output::File {
            path: path.clone(),
            no_clobber: false,
        })
        .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"", "truncated");
        remove_if_empty(&Output::File {
            path: path.clone(),
            no_clobber: false,
        });
        assert!(!std::path::Path::new(&path).exists());
    }

    #[test]
    fn precheck_names_a_missing_directory_and_an_existing_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = |p: &std::path::Path, no_clobber| Output::File {
            path: p.to_string_lossy().into_owned(),
            no_clobber,
        };
        let missing = dir.path().join("nodir/t.pftrace");
        let err = precheck(&file(&missing, false)).unwrap_err();
        assert!(
            err.contains("nodir") && err.contains("cannot be used"),
            "{err}"
        );
        let existing = dir.path().join("t");
        std::fs::write(&existing, b"old").unwrap();
        let err = precheck(&file(&existing, true)).unwrap_err();
        assert!(err.contains("already exists (--no-clobber)"), "{err}");
        precheck(&file(&existing, false)).unwrap();
        precheck(&Output::Stdout).unwrap();
        precheck(&Output::File {
            path: "bare-name".into(),
            no_clobber: false,
        })
        .unwrap();
    }

    #[test]
    fn files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t").to_string_lossy().into_owned();
        open(&Output::File {
            path: path.clone(),
            no_clobber: false,
        })
        .unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
