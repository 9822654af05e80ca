//! OS-facing helpers. The only layer that may use nix/libc/raw fds.
pub mod shm;
//! The only layer that touches the OS: event loop, sockets, logging.

pub mod event_loop;
pub mod log;
pub mod sock_addr;
pub mod test_loop;
pub mod timers;
pub mod unix_socket;
