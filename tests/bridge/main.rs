//! Integration tests: bridge. One binary; each module was its own file.

#[path = "../support/mod.rs"]
mod support;

mod traced_relay_daemon;
mod traced_relay_dies;
mod traced_relay_netns;
mod traced_relay_real_traced;
mod traced_relay_tcp;
mod traced_relay_vsock;
mod traced_relay_wire_real;
mod websocket_bridge;
