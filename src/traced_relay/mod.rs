//! `traced_relay`'s pieces: the relay protocol's messages and rules
//! ([`wire`], pure) and what the relay reports about its machine
//! ([`machine`]) and the daemon's data path ([`forward`]).

pub mod forward;
pub mod machine;
pub mod wire;
