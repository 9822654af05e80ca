//! `traced_relay`'s pieces: the relay protocol's messages and rules
//! ([`wire`], pure) and what the relay reports about its machine
//! ([`machine`]). The relay daemon and traced's endpoint come next.

pub mod machine;
pub mod wire;
