//! `traced_relay`'s pieces: the relay protocol's messages and rules
//! ([`wire`], pure) and what the relay reports about its machine
//! ([`machine`]), the daemon's data path ([`forward`]) and its RelayPort
//! connection ([`relay_port`]).

pub mod forward;
pub mod machine;
pub mod relay_port;
pub mod wire;
