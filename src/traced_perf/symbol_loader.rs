//! Loads files' symbol tables on a helper thread, so that one huge ELF (a
//! 100 MB library, 32 MiB of `.symtab`) cannot hold a read pass or the
//! stop past its deadline: the pass waits for a file only until then, and
//! a file that takes longer finishes in the background and is picked up
//! by a later pass. One file at a time: memory stays that of one parse.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

use super::elf::{self, ElfInfo, ReadAt};

/// A file's bytes through positioned reads.
pub struct FileReader(pub File);

impl ReadAt for FileReader {
    fn read_at(&self, off: u64, len: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.0.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    }
}

/// A path and its parsed file (empty when it is no ELF).
pub type Loaded = (String, ElfInfo);

/// The helper thread, started at the first file.
#[derive(Default)]
pub struct SymbolLoader {
    jobs: Option<Sender<(String, File)>>,
    done: Option<Receiver<Loaded>>,
    /// Paths sent and not yet back.
    pub in_flight: usize,
}

impl SymbolLoader {
    /// Queues `path` (open as `file`) for parsing. False if no thread could
    /// be started (the caller parses it itself).
    pub fn submit(&mut self, path: &str, file: File) -> bool {
        if self.jobs.is_none() && !self.start() {
            return false;
        }
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|j| j.send((path.to_string(), file)).is_ok());
        self.in_flight += sent as usize;
        sent
    }

    fn start(&mut self) -> bool {
        let (jobs, rx) = mpsc::channel::<(String, File)>();
        let (tx, done) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("perf-symbols".into())
            .spawn(move || {
                crate::base::own_threads::register_current("perf-symbols");
                // Ends when the data source drops its sender.
                for (path, f) in rx {
                    let info = elf::parse(&FileReader(f), true).unwrap_or_default();
                    if tx.send((path, info)).is_err() {
                        break;
                    }
                }
            });
        if spawned.is_err() {
            return false;
        }
        self.jobs = Some(jobs);
        self.done = Some(done);
        true
    }

    /// The next parsed file, waiting for it until `until` at most.
    pub fn next(&mut self, until: Instant) -> Option<Loaded> {
        if self.in_flight == 0 {
            return None;
        }
        let done = self.done.as_ref()?;
        let wait = until.saturating_duration_since(Instant::now());
        let r = match done.recv_timeout(wait) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => return None,
            Err(RecvTimeoutError::Disconnected) => {
                // The thread died: nothing more comes back.
                self.in_flight = 0;
                return None;
            }
        };
        self.in_flight -= 1;
        Some(r)
    }
}
