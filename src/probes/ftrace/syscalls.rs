//! `syscall_events`: syscall names to this build's arch numbers, and the
//! kernel filter that keeps only those on raw_syscalls/sys_{enter,exit}.
//! The table holds the common syscalls only; other names are unknown.

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
}
