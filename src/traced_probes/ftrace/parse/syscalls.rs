//! `syscall_events`: syscall names to this build's arch numbers, the
//! kernel filter on raw_syscalls/sys_{enter,exit} (the union of what every
//! session of a tracefs instance wants) and the per-session filter that
//! gives each session only its own syscalls back.
//! The table holds the common syscalls only; other names are unknown.

use super::translate::{read_int, TranslationTable};

#[cfg(target_arch = "x86_64")]
#[rustfmt::skip]
const TABLE: &[(&str, u32)] = &[
    ("read", 0), ("write", 1), ("open", 2), ("close", 3), ("stat", 4), ("fstat", 5),
    ("lstat", 6), ("poll", 7), ("lseek", 8), ("mmap", 9), ("mprotect", 10),
    ("munmap", 11), ("brk", 12), ("rt_sigaction", 13), ("rt_sigprocmask", 14),
    ("ioctl", 16), ("pread64", 17), ("pwrite64", 18), ("readv", 19), ("writev", 20),
    ("access", 21), ("pipe", 22), ("select", 23), ("sched_yield", 24), ("mremap", 25),
    ("madvise", 28), ("dup", 32), ("dup2", 33), ("nanosleep", 35), ("getpid", 39),
    ("sendfile", 40), ("socket", 41), ("connect", 42), ("accept", 43), ("sendto", 44),
    ("recvfrom", 45), ("sendmsg", 46), ("recvmsg", 47), ("bind", 49), ("listen", 50),
    ("clone", 56), ("fork", 57), ("vfork", 58), ("execve", 59), ("exit", 60),
    ("wait4", 61), ("kill", 62), ("uname", 63), ("fcntl", 72), ("fsync", 74),
    ("fdatasync", 75), ("ftruncate", 77), ("getcwd", 79), ("chdir", 80), ("rename", 82),
    ("mkdir", 83), ("rmdir", 84), ("unlink", 87), ("readlink", 89), ("chmod", 90),
    ("getuid", 102), ("getppid", 110), ("prctl", 157), ("sync", 162), ("gettid", 186),
    ("futex", 202), ("sched_setaffinity", 203), ("sched_getaffinity", 204),
    ("getdents64", 217), ("set_tid_address", 218), ("clock_gettime", 228),
    ("clock_nanosleep", 230), ("exit_group", 231), ("epoll_wait", 232),
    ("epoll_ctl", 233), ("tgkill", 234), ("openat", 257), ("mkdirat", 258),
    ("newfstatat", 262), ("unlinkat", 263), ("renameat", 264), ("readlinkat", 267),
    ("faccessat", 269), ("pselect6", 270), ("ppoll", 271), ("splice", 275),
    ("epoll_pwait", 281), ("accept4", 288), ("eventfd2", 290), ("epoll_create1", 291),
    ("dup3", 292), ("pipe2", 293), ("prlimit64", 302), ("getrandom", 318),
    ("memfd_create", 319), ("execveat", 322), ("statx", 332), ("io_uring_setup", 425),
    ("io_uring_enter", 426), ("clone3", 435), ("close_range", 436), ("faccessat2", 439),
];

