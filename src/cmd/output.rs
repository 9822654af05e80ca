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
