//! Loading `/proc/kallsyms` into the compact table
//! ([`KernelSymbols`]), on a thread of its own so that starting a session
//! does not wait for it (parsing and deflating ~120k symbols takes a
//! while, longer than a drain period on a small board).

use crate::traced_probes::ftrace::parse::ksyms::{KernelSymbols, LazySymbols};

/// Reads and parses `/proc/kallsyms`. Empty (not an error) when the kernel
/// hides addresses.
pub fn load_kallsyms() -> std::io::Result<KernelSymbols> {
    Ok(KernelSymbols::parse(&std::fs::read("/proc/kallsyms")?))
}

/// [`load_kallsyms`], saying in the log (lines starting with `who`) why
/// the table is empty.
fn load_logged(who: &str) -> KernelSymbols {
    match load_kallsyms() {
        Ok(k) => {
            if k.is_empty() {
                crate::log_warn!("{who}: no kernel symbols (kptr_restrict?)");
            }
            k
        }
        Err(e) => {
            crate::log_warn!("{who}: cannot read /proc/kallsyms: {e}");
            KernelSymbols::default()
        }
    }
}

/// Starts loading the table on a thread; the first lookup that needs a
/// name waits for it (if the thread cannot start, it loads then). `who`
/// starts the log lines (`ftrace`, `linux.perf`).
pub fn in_background(who: &'static str) -> LazySymbols {
    match std::thread::Builder::new()
        .name("ksyms-load".into())
        .spawn(move || {
            crate::base::own_threads::register_current("ksyms-load");
            load_logged(who)
        }) {
        Ok(h) => LazySymbols::new(move || h.join().unwrap_or_default()),
        Err(_) => LazySymbols::new(move || load_logged(who)),
    }
}
