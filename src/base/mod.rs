//! OS-facing helpers. The only layer that may use nix/libc/raw fds.
pub mod shm;
