//! `websocket_bridge`: lets the Perfetto UI record from this machine.
//!
//! The UI's "Linux (websocket)" target opens `ws://127.0.0.1:8037/traced`
//! and speaks the consumer IPC protocol itself; the bridge passes every
//! message's bytes unchanged to a fresh connection to traced's consumer
//! socket, and traced's bytes back as binary messages. `/adb` does the
//! same with an adb server. [`wire`] holds the pure parsers, [`bridge`]
//! the event loop.

pub mod bridge;
pub mod upstream;
pub mod wire;