#[cfg(target_arch = "aarch64")]
#[rustfmt::skip]
const TABLE: &[(&str, u32)] = &[
    ("getcwd", 17), ("eventfd2", 19), ("epoll_create1", 20), ("epoll_ctl", 21),
    ("epoll_pwait", 22), ("dup", 23), ("dup3", 24), ("fcntl", 25), ("ioctl", 29),
    ("mkdirat", 34), ("unlinkat", 35), ("renameat", 38), ("faccessat", 48), ("chdir", 49),
    ("openat", 56), ("close", 57), ("pipe2", 59), ("getdents64", 61), ("lseek", 62),
    ("read", 63), ("write", 64), ("readv", 65), ("writev", 66), ("pread64", 67),
    ("pwrite64", 68), ("sendfile", 71), ("pselect6", 72), ("ppoll", 73), ("splice", 76),
    ("readlinkat", 78), ("newfstatat", 79), ("fstat", 80), ("sync", 81), ("fsync", 82),
    ("fdatasync", 83), ("exit", 93), ("exit_group", 94), ("set_tid_address", 96),
    ("futex", 98), ("nanosleep", 101), ("clock_gettime", 113), ("clock_nanosleep", 115),
    ("sched_setaffinity", 122), ("sched_getaffinity", 123), ("sched_yield", 124),
    ("kill", 129), ("tgkill", 131), ("rt_sigaction", 134), ("rt_sigprocmask", 135),
    ("uname", 160), ("prctl", 167), ("getpid", 172), ("getppid", 173), ("getuid", 174),
    ("gettid", 178), ("socket", 198), ("bind", 200), ("listen", 201), ("accept", 202),
    ("connect", 203), ("sendto", 206), ("recvfrom", 207), ("sendmsg", 211),
    ("recvmsg", 212), ("brk", 214), ("munmap", 215), ("mremap", 216), ("clone", 220),
    ("execve", 221), ("mmap", 222), ("mprotect", 226), ("madvise", 233), ("accept4", 242),
    ("wait4", 260), ("prlimit64", 261), ("getrandom", 278), ("memfd_create", 279),
    ("execveat", 281), ("statx", 291), ("io_uring_setup", 425), ("io_uring_enter", 426),
    ("clone3", 435), ("close_range", 436), ("faccessat2", 439),
];

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const TABLE: &[(&str, u32)] = &[];

/// The number of syscall `name` (with or without a `sys_` prefix).
pub fn syscall_number(name: &str) -> Option<u32> {
    let n = name.strip_prefix("sys_").unwrap_or(name);
    TABLE.iter().find(|(t, _)| *t == n).map(|(_, id)| *id)
}

/// Splits names into known numbers (sorted, unique) and unknown names.
pub fn resolve(names: &[String]) -> (Vec<u32>, Vec<String>) {
    let (mut ids, mut unknown) = (Vec::new(), Vec::new());
    for n in names {
        match syscall_number(n) {
            Some(id) => ids.push(id),
            None => unknown.push(n.clone()),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    (ids, unknown)
}

/// The tracepoint filter keeping only `ids` (`id == 1 || id == 2`).
pub fn filter_expr(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| format!("id == {i}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// What one data source wants of raw_syscalls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyscallWant {
    /// raw_syscalls enabled without `syscall_events`: every syscall.
    All,
    /// Only these numbers (sorted, unique, never empty).
    Only(Vec<u32>),
}

/// The kernel filter for all sessions of one instance: `"0"` (no filter)
/// if any wants every syscall, else `id == a || id == b ...` over the
/// union. `None` when no session wants raw_syscalls at all.
pub fn kernel_filter<'a>(wants: impl IntoIterator<Item = &'a SyscallWant>) -> Option<String> {
    let mut union: Vec<u32> = Vec::new();
    let mut any = false;
    for w in wants {
        any = true;
        match w {
            SyscallWant::All => return Some("0".to_string()),
            SyscallWant::Only(ids) => union.extend_from_slice(ids),
        }
    }
    if !any {
        return None;
    }
    union.sort_unstable();
    union.dedup();
    Some(if union.is_empty() {
        "0".to_string()
    } else {
        filter_expr(&union)
    })
}

/// Where the `id` field of one raw_syscalls event sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct IdField {
    ftrace_id: u32,
    offset: u16,
    size: u16,
}

/// Per-session filter: raw_syscalls records whose `id` is not one of the
/// session's go; every other event passes. Needed because the kernel
/// filter is the union over sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyscallFilter {
    events: Vec<IdField>,
    /// Bitmap over syscall numbers.
    bits: Vec<u64>,
}

