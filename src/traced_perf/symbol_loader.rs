//! Loads files' symbol tables and unwind tables on a helper thread, so
//! that one huge ELF (a 100 MB library, 32 MiB of `.symtab`, 16 MiB of
//! `.eh_frame`) cannot hold a read pass or the stop past its deadline:
//! the pass waits for a file only until then, and a file that takes
//! longer finishes in the background and is picked up by a later pass.
//! One file at a time: memory stays that of one parse.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::elf::{self, ElfInfo, ReadAt, UnwindSections};
use super::resolver::MAX_UNWIND_SECTION;

/// A file's bytes through positioned reads.
pub struct FileReader(pub File);

impl ReadAt for FileReader {
    fn read_at(&self, off: u64, len: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.0.read_exact_at(&mut buf, off).ok()?;
        Some(buf)
    }
}

/// What the helper reads of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    Symbols,
    UnwindTables,
}

/// A path and what was read of it (empty when it is no ELF).
pub enum Loaded {
    Symbols(String, ElfInfo),
    UnwindTables(String, UnwindSections),
}

/// What the data source and the helper share (one lock and one condition
/// variable rather than two channels: less code in the binary).
#[derive(Default)]
struct Shared {
    jobs: VecDeque<(String, File, Want)>,
    done: VecDeque<Loaded>,
    /// The data source is gone: the helper ends.
    closed: bool,
}

struct Handoff {
    state: Mutex<Shared>,
    changed: Condvar,
}

impl Handoff {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The helper thread, started at the first file.
#[derive(Default)]
pub struct SymbolLoader {
    handoff: Option<Arc<Handoff>>,
    /// Paths sent and not yet back.
    in_flight: usize,
}

impl SymbolLoader {
    /// Queues `path` (open as `file`) for reading what is wanted. The file
    /// back if no thread could be started (the caller reads it itself).
    pub fn submit(&mut self, path: &str, file: File, want: Want) -> Result<(), File> {
        if self.handoff.is_none() && !self.start() {
            return Err(file);
        }
        let Some(h) = &self.handoff else {
            return Err(file);
        };
        h.lock().jobs.push_back((path.to_string(), file, want));
        h.changed.notify_all();
        self.in_flight += 1;
        Ok(())
    }

    fn start(&mut self) -> bool {
        let h = Arc::new(Handoff {
            state: Mutex::new(Shared::default()),
            changed: Condvar::new(),
        });
        let theirs = h.clone();
        let spawned = std::thread::Builder::new()
            .name("perf-symbols".into())
            .spawn(move || {
                crate::base::own_threads::register_current("perf-symbols");
                work(&theirs);
            });
        if spawned.is_err() {
            return false;
        }
        self.handoff = Some(h);
        true
    }

    /// Files handed over and not yet taken back.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// The next parsed file, waiting for it until `until` at most.
    pub fn next(&mut self, until: Instant) -> Option<Loaded> {
        if self.in_flight == 0 {
            return None;
        }
        let h = self.handoff.as_ref()?;
        let mut s = h.lock();
        loop {
            if let Some(r) = s.done.pop_front() {
                self.in_flight -= 1;
                return Some(r);
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            s = h
                .changed
                .wait_timeout(s, until - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

impl Drop for SymbolLoader {
    fn drop(&mut self) {
        if let Some(h) = &self.handoff {
            h.lock().closed = true;
            h.changed.notify_all();
        }
    }
}

/// The helper: reads queued files in order until the loader is dropped.
fn work(h: &Handoff) {
    let mut s = h.lock();
    loop {
        if s.closed {
            return;
        }
        let Some((path, f, want)) = s.jobs.pop_front() else {
            s = h.changed.wait(s).unwrap_or_else(|e| e.into_inner());
            continue;
        };
        drop(s);
        let f = FileReader(f);
        let done = match want {
            Want::Symbols => Loaded::Symbols(path, elf::parse(&f, true).unwrap_or_default()),
            Want::UnwindTables => Loaded::UnwindTables(
                path,
                elf::unwind_sections(&f, MAX_UNWIND_SECTION).unwrap_or_default(),
            ),
        };
        s = h.lock();
        s.done.push_back(done);
        h.changed.notify_all();
    }
}
