//! The only layer that touches the OS: event loop, sockets, logging.

pub mod event_loop;
pub mod log;
pub mod sock_addr;
pub mod sys;
pub mod test_loop;
pub mod timers;
pub mod unix_socket;
