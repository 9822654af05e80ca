//! The helper threads this process started, by tid, so process_stats can
//! describe them as threads of this process after they exited (a short
//! lived loader that ftrace saw run is otherwise a nameless "process").

use std::sync::Mutex;

/// Bounded: a handful of helpers per daemon.
const MAX: usize = 64;

static THREADS: Mutex<Vec<(i32, String)>> = Mutex::new(Vec::new());

/// Records the calling thread under `name`.
pub fn register_current(name: &str) {
    let tid = nix::unistd::gettid().as_raw();
    let mut t = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    if t.len() < MAX && !t.iter().any(|(id, _)| *id == tid) {
        t.push((tid, name.to_owned()));
    }
}

/// The name of our helper thread `tid`, if it is one.
pub fn name_of(tid: i32) -> Option<String> {
    let t = THREADS.lock().unwrap_or_else(|e| e.into_inner());
    t.iter().find(|(id, _)| *id == tid).map(|(_, n)| n.clone())
}

/// This process's id.
pub fn own_pid() -> i32 {
    std::process::id() as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registered_thread_is_found_by_its_tid() {
        let tid = std::thread::spawn(|| {
            register_current("tbx-test-helper");
            nix::unistd::gettid().as_raw()
        })
        .join()
        .unwrap();
        assert_eq!(name_of(tid).as_deref(), Some("tbx-test-helper"));
        assert_eq!(name_of(-1), None);
    }
}
