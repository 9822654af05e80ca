//! OS-facing helpers. The only layer that may use nix/libc/raw fds.

pub mod child_process;
pub mod daemonize;
pub mod event_loop;
pub mod log;
pub mod own_threads;
pub mod pidfd;
pub mod shm;
pub mod sock_addr;
pub mod sys;
pub mod test_loop;
pub mod timers;
pub mod unix_socket;