impl SyscallFilter {
    /// For `ids` on sys_enter and sys_exit as `table` knows them.
    pub fn new(table: &TranslationTable, ids: &[u32]) -> SyscallFilter {
        let mut f = SyscallFilter::default();
        for name in ["sys_enter", "sys_exit"] {
            let Some(ev) = table.event_by_name("raw_syscalls", name) else {
                continue;
            };
            if let Some(field) = ev.format.field("id") {
                f.events.push(IdField {
                    ftrace_id: ev.ftrace_id,
                    offset: field.offset,
                    size: field.size,
                });
            }
        }
        for &id in ids {
            let (w, b) = (id as usize / 64, id % 64);
            if f.bits.len() <= w {
                f.bits.resize(w + 1, 0);
            }
            f.bits[w] |= 1 << b;
        }
        f
    }

    fn has(&self, id: i64) -> bool {
        usize::try_from(id).is_ok_and(|i| {
            self.bits
                .get(i / 64)
                .is_some_and(|w| w & (1 << (i % 64)) != 0)
        })
    }

    /// Whether the record of event `ftrace_id` is kept. A raw_syscalls
    /// record too short to hold its id is dropped.
    pub fn allows(&self, ftrace_id: u32, record: &[u8]) -> bool {
        match self.events.iter().find(|e| e.ftrace_id == ftrace_id) {
            None => true,
            Some(e) => {
                read_int(record, e.offset as usize, e.size as usize).is_some_and(|id| self.has(id))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_for_this_arch() {
        let names: Vec<String> = ["sys_getpid", "openat", "getpid", "no_such_call"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let (ids, unknown) = resolve(&names);
        assert_eq!(unknown, ["no_such_call"]);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(ids, [39, 257]);
        #[cfg(target_arch = "aarch64")]
        assert_eq!(ids, [56, 172]);
        assert_eq!(filter_expr(&[39, 257]), "id == 39 || id == 257");
        assert_eq!(filter_expr(&[]), "");
    }

    #[test]
    fn kernel_filter_is_the_union() {
        use SyscallWant::*;
        assert_eq!(kernel_filter(&[]), None);
        assert_eq!(
            kernel_filter(&[Only(vec![39]), Only(vec![1, 39])]).unwrap(),
            "id == 1 || id == 39"
        );
        // One session wanting everything lifts the filter for all.
        assert_eq!(kernel_filter(&[Only(vec![39]), All]).unwrap(), "0");
        assert_eq!(kernel_filter(&[Only(vec![])]).unwrap(), "0");
    }

    const ENTER: &str = "name: sys_enter\nID: 21\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:long id;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield:unsigned long args[6];\toffset:16;\tsize:48;\tsigned:0;\n\n\
print fmt: \"NR %ld\", REC->id\n";

    fn record(id: i64, len: usize) -> Vec<u8> {
        let mut r = vec![0u8; len];
        r[8..16].copy_from_slice(&id.to_le_bytes());
        r
    }

    #[test]
    fn session_filter_keeps_its_own_ids() {
        let table = TranslationTable::build(&|g, n| {
            (g == "raw_syscalls" && n == "sys_enter").then(|| ENTER.to_string())
        });
        let ev = table.event_by_name("raw_syscalls", "sys_enter").unwrap();
        let id = ev.ftrace_id;
        let f = SyscallFilter::new(&table, &[39, 257]);
        assert!(f.allows(id, &record(39, 64)));
        assert!(f.allows(id, &record(257, 64)));
        assert!(!f.allows(id, &record(1, 64)));
        assert!(!f.allows(id, &record(-1, 64)));
        assert!(!f.allows(id, &record(100_000, 64)));
        // Truncated record: dropped, no panic.
        assert!(!f.allows(id, &record(39, 64)[..12]));
        // Other events pass untouched.
        assert!(f.allows(id + 1, &[]));
    }
}
