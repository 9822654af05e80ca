//! The websocket bridge's wire formats, without I/O: the HTTP upgrade
//! ([`handshake`]), websocket frames ([`frame`]) and the two primitives
//! the handshake needs ([`sha1`], [`base64`]).

pub mod base64;
pub mod frame;
pub mod handshake;
pub mod sha1;
